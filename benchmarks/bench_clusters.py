"""Single-flight and many writers on one store, side by side with computing eagerly.

1. **Duplicated work.** ``--procs`` processes (default 8) are started together
   (a file barrier) on one call key whose body sleeps ``--body-s`` seconds; the
   body appends to a count file, so the runs per key are read from disk. With
   single-flight (the default ``@memo``; target 1.0 body run per key) and with
   ``@memo(wait=False)`` (what every process did before: one run each).
2. **Waiter latency.** In the single-flight rounds, the time from the holder's
   call returning (its result stored and its lease removed) to each waiter's
   call returning with that result (target: median < 1 s). Also through an S3
   remote on loopback (``moto_server``), with ``--s3-procs`` processes that
   each have their own store and share only the bucket (skipped without moto).
3. **Decision cost.** What single-flight adds to a miss: taking the lease,
   looking the call up again, removing the lease (in-process, local store).
4. **Many writers.** ``--writers`` processes (default 16) x ``--calls`` calls
   (default 50) against one store while another process runs gc in a loop;
   every key is called by two writers, so half the calls meet a key another
   writer computes. Against one writer making ``--calls`` calls alone (with
   gc beside it too). Then a fresh process calls every key: each must hit (no
   result lost), and the count file must name each key once (none computed
   twice).

Run from the repository root::

    python benchmarks/bench_clusters.py
    python benchmarks/bench_clusters.py --rounds 1 --writers 8 --calls 20 --skip-s3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO_ROOT / "tests"))

from _common import result  # noqa: E402

TIMEOUT_S = 120.0


# -- the worker (this script run with "_worker ...") ---------------------------------------------
# The body's settings come from the environment, which is not part of the key.
from memostore import memo  # noqa: E402

WAIT = os.environ.get("BENCH_WAIT", "true") == "true"


@memo(wait=WAIT)
def body(key: int) -> dict:
    fd = os.open(os.environ["BENCH_COUNT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{key} {os.getpid()}\n".encode())
    os.close(fd)
    time.sleep(float(os.environ.get("BENCH_BODY_S", "0")))
    return {"key": key, "values": list(range(key % 50))}


def worker(argv: list[str]) -> None:
    """One process of a measurement: wait at the barrier, make the calls, report times."""
    mode, ready_dir, go_path, keys = argv[0], argv[1], argv[2], json.loads(argv[3])
    count = Path(os.environ["BENCH_COUNT"])
    if mode == "check":
        # Every key must hit: a body run here is a lost result.
        before = len(count.read_text().splitlines())
        for key in keys:
            assert body(key)["key"] == key
        print(json.dumps({"lost": len(count.read_text().splitlines()) - before}), flush=True)
        return
    Path(ready_dir, str(os.getpid())).touch()
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.exists(go_path) and time.monotonic() < deadline:
        time.sleep(0.001)
    returns, bad = [], 0
    for key in keys:
        value = body(key)
        returns.append(time.time())
        bad += value != {"key": key, "values": list(range(key % 50))}
    print(json.dumps({"pid": os.getpid(), "returns": returns, "bad": bad}), flush=True)


def gc_loop(store: str, stop: str) -> None:
    """Run gc on *store* until the file *stop* exists."""
    from memostore import Store
    from memostore.lifecycle import maintenance

    opened = Store(store)
    passes = 0
    while not os.path.exists(stop):
        maintenance.gc(opened, grace_s=2.0)
        passes += 1
        time.sleep(0.01)
    print(json.dumps({"passes": passes}), flush=True)


# -- driving workers ------------------------------------------------------------------------------
class Round:
    """Workers started together through a barrier: ready files, then one go file."""

    def __init__(self, root: Path, name: str, count: Path) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.ready = self.dir / "ready"
        self.ready.mkdir()
        self.go = self.dir / "go"
        self.count = count
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self,
        store: Path,
        keys: list[int],
        *,
        wait: bool = True,
        body_s: float = 0.0,
        env: dict[str, str] | None = None,
        mode: str = "calls",
    ) -> None:
        settings = {
            "MEMOSTORE_DIR": str(store),
            "BENCH_COUNT": str(self.count),
            "BENCH_WAIT": "true" if wait else "false",
            "BENCH_BODY_S": str(body_s),
        }
        argv = [sys.executable, __file__, "_worker", mode, str(self.ready), str(self.go)]
        self.procs.append(
            subprocess.Popen(
                [*argv, json.dumps(keys)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **(env or {}), **settings},
            )
        )

    def run(self) -> tuple[float, list[dict]]:
        """Release the barrier once every worker is ready; (go time, each worker's report)."""
        deadline = time.monotonic() + TIMEOUT_S
        while len(list(self.ready.iterdir())) < len(self.procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"workers did not start: {self._errors()}")
            time.sleep(0.01)
        go = time.time()
        self.go.touch()
        reports = []
        for proc in self.procs:
            out, err = proc.communicate(timeout=TIMEOUT_S)
            if proc.returncode != 0:
                raise RuntimeError(f"a worker failed:\n{err[-3000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return go, reports

    def _errors(self) -> str:
        return "; ".join(p.stderr.read()[-500:] for p in self.procs if p.poll() is not None)


def runs_of(count: Path) -> Counter[int]:
    """Body runs per key, from the count file."""
    if not count.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in count.read_text().splitlines() if line)


def pid_runs(count: Path) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for line in count.read_text().splitlines():
        key, pid = map(int, line.split())
        found.setdefault(key, []).append(pid)
    return found


def one_key(
    root: Path, name: str, stores: list[Path], key: int, wait: bool, body_s: float, env: dict
) -> tuple[int, list[float]]:
    """len(stores) processes on one key at once: (body runs, each waiter's latency in s)."""
    count = root / f"{name}.count"
    rnd = Round(root, name, count)
    for store in stores:
        rnd.start(store, [key], wait=wait, body_s=body_s, env=env)
    _, reports = rnd.run()
    runs = pid_runs(count).get(key, [])
    if any(r["bad"] for r in reports):
        raise RuntimeError("a worker got a wrong value")
    holders = [r for r in reports if r["pid"] in runs]
    if len(runs) != 1 or len(holders) != 1:
        return len(runs), []
    published = holders[0]["returns"][0]
    return 1, [r["returns"][0] - published for r in reports if r is not holders[0]]


# -- the measurements ---------------------------------------------------------------------------
def duplicated_work(root: Path, procs: int, rounds: int, body_s: float) -> None:
    print(f"{procs} processes started together on one key (body {body_s:g} s), {rounds} rounds")
    counts: dict[bool, list[int]] = {True: [], False: []}
    latencies: list[float] = []
    for r in range(rounds):
        for wait in (True, False):
            store = root / f"store-dup-{r}-{wait}"
            runs, waits = one_key(
                root, f"dup-{r}-{wait}", [store] * procs, 1000 + r, wait, body_s, {}
            )
            counts[wait].append(runs)
            latencies += waits
    sf = statistics.mean(counts[True])
    eager = statistics.mean(counts[False])
    print(f"  single-flight: {sf:.2f} body runs per key ({counts[True]})")
    print(f"  wait=False:    {eager:.2f} body runs per key ({counts[False]})")
    result(
        "clusters.duplicated_work",
        f"Body runs per key, {procs} processes on one key at once",
        ours=sf,
        kind="below",
        limit=1.01,
        baseline=eager,
        baseline_name="wait=False",
        unit="runs",
        note=f"target 1.0; wait=False (each process computes): {eager:.1f}",
    )
    if latencies:
        median = statistics.median(latencies)
        print(
            f"  waiter latency after the holder returns: median {median * 1000:.0f} ms, "
            f"max {max(latencies) * 1000:.0f} ms ({len(latencies)} waiters)"
        )
        result(
            "clusters.waiter_latency",
            "Waiter returns after the holder's result is stored (one store)",
            ours=median,
            kind="below",
            limit=1.0,
            unit="s",
            note=f"median of {len(latencies)} waiters; max {max(latencies):.3f} s; "
            "polls every 50 ms backing off to 250 ms",
        )


def through_s3(root: Path, procs: int, rounds: int, body_s: float) -> None:
    from s3server import DUMMY_AWS_ENV, MotoServer, moto_available

    if not moto_available():
        print("through S3: skipped (moto[server] and boto3 are not installed)")
        return
    import boto3

    from memostore import Store
    from memostore.remote import add_remote

    print(
        f"{procs} processes with their own stores, sharing one S3 bucket (moto_server "
        f"on loopback, auto-fetch), body {body_s:g} s, {rounds} rounds"
    )
    os.environ.update(DUMMY_AWS_ENV)
    with MotoServer() as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="clusters")
        env = {**DUMMY_AWS_ENV, "AWS_ENDPOINT_URL": endpoint}
        counts, latencies = [], []
        for r in range(rounds):
            stores = [root / f"store-s3-{r}-{i}" for i in range(procs)]
            for store in stores:
                add_remote(
                    Store(store),
                    "origin",
                    f"s3://clusters/r{r}",
                    endpoint=endpoint,
                    auto_fetch=True,
                )
            runs, waits = one_key(root, f"s3-{r}", stores, 2000 + r, True, body_s, env)
            counts.append(runs)
            latencies += waits
        client.close()
    print(f"  body runs per key: {statistics.mean(counts):.2f} ({counts})")
    result(
        "clusters.duplicated_work_s3",
        f"Body runs per key, {procs} stores sharing only an S3 remote",
        ours=statistics.mean(counts),
        kind="below",
        limit=1.01,
        unit="runs",
        note="target 1.0; moto_server on loopback",
    )
    if latencies:
        median = statistics.median(latencies)
        print(
            f"  waiter latency after the holder returns (its result pushed): median "
            f"{median * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
        result(
            "clusters.waiter_latency_s3",
            "Waiter returns after the holder's result is published to the S3 remote",
            ours=median,
            kind="below",
            limit=1.0,
            unit="s",
            note=f"median of {len(latencies)} waiters; max {max(latencies):.3f} s; polls "
            "every 100 ms backing off to 250 ms, then fetches",
        )


def decision_cost(root: Path, calls: int) -> None:
    from memostore import Store
    from memostore.call.single_flight import begin
    from memostore.records.evaluation import eval_ref_name
    from memostore.remote import fetch_on_miss

    store = Store(root / "store-decision")
    times = []
    for i in range(calls):
        key = f"{i:064x}"
        ref = eval_ref_name("bench:f", key)

        def lookup(ref: str = ref) -> str:
            # What @memo's lookup does on a local miss: the ref, then auto-fetch (none here).
            return store.refs.read(ref) or fetch_on_miss(store, ref) or ""

        start = time.perf_counter()
        flight = begin(store, ref, "bench:f", key, True, lookup)
        flight.release()
        times.append(time.perf_counter() - start)
    median = statistics.median(times) * 1e6
    print(f"single-flight decision on a miss (lease, second lookup, release): {median:.0f} us")
    result(
        "clusters.decision_cost",
        "Single-flight's cost per miss (lease taken, call looked up again, lease removed)",
        ours=median,
        kind="info",
        unit="us",
        note=f"median of {calls}; a hit pays nothing",
    )


def writers(root: Path, n: int, calls: int, body_s: float, label: str) -> dict:
    """*n* writers x *calls* calls with gc looping; keys each called by two writers."""
    store = root / f"store-{label}"
    count = root / f"{label}.count"
    span = max(calls // 2, 1)
    keys_of = [[(i * span + j) % max(n * span, calls) for j in range(calls)] for i in range(n)]
    stop = root / f"{label}.stop"
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    from memostore import Store

    Store(store)
    gc = subprocess.Popen(
        [sys.executable, __file__, "_gc", str(store), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    rnd = Round(root, label, count)
    for keys in keys_of:
        rnd.start(store, keys, body_s=body_s)
    go, reports = rnd.run()
    elapsed = max(r["returns"][-1] for r in reports) - go
    stop.touch()
    gc_out, _ = gc.communicate(timeout=TIMEOUT_S)
    passes = json.loads(gc_out.strip().splitlines()[-1])["passes"]
    distinct = sorted({k for keys in keys_of for k in keys})
    check = Round(root, f"{label}-check", count)
    # With the writers' environment: the body reads it, so it conditions the call.
    check.start(store, distinct, mode="check", body_s=body_s)
    out, err = check.procs[0].communicate(timeout=TIMEOUT_S)
    if check.procs[0].returncode != 0:
        raise RuntimeError(f"the check failed:\n{err[-3000:]}")
    lost = json.loads(out.strip().splitlines()[-1])["lost"]
    runs = runs_of(count)
    twice = sum(1 for k in distinct if runs[k] > 1)
    bad = sum(r["bad"] for r in reports)
    total = n * calls
    print(
        f"  {n} writer(s) x {calls} calls ({len(distinct)} keys): {elapsed:.2f} s, "
        f"{total / elapsed:.0f} calls/s, {len(distinct) / elapsed:.0f} evaluations stored/s; "
        f"gc passes beside them: {passes}; lost {lost}, computed twice {twice}, wrong {bad}"
    )
    return {
        "elapsed": elapsed,
        "calls_s": total / elapsed,
        "stored_s": len(distinct) / elapsed,
        "lost": lost,
        "twice": twice,
        "bad": bad,
        "keys": len(distinct),
    }


def many_writers(root: Path, n: int, calls: int, body_s: float) -> None:
    print(
        f"{n} writers x {calls} calls vs 1 writer, one store, gc looping beside them "
        f"(body {body_s * 1000:g} ms)"
    )
    one = writers(root, 1, calls, body_s, "one")
    many = writers(root, n, calls, body_s, "many")
    ratio = many["stored_s"] / one["stored_s"]
    result(
        "clusters.throughput",
        f"Evaluations stored per second, {n} writers x {calls} calls "
        "with gc looping, against 1 writer",
        ours=many["stored_s"],
        kind="info",
        baseline=one["stored_s"],
        baseline_name="1 writer",
        unit="evals/s",
        ratio=ratio,
        note=f"{many['calls_s']:.0f} calls/s vs {one['calls_s']:.0f}; half of the calls "
        "meet a key another writer computes",
    )
    problems = many["lost"] + many["twice"] + many["bad"] + one["lost"] + one["twice"] + one["bad"]
    result(
        "clusters.writers_sound",
        f"Results lost, keys computed twice or wrong values, {n} writers x {calls} calls with gc",
        ours=problems,
        kind="below",
        limit=0.5,
        unit="results",
        note=f"lost {many['lost']}, computed twice {many['twice']} of "
        f"{many['keys']} keys, wrong {many['bad']}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--body-s", type=float, default=1.0)
    parser.add_argument("--s3-procs", type=int, default=4)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--writer-body-ms", type=float, default=20.0)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-clusters-") as tmp:
        root = Path(tmp)
        duplicated_work(root, args.procs, args.rounds, args.body_s)
        if not args.skip_s3:
            through_s3(root, args.s3_procs, args.rounds, args.body_s)
        decision_cost(root, args.decisions)
        many_writers(root, args.writers, args.calls, args.writer_body_ms / 1000)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        worker(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_gc":
        gc_loop(sys.argv[2], sys.argv[3])
    else:
        main()
