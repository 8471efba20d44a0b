"""``memostore log``: evaluations, newest first."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from memostore.trust.signers import OWN_PRINCIPAL

from .output import (
    STATUS_STYLE,
    Output,
    age,
    csv_text,
    duration,
    echo,
    markdown_table,
    number,
    padded,
    warn,
)
from .state import State, pass_state

METRIC_STATS = ("last", "min", "max", "first", "count")
# On a terminal, without -n, show this many (a footer says how to see all).
TERMINAL_DEFAULT_COUNT = 50
_FIELD_KEYS = {
    "created": "started",
    "duration": "duration_s",
    "function": "function",
    "status": "status",
}
# --sort KEY -> the order it lists in unless --sort-order says otherwise.
SORT_KEYS = {"created": "desc", "last-used": "desc", "duration": "desc", "function": "asc"}


@click.command("log")
@click.argument("function", required=False)
@click.option(
    "-n",
    "--max-count",
    "max_count",
    type=click.IntRange(min=0),
    default=None,
    help="Show at most N evaluations (0: all; default: all, "
    f"or the newest {TERMINAL_DEFAULT_COUNT} on a terminal).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option(
    "--graph", is_flag=True, help="Draw lineage: evaluations whose results were passed in."
)
@click.option(
    "--metrics",
    "metric_tags",
    default=None,
    metavar="TAG[,TAG...]",
    help="Add last/min columns for these logged metrics.",
)
@click.option(
    "--sort-by",
    default=None,
    metavar="KEY",
    help="TAG:STAT (stat: last, min, max, first, count), a hyper-parameter, "
    "'created' or 'duration'.",
)
@click.option(
    "--sort",
    "sort",
    type=click.Choice(list(SORT_KEYS)),
    default=None,
    help="Sort by creation (newest first), last use (most recent first, with hits and "
    "last-use columns), duration (longest first) or function name.",
)
@click.option(
    "--sort-order",
    type=click.Choice(["asc", "desc"]),
    default=None,
    help="Order for --sort-by (default asc) or --sort (default as it says); "
    "newest first without either.",
)
@click.option("--csv", "table_format", flag_value="csv", default=None, help="Print a CSV table.")
@click.option("--md", "table_format", flag_value="md", help="Print a Markdown table.")
@pass_state
def log(
    state: State,
    function: str | None,
    max_count: int | None,
    as_json: bool,
    graph: bool,
    metric_tags: str | None,
    sort_by: str | None,
    sort: str | None,
    sort_order: str | None,
    table_format: str | None,
) -> None:
    """List evaluations, newest first (only FUNCTION's when given).

    One line per evaluation: short id, function, arguments, status, age and
    duration. Evaluations still in progress are listed with status
    "running" (and their run id); one whose process died is recorded as
    "interrupted" first. With --metrics, --csv or --md, a table with a column
    per hyper-parameter and per chosen metric. With --sort last-used, each
    evaluation's last use and hit count are shown too.
    """
    if as_json and table_format:
        raise click.UsageError("--json cannot be combined with --csv or --md")
    if sort and sort_by:
        raise click.UsageError("--sort and --sort-by cannot be combined; choose one")
    if graph and (as_json or table_format):
        raise click.UsageError(
            "--graph draws text; it cannot be combined with --json, --csv or --md"
        )
    out = Output()
    records, problems, running = _records(state, function)
    _add_names(records)
    # Only where shown or sorted on: a plain listing of a big store does not read the log.
    uses = _add_last_use(state, records) if as_json or sort == "last-used" else {}
    for evaluation_id, reason in sorted(problems.items()):
        warn(f"evaluation {evaluation_id[:12]} named by a ref cannot be read ({reason})")
    tags = [t.strip() for t in (metric_tags or "").split(",") if t.strip()]
    sort_key = _parse_sort(sort_by, records) if sort_by else None
    if sort_key and sort_key[0] == "metric" and sort_key[1] not in tags:
        tags.append(sort_key[1])
    metrics = _MetricCache(state, running)
    if sort_key:
        records = _sorted(records, sort_key, sort_order or "asc", metrics)
    elif sort:
        records = _sorted_by(records, sort, sort_order or SORT_KEYS[sort], uses)
    show_use = sort == "last-used"
    if max_count is None and out.rich and not (as_json or table_format):
        max_count = TERMINAL_DEFAULT_COUNT
    total = len(records)
    if max_count:
        records = records[:max_count]
    if tags:
        for record in records:
            record["metrics"] = metrics.selected(record, tags)
    if as_json:
        out.json_list(records)
        return
    if table_format or tags:
        _print_table(out, records, tags, table_format, show_use)
    else:
        _print_lines(out, records, graph, show_use)
    if total > len(records) and out.rich:
        out.line(f"… {total - len(records)} older; use -n 0 to see all", style="dim")


def _records(
    state: State, function: str | None
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Any]]:
    """(records newest first, problems, running evaluations by run id)."""
    from memostore.errors import RevisionNotFound
    from memostore.inspect.inspection import log_records
    from memostore.metrics.running import running_evaluations, running_of

    # First: it records the evaluations of dead processes, which the refs then list.
    running = running_of(function, running_evaluations(state.store))
    try:
        records, problems = log_records(state.store, function)
    except RevisionNotFound:
        if not running:
            raise
        records, problems = [], {}
    if running:
        live = [r.record() for r in running]
        records = sorted(live + records, key=lambda r: -(r.get("started") or 0.0))
    return records, problems, {r.run_id: r for r in running}


def _add_names(records: list[dict[str, Any]]) -> None:
    """Set each record's ``name``, as the evaluations listed together name each other."""
    from memostore.records.names import display_names

    names = display_names(records)
    for record in records:
        record["name"] = names[record["id"]]


def _add_last_use(state: State, records: list[dict[str, Any]]) -> dict[str, float]:
    """Add ``last_used`` and ``hits`` to each record; return last-use times by id.

    An evaluation with no last-use record (made before it was kept, or whose
    process died before flushing it) was last used when it was created.
    """
    from memostore.lifecycle.last_use import load
    from memostore.odb.index import iso_time

    uses = load(state.store)
    times: dict[str, float] = {}
    for record in records:
        use = uses.get(record["id"])
        started = record.get("started")
        when = use.last_used if use is not None else started
        if isinstance(when, (int, float)):
            times[record["id"]] = when
        record["last_used"] = iso_time(when)
        record["hits"] = use.hits if use is not None else 0
    return times


def _sorted_by(
    records: list[dict[str, Any]], key: str, order: str, uses: dict[str, float]
) -> list[dict[str, Any]]:
    """Records sorted by a --sort key; those without the value come last."""

    def value(record: dict[str, Any]) -> Any:
        if key == "last-used":
            return uses.get(record["id"])
        if key == "function":
            return record.get("function")
        return record.get("started" if key == "created" else "duration_s")

    present = [r for r in records if _sortable(value(r))]
    missing = [r for r in records if not _sortable(value(r))]
    # Stable: evaluations with equal values keep the listing's newest-first order.
    present.sort(key=value, reverse=order == "desc")
    return present + missing


class _MetricCache:
    def __init__(self, state: State, running: dict[str, Any] | None = None) -> None:
        self.state = state
        self.running = running or {}
        self._by_logs: dict[str, dict[str, Any]] = {}

    def summary(self, record: dict[str, Any]) -> dict[str, Any]:
        from memostore.inspect.inspection import metrics_of

        if record.get("status") == "running":
            return self._running_summary(record)
        logs = record.get("logs")
        if not logs:
            return {}
        if logs not in self._by_logs:
            summary, error = metrics_of(self.state.store, logs)
            if error:
                warn(f"metrics of {record['id'][:12]} cannot be read ({error})")
            self._by_logs[logs] = summary
        return self._by_logs[logs]

    def _running_summary(self, record: dict[str, Any]) -> dict[str, Any]:
        key = "running:" + str(record.get("run_id"))
        if key not in self._by_logs:
            run = self.running.get(record.get("run_id"))
            summary: dict[str, Any] = {}
            if run is not None:
                try:
                    with run.logs() as logs:
                        logs.poll()
                        summary = logs.summary()
                except OSError:
                    summary = {}  # it ended meanwhile: its record is listed next time
            self._by_logs[key] = summary
        return self._by_logs[key]

    def selected(self, record: dict[str, Any], tags: Sequence[str]) -> dict[str, Any]:
        summary = self.summary(record)
        return {tag: summary[tag] for tag in tags if tag in summary}


def _parse_sort(key: str, records: list[dict[str, Any]]) -> tuple[str, str, str]:
    tag, sep, stat = key.rpartition(":")
    if sep and stat in METRIC_STATS and tag:
        return ("metric", tag, stat)
    if key in _FIELD_KEYS:
        return ("field", _FIELD_KEYS[key], "")
    if any(key in (r.get("args") or {}) for r in records):
        return ("arg", key, "")
    if sep and stat not in METRIC_STATS:
        raise click.BadParameter(
            f"unknown statistic {stat!r}; use one of {', '.join(METRIC_STATS)}",
            param_hint="--sort-by",
        )
    return ("metric", key, "last")


def _sorted(
    records: list[dict[str, Any]], key: tuple[str, str, str], order: str, metrics: _MetricCache
) -> list[dict[str, Any]]:
    kind, name, stat = key

    def value(record: dict[str, Any]) -> Any:
        if kind == "metric":
            return (metrics.summary(record).get(name) or {}).get(stat)
        if kind == "field":
            return record.get(name)
        return (record.get("args") or {}).get(name)

    keyed = [(value(r), r) for r in records]
    present = [(v, r) for v, r in keyed if _sortable(v)]
    missing = [r for v, r in keyed if not _sortable(v)]
    numeric = all(isinstance(v, (int, float)) for v, _ in present)
    present.sort(key=lambda vr: vr[0] if numeric else str(vr[0]), reverse=order == "desc")
    # Evaluations without the value go last whatever the order.
    return [r for _, r in present] + missing


def _sortable(value: Any) -> bool:
    if value is None:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def _status_text(record: dict[str, Any]) -> str:
    status = str(record.get("status"))
    error = record.get("error")
    if status != "ok" and error:
        return f"{status}: {str(error).rsplit('.', 1)[-1]}"
    return status


def _args_text(record: dict[str, Any]) -> str:
    summary = record.get("args_summary")
    if not summary:
        # A standalone run has no call: its arguments are the hyper-parameters it logged.
        summary = {k: repr(v) for k, v in (record.get("args") or {}).items()}
    return ", ".join(f"{name}={text}" for name, text in summary.items())


def _use_text(record: dict[str, Any], table: bool = False) -> list[str]:
    """The last-use cells of a line (``used 5m ago``, ``3 hits``) or of a table row."""
    when = record.get("last_used")
    moment = datetime.fromisoformat(when).timestamp() if isinstance(when, str) else None
    hits = record.get("hits") or 0
    if table:
        return [age(moment), str(hits)]
    return [f"used {age(moment)}", f"{hits} hit" + ("" if hits == 1 else "s")]


def _signer_cell(record: dict[str, Any]) -> str:
    """``by NAME`` (or fingerprint) when someone else signed the evaluation, else ""."""
    signer = record.get("signer")
    if not signer or signer.get("principal") == OWN_PRINCIPAL:
        return ""
    if not signer.get("verified"):
        return "bad signature"
    return f"by {signer.get('principal') or signer['fingerprint']}"


def _print_lines(
    out: Output, records: list[dict[str, Any]], graph: bool, show_use: bool = False
) -> None:
    from .graph import graph_rows

    # TensorBoard's run names, in a column of their own when any listed evaluation has one
    # (the others are named by their function and arguments, which the line shows).
    runs = any(r.get("run_name") for r in records)
    # Who signed, in a column of its own once another signer than you appears.
    others = any(_signer_cell(r) for r in records)
    rows = [
        [r["id"][:10]]
        + ([r["name"] if r.get("run_name") else ""] if runs else [])
        + [
            r["function"],
            _args_text(r),
            _status_text(r),
            age(r.get("started")),
            duration(r.get("duration_s")),
        ]
        + ([_signer_cell(r)] if others else [])
        + (_use_text(r) if show_use else [])
        for r in records
    ]
    prefixes = graph_rows(records) if graph else [([], "")] * len(records)
    if not out.rich:
        # One write for the whole listing: per-line echo dominates on big stores.
        text = []
        for cells, (before, prefix) in zip(padded(rows), prefixes, strict=True):
            text += [connector.rstrip() for connector in before]
            text.append((prefix + "  ".join(cells)).rstrip())
        out.text("\n".join(text))
        return
    for record, cells, (before, prefix) in zip(records, padded(rows), prefixes, strict=True):
        for connector in before:
            out.line(connector.rstrip(), style="yellow")
        status_style = STATUS_STYLE.get(str(record.get("status")), "magenta")
        styles = ["yellow", *(["cyan"] if runs else []), "bold", None, status_style, "dim", "dim"]
        styles += ["magenta"] if others else []
        styles += ["dim", "cyan"] if show_use else []
        parts: list[tuple[str, str | None]] = [(prefix, "yellow")]
        for i, (cell, style) in enumerate(zip(cells, styles, strict=True)):
            parts.append((cell if i == len(cells) - 1 else cell + "  ", style))
        out.styled(parts)


def _print_table(
    out: Output,
    records: list[dict[str, Any]],
    tags: list[str],
    fmt: str | None,
    show_use: bool = False,
) -> None:
    hparams: list[str] = []
    for record in records:
        for name in record.get("args") or {}:
            if name not in hparams:
                hparams.append(name)
    stats = ("last", "min")
    columns = ["id", "name", "function", "status", "created"]
    columns += ["duration_s" if fmt == "csv" else "duration"]
    columns += ["last_used", "hits"] if show_use and fmt == "csv" else []
    columns += ["last used", "hits"] if show_use and fmt != "csv" else []
    columns += hparams + [f"{tag}:{stat}" for tag in tags for stat in stats]
    rows: list[list[Any]] = []
    for r in records:
        args = r.get("args") or {}
        metric_cells = [
            ((r.get("metrics") or {}).get(tag) or {}).get(stat) for tag in tags for stat in stats
        ]
        if fmt == "csv":
            rows.append(
                [r["id"], r["name"], r["function"], r.get("status"), r.get("created")]
                + [r.get("duration_s")]
                + ([r.get("last_used"), r.get("hits")] if show_use else [])
                + [_cell(args.get(h)) for h in hparams]
                + [_csv_number(v) for v in metric_cells]
            )
        else:
            rows.append(
                [
                    r["id"][:10],
                    r["name"],
                    r["function"],
                    _status_text(r),
                    age(r.get("started")),
                    duration(r.get("duration_s")),
                ]
                + (_use_text(r, table=True) if show_use else [])
                + [_cell(args.get(h)) for h in hparams]
                + [number(v) for v in metric_cells]
            )
    if fmt == "csv":
        echo(csv_text(columns, rows), nl=False)
    elif fmt == "md":
        echo(markdown_table(columns, rows), nl=False)
    else:
        out.table(columns, rows, styles=["yellow", "cyan", None, None, "dim", "dim"])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else number(value)


def _csv_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return "" if value is None else value
