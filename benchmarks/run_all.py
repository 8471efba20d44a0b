"""Run every benchmark named in the issues and write ``docs/benchmarks.md``.

Each script runs in a fresh interpreter, one after the other (the machine has
few cores; two benchmarks at once would time each other), and measures
memostore side by side with the alternative a user would otherwise run. The
scripts print readable lines and one ``RESULT {json}`` line per measurement
(``_common.result``); ``bench_remote.py`` prints only readable lines, which
are parsed here. The page lists every performance target of the issues, met
or not, then each script's output.

Run from the repository root::

    python benchmarks/run_all.py            # the real sizes (1 GiB, 10,000 evaluations, ...)
    python benchmarks/run_all.py --quick    # smaller sizes, a few minutes: a smoke check
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks.md"
DEMO_SECTION = REPO / "benchmarks" / "demo.md"
RESULT_PREFIX = "RESULT "


@dataclass(frozen=True)
class Target:
    """One performance target of an issue, and the result keys that measure it."""

    issue: int
    what: str
    target: str
    keys: tuple[str, ...]


TARGETS = (
    Target(2, "Hit overhead, tiny arguments", "<= 0.5x joblib.Memory", ("memo.hit_overhead",)),
    Target(2, "Write a 1 GiB blob", "<= 1.3x write + fsync", ("memo.blob_write",)),
    Target(3, "First digest of a 1 GiB tensor", ">= 0.7x blake3 throughput",
           ("keys.first_digest",)),
    Target(3, "Repeated digest of an unchanged object",
           "independent of size; <= 1 ms for 1,000 tensors",
           ("keys.repeat_module", "keys.repeat_dataset", "keys.repeat_size")),
    Target(3, "train(dataset, k) x5, 400 MB dataset from a memoised loader",
           "each later key < 5% of hashing the dataset", ("keys.train_calls",)),
    Target(3, "Code digest, 50 modules / 5,000 lines", "< 300 ms first, near zero after",
           ("keys.code_digest_first", "keys.code_digest_repeat")),
    Target(4, "Store a 1 GiB state_dict on a miss", "<= 1.5x save_file + fsync", ("torch.store",)),
    Target(4, "Restore it on a hit", "<= 1.2x load_file", ("torch.restore",)),
    Target(4, "Deduplication", "<= 1.15x unique bytes", ("torch.dedup",)),
    Target(5, "100,000 add_scalar calls", "<= 0.1x torch SummaryWriter", ("logging.add_scalar",)),
    Target(5, "100,000 scalars in the store", "<= 1 MB", ("logging.size",)),
    Target(5, "plot of 1,000,000 points", "< 1 s", ("logging.plot",)),
    Target(6, "log, 10,000 evaluations", "< 1 s",
           ("cli.log_first", "cli.log", "cli.log_json", "cli.log_function")),
    Target(6, "show", "< 300 ms", ("cli.show_prefix", "cli.show_json", "cli.show_function")),
    Target(7, "push 1 GiB to a directory remote", "<= 1.3x cp -r", ("remote.push_dir",)),
    Target(7, "push 1 GiB to S3 on loopback", "<= 1.5x multipart upload", ("remote.push_s3",)),
    Target(7, "push / pull with nothing to transfer, 10,000 objects", "< 2 s",
           ("remote.noop_push_dir", "remote.noop_pull_dir",
            "remote.noop_push_s3", "remote.noop_pull_s3")),
    Target(14, "Repeated key of a 400 MB dataset, .data writes elsewhere between calls",
           "<= 0.25x one BLAKE3 pass", ("contract.dataset_key",)),
    Target(14, "Repeated digest of a model of 1,000 tensors, .data writes elsewhere",
           "< 1 ms", ("contract.model_key",)),
    Target(14, "Repeated key of a Hugging Face Dataset", "<= 1 ms", ("contract.hf_key",)),
    Target(14, "Hit overhead, tiny arguments (with the hit contract)", "<= 0.5x joblib.Memory",
           ("memo.hit_overhead",)),
    Target(15, "Restore a 1 GiB state_dict on a hit, every byte proven, blobs unchanged since "
           "written or verified", "<= 1.2x load_file", ("torch.restore",)),
    Target(15, "The same restore, first hit after a pull", "<= 1.0x load_file + reading every byte",
           ("torch.restore_pulled",)),
    Target(15, "Store a 1 GiB state_dict on a miss (with verified writes)",
           "<= 1.5x save_file + fsync", ("torch.store",)),
    Target(16, "100,000 add_scalar calls with live visibility on (timer flushes, a follower "
           "reading)", "<= 0.1x torch SummaryWriter", ("live.add_scalar",)),
    Target(16, "100,000 scalars logged live, in the store", "< 1 MB", ("live.size",)),
    Target(16, "add_scalar to visible in show --json from another process",
           "median <= 2 s (TensorBoard: 30 s reload)", ("live.latency",)),
    Target(31, "Dashboard: page open to every run's line drawn in Chromium, "
           "20 runs x 20,000 points", "<= 0.3x TensorBoard", ("ui.drawn.20x20000",)),
    Target(31, "The same, 100 runs x 100,000 points (bench_ui.py alone: not in run_all)",
           "<= 0.2x TensorBoard", ("ui.drawn.100x100000",)),
    Target(31, "Dashboard: a point logged to served to a page polling", "<= 2 s",
           ("ui.live_staleness",)),
    Target(17, "Dashboard: runs table drawn in Chromium, server just started "
           "(10,000 evaluations; --quick: 2,000)", "< 1 s", ("ui.table_page",)),
    Target(18, "Body runs per key, 8 processes started together on one key (one store; and "
           "stores sharing only an S3 remote)", "1.0 (wait=False: 8.0)",
           ("clusters.duplicated_work", "clusters.duplicated_work_s3")),
    Target(18, "A waiter returns after the holder's result is published", "median < 1 s",
           ("clusters.waiter_latency", "clusters.waiter_latency_s3")),
    Target(18, "16 writers x 50 calls with gc looping: results lost, keys computed twice",
           "none", ("clusters.writers_sound",)),
    Target(18, "Collective hit-or-miss decision per call inside a torch.distributed job "
           "(2 gloo ranks, hit of a tiny call, vs the same hit in one process)", "<= 5 ms",
           ("distributed.decision",)),
    Target(19, "du, 10,000 evaluations (--quick: 2,000)", "< 1 s",
           ("lifecycle.du", "lifecycle.du_json")),
    Target(19, "gc --max-size: evict a store of 100,000 objects (--quick: 20,000) to half its "
           "size", "< 10 s", ("lifecycle.evict_half",)),
    Target(19, "Hit overhead with last-use tracking on (bench_memo.py)", "<= 0.5x joblib.Memory",
           ("memo.hit_overhead",)),
    Target(32, "Store a sharded (FSDP2) model of ~200 MB a rank on a miss, 2 gloo ranks",
           "<= 1.2x dcp.save (FileSystemWriter)", ("sharded.store",)),
    Target(32, "Restore it on a hit", "<= 1.0x dcp.load", ("sharded.restore",)),
    Target(32, "Store size of 5 fine-tuning checkpoints with a frozen base", "<= 0.3x DCP's",
           ("sharded.finetune_size",)),
    Target(29, "Hit overhead, tiny arguments, in-process and as a user runs it ($MEMOSTORE_DIR "
           "set, the function defined in the script)", "<= 0.4x joblib.Memory",
           ("memo.hit_overhead", "memo.hit_overhead_script")),
    Target(40, "Tiny miss, fsync on (one barrier per evaluation)", "<= 5x joblib.Memory",
           ("memo.tiny_miss",)),
    Target(40, "Store a 1 GiB state_dict on a miss", "<= 1.15x save_file + fsync",
           ("torch.store",)),
    Target(40, "import memostore in a fresh interpreter", "<= 1.0x import joblib",
           ("import.memostore",)),
)  # fmt: skip


@dataclass(frozen=True)
class Bench:
    """A benchmark script and its arguments for a full and for a quick run."""

    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    issues: str


BENCHES = (
    Bench("bench_memo.py", (), ("--blob-mib", "128", "--calls", "5000", "--repeat", "3"), "2"),
    Bench("bench_code_deps.py", (), ("--runs", "3"), "3"),
    Bench("bench_torch_store.py", (),
          ("--size-mib", "128", "--digest-mib", "128", "--dataset-mb", "64", "--runs", "2"),
          "3, 4"),
    Bench("bench_logging.py", (), ("--repeat", "2"), "5"),
    Bench("bench_cli.py", (), ("--count", "2000", "--runs", "3"), "6"),
    Bench("bench_transport.py", (), ("--total-mib", "128", "--files", "40", "--runs", "2"), "7"),
    Bench("bench_remote.py", (),
          ("--total-mib", "128", "--tensors", "16", "--objects", "2000", "--runs", "2"), "7"),
    Bench("bench_hit_contract.py", (),
          ("--dataset-mb", "64", "--hf-mb", "20", "--model-mib", "32", "--runs", "2"), "14"),
    # The size of 100 runs x 100,000 points takes ~10 minutes to build and export:
    # run `python benchmarks/bench_ui.py` alone for it (docs/ui.md has its figures).
    Bench("bench_ui.py", ("--size", "20x20000", "--evaluations", "10000"), ("--quick",),
          "17, 31"),
    Bench("bench_clusters.py", (),
          ("--rounds", "1", "--writers", "8", "--calls", "20", "--decisions", "100"), "18"),
    Bench("bench_distributed.py", (), ("--calls", "200"), "18"),
    Bench("bench_lifecycle.py", (), ("--count", "2000", "--runs", "3", "--evict-objects", "20000"),
          "19"),
    Bench("bench_import.py", (), ("--runs", "5"), "40"),
    Bench("bench_sharded.py", (), ("--layers", "4", "--dim", "2048", "--runs", "1"), "32"),
)  # fmt: skip


@dataclass
class Outcome:
    """What one script printed and the results found in it."""

    bench: Bench
    argv: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)


# -- running -------------------------------------------------------------------------------------
def run_bench(bench: Bench, quick: bool, timeout: float) -> Outcome:
    args = list(bench.quick if quick else bench.full)
    outcome = Outcome(bench, [sys.executable, str(HERE / bench.script), *args])
    print(f"== {bench.script} {' '.join(args)}", flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            outcome.argv,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        outcome.returncode = proc.returncode
        outcome.output = proc.stdout + (proc.stderr if proc.returncode else "")
    except subprocess.TimeoutExpired as exc:
        outcome.output = _text(exc.stdout) + _text(exc.stderr) + f"\n(timed out after {timeout} s)"
    outcome.seconds = time.perf_counter() - start
    outcome.results = parse_results(outcome.output)
    if bench.script == "bench_remote.py" and not outcome.results:
        # It prints readable tables only (its own RESULT lines, if it gains them, win).
        outcome.results = parse_remote(outcome.output)
    print(_strip_results(outcome.output).rstrip(), flush=True)
    status = "ok" if outcome.returncode == 0 else f"FAILED ({outcome.returncode})"
    print(f"-- {status} in {outcome.seconds:.0f} s\n", flush=True)
    return outcome


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def parse_results(output: str) -> list[dict[str, Any]]:
    """The records of the ``RESULT {json}`` lines in *output*."""
    found = []
    for line in output.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                found.append(json.loads(line[len(RESULT_PREFIX) :]))
            except json.JSONDecodeError:
                continue
    return found


def _strip_results(output: str) -> str:
    return "\n".join(line for line in output.splitlines() if not line.startswith(RESULT_PREFIX))


# -- bench_remote.py's readable lines -------------------------------------------------------------
_REMOTE_LINE = re.compile(r"^  (?P<label>\S.*?)\s+(?P<seconds>\d+\.\d+) s(?:\s|$)")


def remote_sections(output: str) -> dict[str, dict[str, float]]:
    """``{section header: {label: seconds}}`` from bench_remote.py's output."""
    sections: dict[str, dict[str, float]] = {}
    current: dict[str, float] | None = None
    for line in output.splitlines():
        match = _REMOTE_LINE.match(line)
        if match and current is not None:
            current[match["label"]] = float(match["seconds"])
        elif line and not line.startswith(" "):
            current = sections.setdefault(line.strip(), {})
    return sections


def _pick(section: dict[str, float], *words: str) -> tuple[str, float] | None:
    for label, seconds in section.items():
        if all(w in label for w in words):
            return label, seconds
    return None


def _section(sections: dict[str, dict[str, float]], start: str) -> tuple[str, dict[str, float]]:
    for header, lines in sections.items():
        if header.startswith(start):
            return header, lines
    return "", {}


def _ratio(key: str, name: str, ours: Any, base: Any, limit: float | None) -> dict[str, Any]:
    if ours is None or base is None:
        return {}
    (_, t_ours), (base_label, t_base) = ours, base
    ratio = t_ours / t_base
    kind = "max" if limit is not None else "info"
    target = f"<= {limit:g}x {base_label}" if limit is not None else ""
    return {"key": key, "name": name, "ours": t_ours, "baseline": t_base,
            "baseline_name": base_label, "unit": "s", "ratio": ratio, "kind": kind,
            "limit": limit, "target": target, "met": None if limit is None else ratio <= limit,
            "note": "parsed from bench_remote.py's output"}  # fmt: skip


def _noop(key: str, verb: str, header: str, seconds: float) -> dict[str, Any]:
    what = header.partition(", ")[2]  # "directory remote, store of N objects"
    return {"key": key, "name": f"{verb} with nothing to transfer, {what}", "ours": seconds,
            "baseline": None, "baseline_name": "", "unit": "s", "ratio": None, "kind": "below",
            "limit": 2.0, "target": "< 2 s", "met": seconds < 2.0,
            "note": "parsed from bench_remote.py's output"}  # fmt: skip


def parse_remote(output: str) -> list[dict[str, Any]]:
    """Results for issue 7's targets from bench_remote.py's printed tables."""
    sections = remote_sections(output)
    found: list[dict[str, Any]] = []
    header, lines = _section(sections, "push to a directory remote")
    what = f"Push to a directory remote ({header.partition(':')[2].strip()})"
    cp = _pick(lines, "cp -r", "not durable")
    cp_sync = _pick(lines, "cp -r", "&& sync")
    copies = _pick(lines, "memostore push", "copies", "fsync=True")
    found.append(_ratio("remote.push_dir", f"{what}, same file system (hard links)",
                        _pick(lines, "memostore push", "hard links"), cp, 1.3))  # fmt: skip
    found.append(_ratio("remote.push_dir_copies", f"{what}, copying (another file system, "
                        "or --no-hardlinks), durable", copies, cp, None))  # fmt: skip
    found.append(_ratio("remote.push_dir_durable", f"{what}, copying, against a durable copy",
                        copies, cp_sync, None))  # fmt: skip
    found.append(_ratio("remote.push_dir_nofsync", f"{what}, copying, fsync=False", _pick(lines,
                        "memostore push", "copies", "fsync=False"), cp, None))  # fmt: skip
    header, lines = _section(sections, "push to S3")
    what = f"Push to S3 on loopback ({header.partition(':')[2].strip()})"
    uploads = [item for item in lines.items() if item[0].startswith("boto3")]
    push = _pick(lines, "memostore push")
    if uploads:
        # The faster of the plain uploads (one by one, or threaded like the push) is the bar.
        best = min(uploads, key=lambda item: item[1])
        found.append(_ratio("remote.push_s3", what, push, best, 1.5))
        for item in uploads:
            if item is not best:
                found.append(_ratio("remote.push_s3_other", what, push, item, None))
    for where, start in (
        ("dir", "nothing to transfer, directory"),
        ("s3", "nothing to transfer, S3"),
    ):
        header, lines = _section(sections, start)
        for verb in ("push", "pull"):
            picked = _pick(lines, verb, "up to date")
            if picked is not None:
                found.append(_noop(f"remote.noop_{verb}_{where}", verb, header, picked[1]))
    return [r for r in found if r]


# -- the page ------------------------------------------------------------------------------------
def machine_facts() -> list[tuple[str, str]]:
    """What a reader needs to weigh the numbers: cores, memory, versions, load."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    ram = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                break
    except OSError:
        pass
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("blake3", "safetensors", "numpy", "joblib", "tensorboard", "boto3", "moto")
    )
    return [
        ("CPU", f"{cores} cores ({usable} usable){f', {model}' if model else ''}"),
        ("Memory", ram or "unknown"),
        ("OS", f"{platform.system()} {platform.release()} ({platform.machine()})"),
        ("Python", platform.python_version()),
        ("torch", _version("torch")),
        ("memostore", f"{_version('memostore')}, {_git_commit()}"),
        ("Other packages", versions),
    ]


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"commit {commit}{' with uncommitted changes' if dirty else ''}"


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "s" and value < 1:
        value, unit = value * 1e3, "ms"
    return f"{value:.3g} {unit}"


def _met(record: dict[str, Any] | None) -> str:
    if record is None:
        return "not measured"
    met = record.get("met")
    return "" if met is None else ("yes" if met else "**no**")


def _ratio_cell(record: dict[str, Any]) -> str:
    ratio = record.get("ratio")
    if ratio is None:
        return ""
    # Three significant digits, kept when they are zeros (1.00x, not 1x).
    return f"{ratio:.0f}x" if ratio >= 100 else f"{ratio:#.3g}x"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def target_rows(by_key: dict[str, dict[str, Any]]) -> tuple[list[str], int, int]:
    """Table rows for every target of the issues, and how many were measured and met."""
    rows, measured, met = [], 0, 0
    for target in TARGETS:
        for key in target.keys:
            record = by_key.get(key)
            if record is None:
                rows.append(f"| {target.issue} | {_cell(target.what)} | {_cell(target.target)} "
                            "| | | | not measured: see the raw output |")  # fmt: skip
                continue
            measured += 1
            met += bool(record.get("met"))
            rows.append(
                f"| {target.issue} | {_cell(record['name'])} | {_cell(record['target'])} "
                f"| {_num(record['ours'], record['unit'])} "
                f"| {_cell(_num(record.get('baseline'), record['unit']))}"
                f"{' (' + _cell(record['baseline_name']) + ')' if record.get('baseline') else ''} "
                f"| {_ratio_cell(record)} | {_met(record)} |"
            )
    return rows, measured, met


def supporting_rows(results: list[dict[str, Any]]) -> list[str]:
    """Rows for measurements with no target of their own."""
    targeted = {key for target in TARGETS for key in target.keys}
    rows = []
    for record in results:
        if record["key"] in targeted:
            continue
        baseline = _num(record.get("baseline"), record["unit"])
        if baseline and record.get("baseline_name"):
            baseline += f" ({record['baseline_name']})"
        note = record.get("note", "")
        if record.get("target"):
            note = f"target {record['target']}: {_met(record)}; {note}"
        rows.append(
            f"| {_cell(record['name'])} | {_num(record['ours'], record['unit'])} "
            f"| {_cell(baseline)} | {_ratio_cell(record)} | {_cell(note)} |"
        )
    return rows


def render(outcomes: list[Outcome], quick: bool, started: dt.datetime, loads: list[str]) -> str:
    results = [r for o in outcomes for r in o.results]
    by_key: dict[str, dict[str, Any]] = {}
    for record in results:
        by_key.setdefault(record["key"], record)
    rows, measured, met = target_rows(by_key)
    total = sum(len(t.keys) for t in TARGETS)
    command = "python benchmarks/run_all.py" + (" --quick" if quick else "")
    minutes = sum(o.seconds for o in outcomes) / 60
    lines = [
        "# Benchmarks",
        "",
        "<!-- Written by benchmarks/run_all.py; edit the script, not this page. -->",
        "",
        f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC ({minutes:.0f} minutes).",
        *(
            [
                "",
                "**This is a quick run (`--quick`): sizes are smaller than the targets name, "
                "so the figures below are a smoke check, not the measured result.**",
            ]
            if quick
            else []
        ),
        "",
        "Each script runs in a fresh interpreter, one after the other, and times memostore",
        "and the alternative a user would otherwise run (joblib.Memory, safetensors,",
        "blake3, TensorBoard's writer, `cp -r`, boto3) in the same run. Every figure is",
        "the median of several runs; where two candidates are compared they are run in",
        "rotation, so that load from other processes falls on both alike. The machine is",
        "shared and small, so read the ratios rather than the absolute times.",
        "",
        "Reproduce with:",
        "",
        "```bash",
        command,
        "```",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {name} | {_cell(value)} |" for name, value in machine_facts()),
        f"| Load average (1 min) at start / end | {loads[0]} / {loads[-1]} |",
        "",
        "## Targets",
        "",
        f"{met} of {total} measurements meet their target ({measured} measured). "
        "Issue 8 (reliability) sets no timing target; its figures are in "
        "[reliability](reliability.md).",
        "",
        "| Issue | Measurement | Target | memostore | Alternative | Ratio | Met |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "For a throughput target (`>=`) the ratio is memostore's throughput over the",
        "alternative's; otherwise it is memostore's time (or size) over the alternative's.",
        "",
        "## Supporting measurements",
        "",
        "No target of their own; they show where the time goes.",
        "",
        "| Measurement | memostore | Alternative | Ratio | Note |",
        "|---|---|---|---|---|",
        *supporting_rows(results),
        "",
        # Measured by hand from a fresh clone (a new venv, the install included),
        # which no script here can repeat: kept in benchmarks/demo.md.
        DEMO_SECTION.read_text().rstrip(),
        "",
        "## Raw output",
        "",
        "Each script's output as printed (the `RESULT` lines, parsed into the tables above,",
        "are left out).",
    ]
    for outcome in outcomes:
        argv = " ".join(["python", f"benchmarks/{outcome.bench.script}", *outcome.argv[2:]])
        status = (
            "exit 0"
            if outcome.returncode == 0
            else "timed out"
            if outcome.returncode is None
            else f"**failed, exit {outcome.returncode}**"
        )
        lines += [
            "",
            f"### {outcome.bench.script}",
            "",
            f"Issue {outcome.bench.issues}. `{argv}`: {status}, {outcome.seconds:.0f} s.",
            "",
            "```text",
            _strip_results(outcome.output).rstrip().replace("```", "'''") or "(no output)",
            "```",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a smoke check")
    parser.add_argument(
        "--only", nargs="+", metavar="SCRIPT", help="run only these scripts (e.g. bench_memo.py)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="page to write")
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds allowed to each script"
    )
    args = parser.parse_args(argv)
    benches = [b for b in BENCHES if not args.only or b.script in args.only]
    unknown = set(args.only or ()) - {b.script for b in BENCHES}
    if unknown:
        parser.error(f"unknown scripts {sorted(unknown)}; known: {[b.script for b in BENCHES]}")
    started = dt.datetime.now(dt.timezone.utc)
    loads = [f"{os.getloadavg()[0]:.1f}"]
    outcomes = [run_bench(bench, args.quick, args.timeout) for bench in benches]
    loads.append(f"{os.getloadavg()[0]:.1f}")
    args.output.write_text(render(outcomes, args.quick, started, loads))
    print(f"wrote {args.output}")
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
