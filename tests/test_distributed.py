"""Memoised calls inside torch.distributed jobs: real ``torchrun`` jobs of two gloo ranks.

Each launch costs seconds on a small machine, so one script per launch holds
several scenarios, and each prints ``RANK r WHAT value`` lines the tests read.
A body appends to a count file per rank (``<name>.<rank>``): "the body ran"
is read from disk. Every launch has a timeout: a rank left waiting in a
memostore collective fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_script

from memostore import MemostoreError, memo
from memostore.distributed import MODES

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
TORCHRUN = Path(sys.executable).with_name("torchrun")
pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available() and TORCHRUN.exists()),
    reason="torch.distributed with gloo, and torchrun next to the interpreter, are needed",
)
TIMEOUT = 90

COMMON = """\
import hashlib, os, time
import torch
import torch.distributed as dist
from memostore import SummaryWriter, memo
from memostore.distributed import RankFailed, RanksDisagree, alone

dist.init_process_group("gloo")
rank = dist.get_rank()


def count(name):
    # dist.get_rank() rather than the global `rank`: a body reading a rank-dependent
    # global is keyed by it, so the ranks' calls would differ.
    with open(os.path.join(os.environ["OUT"], f"{name}.{dist.get_rank()}"), "a") as f:
        f.write("x")


def say(what, value):
    # One file per rank and job: the ranks' standard outputs interleave.
    value = " ".join(str(value).splitlines())
    with open(f"{os.environ['SAID']}.{rank}", "a") as f:
        print(f"RANK {rank} {what} {value}", file=f)
"""

JOB = (
    COMMON
    + """

@memo
def step(x):
    count("step")
    return x * 2


@memo
def train(steps, lr):
    count("train")
    time.sleep(float(os.environ.get("TRAIN_SLEEP", "0")))  # read: a hit needs the same value
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    data = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batches
    writer = SummaryWriter(log_dir=os.path.join(os.environ["OUT"], "train"))
    for i in range(steps):
        loss = ddp(torch.randn(8, 4, generator=data)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        writer.add_scalar("loss", loss.item(), i)
    writer.close()
    return model, opt


@memo
def noisy(values):
    count("noisy")
    values.append(len(values))
    return torch.rand(2)


@memo(distributed="leader")
def prepare(n):
    count("prepare")
    return list(range(n))


@memo
def solo(n):
    count("solo")
    return n + 100


@memo(distributed="per_rank")
def shard(n):
    count("shard")
    return [dist.get_rank()] * n


say("step", step(21))
try:
    step(rank)
except RanksDisagree as exc:
    say("disagree", exc)
twins = os.environ.get("TWINS")
if twins and rank == 0:  # two jobs at once: both rank 0s reach train() together
    open(os.path.join(twins, os.path.basename(os.environ["SAID"])), "w").close()
    deadline = time.time() + 60
    while len(os.listdir(twins)) < 2 and time.time() < deadline:
        time.sleep(0.05)
model, opt = train(3, 0.1)
weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
say("weights", hashlib.sha256(weights).hexdigest())
say("opt", len(opt.state))
torch.manual_seed(1)
values = [7]
drawn = noisy(values)
say("noisy", [drawn.tolist(), values, torch.rand(1).item()])
say("prepare", prepare(5))
say("shard", shard(3))
if rank == 0:
    with alone():  # a call rank 0 alone makes: no decision with the others
        say("solo", solo(1))
w = SummaryWriter(log_dir=os.path.join(os.environ["OUT"], "rank0only"))
w.add_scalar("zero", 1.0, 0)
w.close()
w = SummaryWriter(log_dir=os.path.join(os.environ["OUT"], "every"), all_ranks=True)
w.add_scalar("every", 1.0, 0)
say("logdir", os.path.relpath(w.log_dir, os.environ["OUT"]))
w.close()
dist.destroy_process_group()
"""
)

FAIL = (
    COMMON
    + """

@memo(distributed="leader")
def fetch(n):
    count("fetch")
    raise OSError(f"download {n} failed")


@memo
def body(n):
    count("body")
    dist.barrier()  # a collective inside the body: every rank is in it
    if dist.get_rank() == 1:
        raise ValueError(f"boom {n}")
    return n


try:
    fetch(1)
except Exception as exc:
    say("leader", f"{type(exc).__name__}: {exc}")
try:
    body(2)
except Exception as exc:
    say("body", f"{type(exc).__name__}: {exc}")
    raise
"""
)

NODES = (
    COMMON
    + """

@memo(distributed="leader")
def prepare(n):
    count("prepare")
    return list(range(n))


@memo
def combine(n):
    count("combine")
    return {"n": n}


@memo
def early(n):
    count("early")
    return n * 3


@memo
def mine(n):
    count("mine")
    return [dist.get_rank()] * n  # differs by rank: stored per rank, in each node's store


if dist.get_world_size() == 1:
    say("early", early(5))  # alone: into node A's store before the job, B's after it
    if os.environ.get("AFTER"):
        say("prepare", prepare(4))
        say("combine", combine(2))
else:
    say("prepare", prepare(4))
    say("combine", combine(2))
    say("early", early(5))
    say("mine", mine(2))
    dist.barrier()  # neither node's agent (one hosts the rendezvous store) leaves first
dist.destroy_process_group()
"""
)


def _env(out: Path, store: Path, job: str) -> dict[str, str]:
    return {
        **os.environ,
        "OUT": str(out),
        "SAID": str(out / f"said-{job}"),
        "MEMOSTORE_DIR": str(store),
        "OMP_NUM_THREADS": "1",
    }


def _said_in(env: dict[str, str]) -> str:
    """What the job's ranks said, rank 0's lines first."""
    files = [Path(f"{env['SAID']}.{r}") for r in (0, 1)]
    return "".join(f.read_text() for f in files if f.exists())


def _torchrun(script: Path, env: dict[str, str], *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(TORCHRUN), "--monitor-interval", "0.1", *options, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=str(script.parent),
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the job did not end within {TIMEOUT} s:\n{out}") from None
    return proc.returncode, out


def _standalone(script: Path, env: dict[str, str], check: bool = True) -> str:
    code, out = _finish(_torchrun(script, env, "--standalone", "--nproc_per_node", "2"))
    if check:
        assert code == 0, out
    return _said_in(env)


def _said(out: str, what: str) -> dict[int, str]:
    found = dict((int(r), value) for r, value in re.findall(rf"^RANK (\d) {what} (.*)$", out, re.M))
    return found


def _runs(out: Path, name: str) -> dict[int, int]:
    """How many times the body *name* ran, per rank."""
    return {
        r: len((out / f"{name}.{r}").read_text()) for r in (0, 1) if (out / f"{name}.{r}").exists()
    }


def _store_json(store: Path, *args: str) -> object:
    proc = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_one_decision_for_every_rank_across_two_jobs(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "store"
    out.mkdir()
    script = write_script(tmp_path, "job.py", JOB)
    # Two jobs at once on one store, then a third after them.
    (tmp_path / "twins").mkdir()
    twins = {"TWINS": str(tmp_path / "twins"), "TRAIN_SLEEP": "3"}
    envs = [{**_env(out, store, job), **twins} for job in ("first", "twin")]
    procs = [_torchrun(script, env, "--standalone", "--nproc_per_node", "2") for env in envs]
    for code, output in [_finish(p) for p in procs]:
        assert code == 0, output
    first, twin = (_said_in(env) for env in envs)
    names = ("step", "train", "noisy", "prepare", "shard", "solo")
    ran = {name: _runs(out, name) for name in names}
    second = _standalone(script, {**_env(out, store, "second"), "TRAIN_SLEEP": "3"})
    for said in (first, twin, second):
        assert _said(said, "step") == {0: "42", 1: "42"}
        # A call whose key differs by rank (it read `rank`) raises on every rank.
        disagree = _said(said, "disagree")
        assert set(disagree) == {0, 1} and 'distributed="per_rank"' in disagree[0]
        assert _said(said, "prepare") == {0: "[0, 1, 2, 3, 4]", 1: "[0, 1, 2, 3, 4]"}
        assert _said(said, "shard") == {0: "[0, 0, 0]", 1: "[1, 1, 1]"}
        assert _said(said, "solo") == {0: "101"}
        assert _said(said, "logdir") == {0: "every", 1: os.path.join("every", "rank1")}
    # DDP training: the second job hits on both ranks with the weights of the first.
    weights = [w for said in (first, twin, second) for w in _said(said, "weights").values()]
    assert len(weights) == 6 and len(set(weights)) == 1, weights
    assert _said(second, "opt") == _said(first, "opt") == {0: "2", 1: "2"}
    # Argument effects and RNG states on every rank, as the miss left them.
    assert _said(second, "noisy") == _said(twin, "noisy") == _said(first, "noisy")
    assert "[7, 1]" in _said(first, "noisy")[1]
    # train() ran in one of the two jobs at once, on each of its ranks: the other job's
    # rank 0 waited for its lease (single-flight across jobs), its rank 1 with it.
    assert ran["train"] == {0: 1, 1: 1}
    # The other bodies ran in one or both of those jobs (a job that looked up before
    # the other published, and leased after it had finished, computes too); the
    # leader body on rank 0 only; and the third job ran nothing.
    assert ran["step"][0] == ran["step"][1] in (1, 2)
    assert ran["noisy"][0] == ran["noisy"][1] in (1, 2)
    assert set(ran["prepare"]) == {0} and ran["prepare"][0] in (1, 2)
    assert set(ran["solo"]) == {0} and ran["solo"][0] in (1, 2)
    assert set(ran["shard"]) == {0, 1} and {*ran["shard"].values()} <= {1, 2}  # rank by rank
    assert {name: _runs(out, name) for name in ran} == ran
    # One evaluation per call (its ref names the newest), stored by rank 0 alone; the
    # per_rank call one per rank.
    functions = [e["function"] for e in _store_json(store, "log")]
    for name, n in (("train", 1), ("noisy", 1), ("prepare", 1), ("shard", 2), ("step", 1)):
        assert functions.count(f"__main__:{name}") == n, functions
    # SummaryWriter: rank 0 alone by default; with all_ranks=True both, in two runs.
    tags = [
        tag
        for e in _store_json(store, "log")
        if e["function"].startswith("run:")
        for tag in _store_json(store, "show", e["id"])["metrics"]
    ]
    assert sorted(tags) == ["every"] * 6 + ["zero"] * 3
    train = _store_json(store, "show", "__main__:train")
    assert train["metrics"]["loss"]["count"] == 3  # rank 0's points only


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_on_every_rank(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "store"
    out.mkdir()
    script = write_script(tmp_path, "fail.py", FAIL)
    said = _standalone(script, _env(out, store, "fail"), check=False)
    leader = _said(said, "leader")
    assert leader[0] == "OSError: download 1 failed"
    assert leader[1].startswith("RankFailed:") and "rank 0 raised OSError: download 1" in leader[1]
    body = _said(said, "body")
    assert body[1] == "ValueError: boom 2"
    assert body[0].startswith("RankFailed:") and "rank 1 raised ValueError: boom 2" in body[0]
    assert _runs(out, "fetch") == {0: 1}
    assert _runs(out, "body") == {0: 1, 1: 1}
    statuses = {e["function"]: e["status"] for e in _store_json(store, "log")}
    assert statuses == {"__main__:fetch": "error", "__main__:body": "error"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_nodes(script: Path, out: Path, stores: list[Path], job: str) -> str:
    port = _free_port()
    procs = [
        _torchrun(
            script,
            _env(out, stores[node], job),
            "--nnodes",
            "2",
            "--node_rank",
            str(node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            # Both agents run on this host: say which one hosts the rendezvous store.
            "--rdzv-conf",
            f"is_host={int(node == 0)}",
            "--nproc_per_node",
            "1",
        )
        for node in (0, 1)
    ]
    results = [_finish(p) for p in procs]
    for code, said in results:
        assert code == 0, said
    return _said_in(_env(out, stores[0], job))


@pytest.mark.slow
def test_node_local_stores_receive_what_another_node_computed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stores = [tmp_path / "node-a", tmp_path / "node-b"]
    script = write_script(tmp_path, "nodes.py", NODES)

    def alone(store: Path, job: str, **extra: str) -> str:
        env = {**_env(out, store, job), **extra, "RANK": "0", "WORLD_SIZE": "1"}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        proc = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert proc.returncode == 0, proc.stderr
        return _said_in(env)

    assert _said(alone(stores[0], "before"), "early") == {0: "15"}
    said = _two_nodes(script, out, stores, "job")
    assert _said(said, "prepare") == {0: "[0, 1, 2, 3]", 1: "[0, 1, 2, 3]"}
    assert _said(said, "combine") == {0: "{'n': 2}", 1: "{'n': 2}"}
    assert _said(said, "early") == {0: "15", 1: "15"}
    assert _said(said, "mine") == {0: "[0, 0]", 1: "[1, 1]"}
    # A process of its own on node B after the job: all three hit in B's store.
    after = alone(stores[1], "after", AFTER="1")
    assert _said(after, "prepare") == {0: "[0, 1, 2, 3]"}
    assert _said(after, "combine") == {0: "{'n': 2}"}
    # prepare ran once (node A's rank 0), combine once per rank, early only before the
    # job: node B got each from node A's store and restored it without running it.
    assert _runs(out, "prepare") == {0: 1}
    assert _runs(out, "combine") == {0: 1, 1: 1}
    assert _runs(out, "early") == {0: 1}
    # Node B's store holds them itself, complete (fsck finds nothing missing).
    names = {e["function"] for e in _store_json(stores[1], "log")}
    assert names == {"__main__:prepare", "__main__:combine", "__main__:early", "__main__:mine"}
    # Each node's store holds both ranks' results of the call that differs by rank.
    for node_store in stores:
        shown = _store_json(node_store, "show", "__main__:mine")["result"]
        assert shown["type"] == "per_rank" and shown["ranks"] == 2, shown
    fsck = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(stores[1]), "fsck"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_the_mode_is_checked_when_decorating(store_dir: Path) -> None:
    for wrong in ("rank0", "", None, True):
        with pytest.raises(MemostoreError, match=r"distributed='all'.*'leader'.*'per_rank'"):
            memo(distributed=wrong)(lambda: 1)


def test_outside_a_process_group_every_mode_is_a_plain_call(store_dir: Path) -> None:
    calls = []

    def double(x: int) -> int:
        calls.append(x)
        return x * 2

    plain = memo(double)
    for mode in MODES:
        f = memo(distributed=mode)(double)
        assert f.key(3) == plain.key(3)  # per_rank too: no rank to key with
        assert f(3) == 6
    assert calls == [3]


SEEDS = (
    COMMON
    + """
@memo(distributed="per_rank")
def draw(n):
    count("draw")
    return torch.rand(n).sum().item()


torch.manual_seed(1234)
say("alike", [round(draw(3), 6), round(torch.rand(1).item(), 6)])
if os.environ["SEEDS"] == "both":
    torch.manual_seed(1234 + rank)  # the same key on each rank, from another state on rank 1
    say("by_rank", [round(draw(3), 6), round(torch.rand(1).item(), 6)])
"""
)


@pytest.mark.slow
def test_per_rank_results_keep_their_start_state_conditions(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "store"
    out.mkdir()
    script = write_script(tmp_path, "seeds.py", SEEDS)
    first_env = {**_env(out, store, "first"), "SEEDS": "both"}
    code, output = _finish(_torchrun(script, first_env, "--standalone", "--nproc_per_node", "2"))
    assert code == 0, output
    first = _said_in(first_env)
    # Rank 0 was seeded alike both times (a hit); rank 1 from another state (a miss).
    assert _runs(out, "draw") == {0: 1, 1: 2}
    assert _said(first, "by_rank")[0] == _said(first, "alike")[0]
    assert _said(first, "by_rank")[1] != _said(first, "alike")[1]
    second_env = {**_env(out, store, "second"), "SEEDS": "alike"}
    code, output = _finish(_torchrun(script, second_env, "--standalone", "--nproc_per_node", "2"))
    assert code == 0, output
    # Seeded alike again: each rank gets what it computed from that state, and its RNG
    # where that run left it, without running.
    assert _said(_said_in(second_env), "alike") == _said(first, "alike")
    assert _runs(out, "draw") == {0: 1, 1: 2}
