"""``memostore show REV``: one evaluation in full (no tensor data is read)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from .output import STATUS_STYLE, Output, age, duration, number
from .state import State, pass_state

_SEQUENCES = ("list", "tuple", "set", "frozenset")
_MAPPINGS = ("dict", "OrderedDict")
# The end of a failed evaluation's traceback is where its cause is.
TRACEBACK_LINES = 12


@click.command("show")
@click.argument("rev")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def show(state: State, rev: str, as_json: bool) -> None:
    """Show one evaluation: code and dependencies, arguments, result, metrics, provenance.

    REV is an evaluation id, a unique prefix of at least 4 hex digits, a
    function name (its newest evaluation) or NAME~N (the N-th older one). An
    evaluation still running is named by its run id (see memostore log) or
    by its function; it shows the metrics logged so far.
    """
    from memostore.inspect.inspection import show_record
    from memostore.metrics.running import RunningEvaluation, resolve_running

    target = resolve_running(state.store, rev)
    out = Output()
    if isinstance(target, RunningEvaluation):
        record, live = _running_record(target)
        if as_json:
            out.json(record)
            return
        print_record(out, record, state, live)
        return
    evaluation_id = target or state.resolve(rev)
    # Codec packages are not loaded: summaries must not import torch (see summaries.py).
    record = show_record(state.store, evaluation_id, load_codecs=False)
    _add_last_use(state, record)
    if as_json:
        out.json(record)
        return
    print_record(out, record, state)


def _add_last_use(state: State, record: dict[str, Any]) -> None:
    """Add ``last_used`` (ISO time) and ``hits``; without a record, its creation and 0."""
    from memostore.lifecycle.last_use import load
    from memostore.odb.index import iso_time

    use = load(state.store).get(record["id"])
    record["last_used"] = iso_time(use.last_used if use is not None else record.get("started"))
    record["hits"] = use.hits if use is not None else 0


def _running_record(run: Any) -> tuple[dict[str, Any], Any]:
    """The show record of a running evaluation and its metrics reader (None if it ended)."""
    from memostore.inspect.inspection import evaluation_name, running_show_record

    try:
        logs = run.logs()
    except FileNotFoundError:
        logs = None  # it ended a moment ago: shown without metrics
    if logs is not None:
        logs.poll()
        logs.close()
    record = running_show_record(run, logs)
    record["name"] = evaluation_name(run.store, record)
    return record, logs


def print_record(out: Output, record: dict[str, Any], state: State, live: Any = None) -> None:
    """Print a show record; *live* is the metrics reader of a running evaluation."""
    from memostore.values.summaries import describe

    status = str(record.get("status"))
    out.styled([("evaluation ", "yellow"), (record["id"], "yellow")])
    rows = [
        ("name", str(record.get("name"))),
        ("function", str(record.get("function"))),
        ("status", status),
        ("created", f"{record.get('created')} ({age(record.get('started'))})"),
        ("duration", duration(record.get("duration_s"))),
    ]
    if isinstance(record.get("last_used"), str):
        hits = record.get("hits") or 0
        moment = datetime.fromisoformat(record["last_used"]).timestamp()
        rows.append(
            (
                "last used",
                f"{record['last_used']} ({age(moment)}), {hits} hit{'' if hits == 1 else 's'}",
            )
        )
    rows += [
        ("key", str(record.get("key"))),
    ]
    if record.get("version") is not None:
        rows.append(("version", str(record["version"])))
    if record.get("refs"):
        rows.append(("refs", ", ".join(record["refs"])))
    if record.get("tags"):
        rows.append(("tags", ", ".join(record["tags"])))
    out.pairs(rows)
    if status == "running":
        process = record.get("provenance") or {}
        out.line()
        out.line(
            f"running: process {process.get('pid')} on {process.get('host')}, "
            f"last seen {duration(record.get('seen_s_ago'))} ago; run id {record.get('run_id')}",
            style=STATUS_STYLE.get(status, "cyan"),
        )
    elif status != "ok":
        error = record.get("error") or {}
        out.line()
        out.line(
            f"{status}: {error.get('type', '?')}: {error.get('message', '')}",
            style=STATUS_STYLE.get(status, "magenta"),
        )
        trace = str(error.get("traceback") or "").rstrip().splitlines()
        for line in trace[-TRACEBACK_LINES:]:
            out.line("  " + line, style="dim")

    code = record.get("code") or {}
    out.line()
    out.heading(f"code {code.get('digest') or '(none recorded)'}")
    if code.get("error"):
        out.line(f"  cannot read the code document: {code['error']}", style="red")
    deps = code.get("dependencies") or []
    if deps:
        out.table(
            ["dependency", "kind", "digest"],
            [[d["symbol"], str(d.get("kind")), str(d.get("digest"))[:16]] for d in deps],
            styles=[None, "dim", "yellow"],
            indent="  ",
        )

    out.line()
    out.heading("arguments")
    args = record.get("args") or {}
    if not args:
        out.line("  (none)")
    out.pairs([(name, describe(value, width=120)) for name, value in args.items()], indent="  ")

    _print_effects(out, record)

    out.line()
    out.heading("result")
    if record.get("result_id") is None:
        out.line("  (none)")
    else:
        for line in summary_lines(record.get("result")):
            out.line("  " + line)

    out.line()
    out.heading("metrics")
    _print_metrics(out, record, state, live)

    out.line()
    out.heading("provenance")
    rows = provenance_rows(record.get("provenance") or {})
    out.pairs([("signed by", signer_text(record.get("signer"))), *rows], indent="  ")

    for title in ("parents", "children"):
        ids = record.get(title) or []
        if ids:
            out.line()
            out.heading(title)
            for evaluation_id in ids:
                out.line(f"  {evaluation_id}", style="yellow")


def _print_effects(out: Output, record: dict[str, Any]) -> None:
    """Mutated arguments (their state after the call) and the global RNGs drawn from."""
    from memostore.values.summaries import describe

    effects = record.get("effects") or {}
    if effects or record.get("rebound"):
        out.line()
        out.heading("mutated arguments (state after the call)")
        out.pairs(
            [(name, describe(value, width=120)) for name, value in effects.items()], indent="  "
        )
        for name in record.get("rebound") or []:
            out.line(f"  {name}: rebound to another object", style="dim")
    rng = record.get("rng") or {}
    if rng:
        out.line()
        out.heading("random generators drawn from")
        out.pairs([(name, rng_line(entry)) for name, entry in rng.items()], indent="  ")


def rng_line(entry: dict[str, Any]) -> str:
    """One RNG the body drew from: its lineage at the call, the state it started from and left."""
    before, after = entry.get("before"), str(entry.get("after") or "-")[:12]
    seeded = entry.get("seeded")
    if not before:
        start = "seeded by the body before it drew: a call hits from any state"
    elif seeded is True:
        start = (
            f"seeded: a call hits only from start state {before[:12]} "
            "(another: start state differs)"
        )
    elif seeded is False:
        start = (
            "unseeded RNG: served the stored run, whatever the start state "
            f"(this run's: {before[:12]})"
        )
    else:
        start = f"started from state {before[:12]}"
    leaves = entry.get("leaves")
    tail = f"; the body left it {leaves}" if leaves else ""
    return f"{start}; left state {after}{tail}"


def summary_lines(summary: Any, depth: int = 0) -> list[str]:
    """A result summary as lines: containers one item per line, to two levels."""
    from memostore.values.summaries import describe

    if depth < 2 and isinstance(summary, dict):
        kind = summary.get("type")
        if kind in _SEQUENCES and summary.get("items"):
            lines = [f"{kind} of {summary.get('len')}"]
            for i, item in enumerate(summary["items"]):
                inner = summary_lines(item, depth + 1)
                lines.append(f"  [{i}] {inner[0]}")
                lines += ["  " + line for line in inner[1:]]
            return lines
        if kind in _MAPPINGS and summary.get("items"):
            lines = [f"{kind} of {summary.get('len')}"]
            for key, item in summary["items"].items():
                inner = summary_lines(item, depth + 1)
                lines.append(f"  {key}: {inner[0]}")
                lines += ["  " + line for line in inner[1:]]
            return lines
    return [describe(summary, width=160)]


def signer_text(signer: dict[str, Any] | None) -> str:
    """Who signed an evaluation, as ``show`` and ``log`` print it."""
    if not signer:
        return "unsigned"
    if not signer.get("verified"):
        return f"{signer['fingerprint']} (signature does not match: not served)"
    name = signer.get("principal")
    return f"{name} ({signer['fingerprint']})" if name else f"{signer['fingerprint']} (not trusted)"


def provenance_rows(provenance: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if provenance.get("host"):
        rows.append(("host", str(provenance["host"])))
    python = provenance.get("python")
    if python:
        rows.append(
            ("python", f"{python} ({provenance.get('implementation', '')})".replace(" ()", ""))
        )
    for name, version in (provenance.get("packages") or {}).items():
        rows.append((name, str(version)))
    git = provenance.get("git") or {}
    if git.get("commit"):
        dirty = " (dirty)" if git.get("dirty") else ""
        branch = f" on {git['branch']}" if git.get("branch") else ""
        rows.append(("git", f"{git['commit'][:12]}{branch}{dirty}"))
    if provenance.get("platform"):
        rows.append(("platform", str(provenance["platform"])))
    if provenance.get("argv"):
        rows.append(("argv", " ".join(str(a) for a in provenance["argv"])))
    if provenance.get("cwd"):
        rows.append(("cwd", str(provenance["cwd"])))
    return rows


def _print_metrics(out: Output, record: dict[str, Any], state: State, live: Any = None) -> None:
    metrics = record.get("metrics") or {}
    if record.get("metrics_error"):
        out.line(f"  cannot read the metrics: {record['metrics_error']}", style="red")
    if not metrics:
        out.line("  (none)")
        return
    columns = ["tag", "kind", "count", "first", "last", "min", "max"]
    rows = []
    for tag, stats in metrics.items():
        row = [tag, str(stats.get("kind") or "")] + [number(stats.get(c)) for c in columns[2:]]
        row.append(
            _live_sparkline(live, tag) if live else _sparkline(state, record.get("logs"), tag)
        )
        rows.append(row)
    columns.append("trend")
    styles = ["bold", None, None, None, None, None, None, "cyan"]
    out.table(columns, rows, styles=styles, indent="  ")


def _sparkline(state: State, logs_id: str | None, tag: str) -> str:
    if not logs_id:
        return ""
    try:
        from memostore.metrics.read import tag_sparkline

        return tag_sparkline(state.store, logs_id, tag)
    except Exception:  # a sparkline is decoration: never fail show for it
        return ""


def _live_sparkline(live: Any, tag: str) -> str:
    try:
        from memostore.metrics.read import sparkline

        return sparkline(live.series(tag)[1])
    except Exception:  # a sparkline is decoration: never fail show for it
        return ""
