"""Global RNGs by lineage: an unseeded RNG is served any stored run, a seeded one its own.

Scripts run in fresh interpreters, as a user runs them: a process that never
seeds draws from entropy, so only the lineage rule lets its second run hit; a
seeded process must get, on any mix of hits and misses, what a straight run
without memostore gets.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script

from memostore.effects.mt19937 import seeded_with_value

pytest.importorskip("torch")

# MKL may round one matrix product differently from one process to the next unless
# told to be reproducible; these tests compare separate runs bit for bit.
REPRODUCIBLE = {"MKL_CBWR": "COMPATIBLE"}


def _run(script: Path, *args: str, store: Path, **env: str) -> tuple[str, list[str], str]:
    """(stdout, ["fn hit|miss", ...], stderr) of *script* run with one verbose line per call."""
    proc = run_script(
        script,
        *args,
        env={**REPRODUCIBLE, "MEMOSTORE_DIR": str(store), "MEMOSTORE_VERBOSE": "1", **env},
    )
    calls = re.findall(r"^memostore: (\w+): (hit|miss)", proc.stderr, re.M)
    return proc.stdout, [f"{name} {kind}" for name, kind in calls], proc.stderr


TRAIN = """
import random, sys
import numpy as np
import torch
import torch.nn as nn
from memostore import memo

SEED = sys.argv[1] if len(sys.argv) > 1 else ""
if SEED.startswith("early"):  # seeded before memostore is imported
    n = int(SEED[5:])
    random.seed(n); np.random.seed(n); torch.manual_seed(n)


@memo
def train(epochs):
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 1))
    data = torch.utils.data.TensorDataset(torch.linspace(-1, 1, 64).reshape(16, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(epochs):
        for (x,) in loader:
            noise = random.gauss(0, 0.1) + float(np.random.normal(0, 0.1))
            loss = (model(x) - noise).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(round(loss.item(), 6))
    return model, losses


@memo
def evaluate(model):
    model.train()  # dropout on: draws again
    return round(model(torch.ones(2, 4)).sum().item(), 6)


if SEED.isdigit():
    torch.manual_seed(int(SEED))  # torch only: random and numpy stay unseeded
model, losses = train(2)
print("losses", losses)
print("weights", [round(float(p.sum()), 5) for p in model.parameters()])
print("evaluate", evaluate(model))
print("next", torch.rand(1).item(), random.random(), float(np.random.rand()))
"""


@pytest.mark.slow
def test_an_unseeded_script_hits_in_later_processes_and_gets_the_stored_run(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, "train.py", TRAIN)
    store = tmp_path / "store"
    first, calls, _ = _run(script, store=store)
    assert calls == ["train miss", "evaluate miss"]
    for _ in range(2):
        again, calls, err = _run(script, store=store)
        assert calls == ["train hit", "evaluate hit"]
        assert "unseeded RNG (numpy, python, torch): served the stored run" in err
        # The stored result, and every RNG left where the stored run left it.
        assert again == first


@pytest.mark.slow
def test_a_seeded_script_hits_with_its_own_seed_only(tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", TRAIN)
    store = tmp_path / "store"
    unseeded, calls, _ = _run(script, store=store)
    assert calls == ["train miss", "evaluate miss"]
    zero, calls, err = _run(script, "0", store=store)
    assert calls == ["train miss", "evaluate miss"], "seeded: an unseeded run is not its answer"
    assert "seeded: start state differs (torch seeded" in err
    one, calls, _ = _run(script, "1", store=store)
    assert calls == ["train miss", "evaluate miss"]
    assert one != zero
    # The newest stored run is seed 1's: seed 0's is found by its own start state, with
    # random and numpy (unseeded) free to differ.
    again, calls, err = _run(script, "0", store=store)
    assert calls == ["train hit", "evaluate hit"]
    assert "unseeded RNG (numpy, python): served the stored run" in err
    assert again.splitlines()[:3] == zero.splitlines()[:3]
    # An unseeded process is served whichever run is newest.
    _, calls, _ = _run(script, store=store)
    assert calls == ["train hit", "evaluate hit"]
    assert unseeded != zero


@pytest.mark.slow
def test_seeding_before_memostore_is_imported_counts(tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", TRAIN)
    store = tmp_path / "store"
    zero, calls, _ = _run(script, "early0", store=store)
    assert calls == ["train miss", "evaluate miss"]
    again, calls, _ = _run(script, "early0", store=store)
    assert calls == ["train hit", "evaluate hit"]
    assert again == zero
    _, calls, err = _run(script, "early1", store=store)
    assert calls == ["train miss", "evaluate miss"]
    assert "torch seeded (its state shows a seed the program chose)" in err


EPOCHS = """
import hashlib, random, sys
import numpy as np
import torch
import torch.nn as nn
from memostore import memo


def seed_everything(seed):  # as Lightning's and transformers' do
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


seed_everything(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.linspace(-1, 1, 96).reshape(24, 4))
loader = torch.utils.data.DataLoader(data, batch_size=6, shuffle=True)


@memo
def train_epoch(model, opt, loader, epoch):
    model.train()
    for (x,) in loader:
        target = random.random() + float(np.random.rand())
        loss = (model(x) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return round(loss.item(), 6)


losses = [train_epoch(model, opt, loader, e) for e in map(int, sys.argv[1].split(","))]
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
    for _, value in sorted(opt.state[p].items()):  # a restored dict is in sorted order
        h.update(value.numpy().tobytes())


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


print("losses", losses)
print("weights and optimizer", h.hexdigest()[:16])
print("torch", digest(torch.get_rng_state().numpy().tobytes()))
print("python", digest(repr(random.getstate()).encode()))
print("numpy", digest(repr(np.random.get_state()).encode()))
"""


@pytest.mark.slow
def test_a_seeded_mix_of_hits_and_misses_equals_a_straight_run(tmp_path: Path) -> None:
    script = write_script(tmp_path, "epochs.py", EPOCHS)
    plain = write_script(tmp_path, "plain.py", EPOCHS.replace("@memo\n", ""))
    straight = run_script(plain, "1,2,3", env=REPRODUCIBLE).stdout
    store = tmp_path / "store"
    _, calls, _ = _run(script, "1", store=store)
    assert calls == ["train_epoch miss"]
    mixed, calls, _ = _run(script, "1,2,3", store=store)
    assert calls == ["train_epoch hit", "train_epoch miss", "train_epoch miss"]
    assert mixed == straight
    again, calls, _ = _run(script, "1,2,3", store=store)
    assert calls == ["train_epoch hit"] * 3
    assert again == straight


LINEAGE = """
import random
from random import seed as seed_bound_early
import numpy as np
import torch
from memostore import memo
from memostore.effects import seeding

@memo
def f():
    pass

def show(label):
    seeding.read()  # what a memoised call reads
    print(label, *(int(seeding.lineage(n).seeded) for n in ("python", "numpy", "torch")))

show("start")
random.seed(1); np.random.seed(3); torch.manual_seed(3)
show("seeded")
random.seed(); np.random.seed(); torch.seed()
show("entropy")
with torch.random.fork_rng():
    torch.manual_seed(0)
    show("in fork")
show("after fork")
random.setstate(random.getstate()); np.random.set_state(np.random.get_state())
torch.set_rng_state(torch.get_rng_state())
show("set state")
random.seed(); np.random.seed(); torch.seed()
seed_bound_early(5)  # bound before memostore wrapped random.seed: seen from the state
torch.default_generator.manual_seed(9)  # a generator's own method: seen from its seed
show("unwatched")
"""


@pytest.mark.slow
def test_seeding_functions_set_the_lineage(tmp_path: Path) -> None:
    script = write_script(tmp_path, "lineage.py", LINEAGE)
    out = run_script(script, env={"MEMOSTORE_DIR": str(tmp_path / "store")}).stdout
    assert out.splitlines() == [
        "start 0 0 0",
        "seeded 1 1 1",
        "entropy 0 0 0",
        "in fork 0 0 1",
        "after fork 0 0 0",
        "set state 1 1 1",
        "unwatched 1 0 1",
    ]


BEFORE = """
import random, sys
import numpy as np
import torch

what = sys.argv[1]
if what == "seeded":
    random.seed(2); np.random.seed(2); torch.manual_seed(2)
elif what == "drawn":  # drawn from before memostore: the state cannot tell, so seeded
    random.random(); np.random.rand()
from memostore import memo
from memostore.effects import seeding

if what == "drawn-after":  # memostore met the RNGs at its import: their lineage is known
    random.random(); np.random.rand()

@memo
def f():
    pass

seeding.read()  # what a memoised call reads
print(*(int(seeding.lineage(n).seeded) for n in ("python", "numpy", "torch")))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("what", "expected"),
    [("none", "0 0 0"), ("seeded", "1 1 1"), ("drawn", "1 1 0"), ("drawn-after", "0 0 0")],
)
def test_seeding_before_memostore_is_read_from_the_state(
    tmp_path: Path, what: str, expected: str
) -> None:
    script = write_script(tmp_path, "before.py", BEFORE)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    assert run_script(script, what, env=env).stdout.strip() == expected


def _python_state(rng: random.Random) -> tuple[list[int], int]:
    internal = rng.getstate()[1]
    return list(internal[:624]), internal[624]


SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 2**64 + 5, -7, 3.5, "run-a", b"x" * 500, 2**19000]


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_a_mersenne_twister_seeded_with_a_value_shows_it(seed: Any) -> None:
    assert seeded_with_value(*_python_state(random.Random(seed))) is True
    np = pytest.importorskip("numpy")
    if isinstance(seed, int) and 0 <= seed < 2**32:
        state = np.random.RandomState(seed).get_state(legacy=False)["state"]
        assert seeded_with_value([int(w) for w in state["key"]], int(state["pos"])) is True


def test_a_mersenne_twister_seeded_from_entropy_or_drawn_from_shows_it() -> None:
    assert seeded_with_value(*_python_state(random.Random())) is False
    drawn = random.Random(0)
    drawn.random()
    assert seeded_with_value(*_python_state(drawn)) is None
    twisted = random.Random(0)
    for _ in range(312):  # 624 words: the position is back at 624, after a twist
        twisted.random()
    assert seeded_with_value(*_python_state(twisted)) is None
    np = pytest.importorskip("numpy")
    for rs, expected in ((np.random.RandomState(), False), (np.random.RandomState([1, 2]), True)):
        state = rs.get_state(legacy=False)["state"]
        assert seeded_with_value([int(w) for w in state["key"]], int(state["pos"])) is expected


RANKS = """
import os, random, sys
import torch
import torch.distributed as dist
from memostore import memo

dist.init_process_group("gloo")
rank = dist.get_rank()
if sys.argv[1] == "by-rank":
    torch.manual_seed(rank)  # each rank its own seed: rank 0's run is not rank 1's


@memo
def noisy(n):
    with open(f"{os.environ['RAN']}.{dist.get_rank()}", "a") as f:
        f.write("x")
    return torch.rand(n).tolist(), random.random()


with open(f"{os.environ['RAN']}.said.{rank}", "w") as f:
    f.write(repr(noisy(2)))  # a file each: two ranks' lines on one stdout can interleave
import gc, weakref
world = weakref.ref(dist.group.WORLD)
dist.destroy_process_group()
gc.collect()
# memostore keeps no destroyed group alive: it would be torn down while the interpreter
# finalizes, where gloo's threads can abort the process.
assert world() is None, "the destroyed process group is still referenced"
"""


def _ranks(
    script: Path, mode: str, store: Path, ran: Path
) -> tuple[dict[int, str], dict[int, int]]:
    """Run *script* as a torchrun job of two ranks: (what each printed, bodies run per rank)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "MEMOSTORE_DIR": str(store), "RAN": str(ran), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", str(script), mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(script.parent),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = {r: Path(f"{ran}.said.{r}").read_text() for r in (0, 1)}
    runs = {r: len(Path(f"{ran}.{r}").read_text()) for r in (0, 1) if Path(f"{ran}.{r}").exists()}
    return said, runs


@pytest.mark.slow
def test_each_rank_has_its_own_lineage(tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is needed")
    script = write_script(tmp_path, "ranks.py", RANKS)
    store, ran = tmp_path / "store", tmp_path / "ran"
    first, runs = _ranks(script, "unseeded", store, ran)
    assert runs == {0: 1, 1: 1}
    # Unseeded ranks: the next job hits on both; their results differed, so each rank
    # is served its own stored result.
    second, runs = _ranks(script, "unseeded", store, ran)
    assert runs == {0: 1, 1: 1}
    assert second == first and first[0] != first[1]
    # Ranks seeded differently: rank 1 cannot take rank 0's run, so every rank computes.
    _ranks(script, "by-rank", store, ran)
    _, runs = _ranks(script, "by-rank", store, ran)
    assert runs == {0: 3, 1: 3}
