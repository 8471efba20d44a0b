"""Results that differ by rank, DTensors and FSDP2 models: real ``torchrun`` jobs of gloo ranks.

One store, four jobs, each saying ``RANK r WHAT value`` lines (see
``test_distributed.py`` for the pattern): a process of its own (one rank)
stores a model, a job of two ranks stores its own results and restores the
one-rank model resharded, a second two-rank job restores everything, and a
last one-rank process restores the two-rank model resharded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_script
from test_distributed import (
    TIMEOUT,
    TORCHRUN,
    _env,
    _free_port,
    _runs,
    _said,
    _said_in,
    _standalone,
)

from memostore import Store
from memostore.errors import DecodeError, MalformedObject
from memostore.odb.objects import KIND_VALUE, Doc
from memostore.values.decoding import Decoder
from memostore.values.encoding import Encoder, StoreSink
from memostore.values.rank_results import as_rank, decode_result, per_rank_doc
from memostore.values.summaries import describe, summarize_value

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available() and TORCHRUN.exists()),
    reason="torch.distributed with gloo, and torchrun next to the interpreter, are needed",
)

JOB = """\
import hashlib, os, threading, warnings
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from memostore import MemostoreWarning, memo

dist.init_process_group("gloo")
rank = dist.get_rank()
# Read once, here: a variable a memoised body reads is a condition of its hits.
OUT, SAID = os.environ["OUT"], os.environ["SAID"]


def count(name):
    with open(os.path.join(OUT, f"{name}.{dist.get_rank()}"), "a") as f:
        f.write("x")


def say(what, value):
    with open(f"{SAID}.{rank}", "a") as f:
        print(f"RANK {rank} {what} {value}", file=f)


def shown(message, category, *args, **kwargs):
    if issubclass(category, MemostoreWarning):
        say("warned", " ".join(str(message).splitlines()))


warnings.showwarning = shown
warnings.simplefilter("always", MemostoreWarning)


def digest(tensors):
    data = b"".join(t.detach().contiguous().numpy().tobytes() for t in tensors)
    return hashlib.sha256(data).hexdigest()[:16]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 5)  # frozen: FSDP shards it all the same
        self.layers = torch.nn.ModuleList([torch.nn.Linear(5, 5) for _ in range(2)])
        self.head = torch.nn.Linear(5, 3)  # 3 rows over 2 ranks: uneven shards
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x).relu()
        return self.head(x) * self.scale


@memo
def train(steps):
    count(f"train{steps}")
    torch.manual_seed(0)
    model = Net()
    model.embed.requires_grad_(False)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01)
    data = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batches
    for _ in range(steps):
        model(torch.randn(8, 4, generator=data)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


@memo
def shard(n):
    count("shard")
    return [float(dist.get_rank())] * n


@memo
def odd(n):
    count("odd")
    return threading.Lock() if dist.get_rank() == 1 else n  # rank 1's cannot be stored


@memo
def sharded_values():
    count("values")
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.arange(15.0).reshape(5, 3)
    mine = full.chunk(dist.get_world_size())[dist.get_rank()]
    return {
        "rows": DTensor.from_local(mine, mesh, [Shard(0)], shape=full.shape, stride=(3, 1)),
        "all": DTensor.from_local(torch.ones(2), mesh, [Replicate()]),
    }


def report(tag, model, opt):
    params = list(model.parameters())
    state = [v for p in params if p in opt.state for _, v in sorted(opt.state[p].items())]
    local = [v.to_local() if isinstance(v, DTensor) else v for v in state]
    say(f"{tag}.local", digest([p.to_local() for p in params]) + " " + digest(local))
    full = [v.full_tensor() if isinstance(v, DTensor) else v for v in state]
    say(f"{tag}.full", digest([p.full_tensor() for p in params]) + " " + digest(full))
    say(f"{tag}.bound", sum(p in opt.state for p in params))
    data = torch.Generator().manual_seed(100 + dist.get_rank())
    model(torch.randn(8, 4, generator=data)).pow(2).mean().backward()
    opt.step()
    say(f"{tag}.stepped", digest([p.to_local() for p in model.parameters()]))


for steps in os.environ["TRAIN"].split():
    report(f"train{steps}", *train(int(steps)))
if os.environ.get("SHARD"):
    say("shard", shard(3))
    values = sharded_values()
    rows, ones = values["rows"], values["all"]
    say("rows", [rows.to_local().tolist(), rows.placements, tuple(rows.shape)])
    say("all", [ones.to_local().tolist(), rows.full_tensor().sum().item()])
    if dist.get_world_size() > 1:
        say("odd", type(odd(4)).__name__)
dist.barrier()
dist.destroy_process_group()
"""


def _one_rank(script: Path, env: dict[str, str]) -> str:
    """The script as a process of its own: a job of one rank (no torchrun)."""
    env = {**env, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(_free_port())
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _said_in(env)


@pytest.mark.slow
def test_sharded_results_restore_per_rank_and_reshard(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "store"
    out.mkdir()
    script = write_script(tmp_path, "job.py", JOB)
    env = {name: _env(out, store, name) for name in ("alone", "first", "second", "after")}

    alone = _one_rank(script, {**env["alone"], "TRAIN": "2"})  # stored by one rank
    first = _standalone(script, {**env["first"], "TRAIN": "3 2", "SHARD": "1"})
    ran = {name: _runs(out, name) for name in ("train3", "train2", "shard", "values")}
    second = _standalone(script, {**env["second"], "TRAIN": "3", "SHARD": "1"})
    after = _one_rank(script, {**env["after"], "TRAIN": "3", "SHARD": "1"})

    # The second job ran no body: every result came from the store.
    assert ran == {
        "train3": {0: 1, 1: 1},
        "train2": {0: 1},  # the one-rank process only: the job restored it resharded
        "shard": {0: 1, 1: 1},
        "values": {0: 1, 1: 1},
    }
    assert _runs(out, "train3") == ran["train3"] and _runs(out, "values") == ran["values"]
    for said in (first, second):
        # Rank 1's result cannot be hashed: both ranks warn, return their own, store nothing.
        warned = _said(said, "warned")
        assert "on rank 1 is not stored: its result cannot be hashed" in warned[1], warned
        assert "not stored: rank 1 could not hash or store its result" in warned[0], warned
        assert _said(said, "odd") == {0: "int", 1: "lock"}
        # A result that differs by rank: each rank restores its own.
        assert _said(said, "shard") == {0: "[0.0, 0.0, 0.0]", 1: "[1.0, 1.0, 1.0]"}
        assert _said(said, "rows") == {
            0: "[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]], (Shard(dim=0),), (5, 3)]",
            1: "[[[9.0, 10.0, 11.0], [12.0, 13.0, 14.0]], (Shard(dim=0),), (5, 3)]",
        }
        assert _said(said, "all") == {0: "[[1.0, 1.0], 105.0]", 1: "[[1.0, 1.0], 105.0]"}
    # FSDP2: the same local shards and optimizer state on every rank, bound to the
    # restored parameters, and one more step after the hit equals it after the miss.
    for what in ("local", "full", "bound", "stepped"):
        assert _said(second, f"train3.{what}") == _said(first, f"train3.{what}"), what
    assert _said(first, "train3.bound") == {0: "6", 1: "6"}  # the frozen embed has none
    local = _said(first, "train3.local")
    assert local[0] != local[1]  # each rank its own shard
    # Resharded: the one-rank model in a job of two, the two-rank one in one rank.
    assert _said(first, "train2.full") == {0: _said(alone, "train2.full")[0]} | {
        1: _said(alone, "train2.full")[0]
    }
    assert _said(after, "train3.full") == {0: _said(first, "train3.full")[0]}
    assert _said(after, "rows")[0].endswith("(Shard(dim=0),), (5, 3)]")
    assert _said(after, "rows")[0].startswith("[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0")
    assert _said(after, "all") == {0: "[[1.0, 1.0], 105.0]"}
    # ... but a per-rank result of plain values cannot be: a miss that says why.
    assert _said(after, "shard") == {0: "[0.0, 0.0, 0.0]"}
    warned = _said(after, "warned")[0]
    assert "stored per rank by a job of 2 ranks" in warned and "run a job of 2 ranks" in warned
    assert _runs(out, "shard") == {0: 2, 1: 1}
    assert _runs(out, "odd") == {0: 2, 1: 2}

    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "memostore_cli.main",
            "--store",
            str(store),
            "show",
            "__main__:sharded_values",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "per-rank result (2 ranks)" in shown.stdout, shown.stdout + shown.stderr


def _per_rank(store: Store, results: list[object]) -> str:
    encoder = Encoder(StoreSink(store.objects), verify=True)
    ids = [encoder.encode_value(r) for r in results]
    return store.objects.add_doc(per_rank_doc(ids))


def test_a_per_rank_result_is_each_rank_s_own_and_no_other_size_s(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    stored = _per_rank(store, [[0.0, 0.0], [1.0, 1.0]])
    for rank in (0, 1):
        with as_rank(rank, 2):
            assert decode_result(Decoder(store.objects), stored) == [float(rank)] * 2
    for world, where in ((1, "a process of its own"), (3, "a job of 3 ranks")):
        with pytest.raises(DecodeError, match=f"by a job of 2 ranks and is restored in {where}"):
            if world == 1:
                decode_result(Decoder(store.objects), stored)
            else:
                with as_rank(0, world):
                    decode_result(Decoder(store.objects), stored)
    # Stored per rank by ranks that agreed (the call was seen to differ before): not
    # every rank's result for a job of another size either.
    agreed = _per_rank(store, [[5], [5]])
    with pytest.raises(DecodeError, match="the call's result depends on the rank"):
        decode_result(Decoder(store.objects), agreed)
    # A hostile document: a clear DecodeError, never another exception.
    for node in (
        {"$": "per_rank", "world": 2, "results": [{"$": "ref"}, {"$": "ref", "id": stored}]},
        {"$": "per_rank", "world": 3, "results": [{"$": "ref", "id": stored}] * 2},
    ):
        bad = store.objects.add_doc(Doc(KIND_VALUE, {"node": node}))
        with pytest.raises((DecodeError, MalformedObject)):
            decode_result(Decoder(store.objects), bad)
    garbled = [{"$": "torch.dtensor", "local": r, "mesh": 5, "placements": 7} for r in (1, 2)]
    docs = [store.objects.add_doc(Doc(KIND_VALUE, {"node": n})) for n in garbled]
    bad = store.objects.add_doc(per_rank_doc(docs))
    with pytest.raises(DecodeError, match="cannot be put together"):
        decode_result(Decoder(store.objects), bad)
    shown = summarize_value(store.objects, stored)
    assert describe(shown) == "per-rank result (2 ranks), rank 0: [0.0, 0.0]"
