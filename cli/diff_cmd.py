"""``memostore diff``: what changed between two evaluations, or why one would miss now."""

from __future__ import annotations

from typing import Any

import click

from .output import Output, number
from .state import State, pass_state
from .value_lines import field_parts, value_change_lines


@click.command("diff")
@click.argument("rev_a")
@click.argument("rev_b", required=False)
@click.option(
    "--source",
    "sources",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="With one REV: today's script or notebook (.py, .ipynb) of a __main__ function.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def diff(
    state: State, rev_a: str, rev_b: str | None, sources: tuple[str, ...], as_json: bool
) -> None:
    """Compare two evaluations: arguments, effects, code, result tensors, metrics.

    Everything is read from the store; no stored value is restored.

    With one REV: would the same call hit today? A function you name (not an
    evaluation id) of an importable module is imported as 'python' in the
    current directory would import it; otherwise, and for one defined in a
    script or notebook cell, today's source text is checked (the recorded
    script, or --source): read, never run.
    """
    out = Output()
    first = state.resolve(rev_a)
    if rev_b is None:
        from memostore.inspect.miss_check import why_miss

        # Only a function the user named is imported, never one the store names.
        record = why_miss(
            state.store, first, sources=sources, may_import=_names_function(state, rev_a, first)
        )
        if as_json:
            out.json(record)
        else:
            print_why_miss(out, record)
        return
    if sources:
        raise click.UsageError("--source compares one evaluation with today's code: give one REV")
    from memostore.inspect.comparison import diff_records

    second = state.resolve(rev_b)
    record = diff_records(state.store, first, second)
    if as_json:
        out.json(record)
    else:
        print_diff(out, record)


def _names_function(state: State, rev: str, evaluation_id: str) -> bool:
    """Whether *rev* named a function (``train``, ``train~1``), not an evaluation id."""
    rev = rev.strip()
    base, sep, _ = rev.rpartition("~")
    if not sep:
        base = rev
    named = state.resolve(base) if base != rev else evaluation_id
    return not named.startswith(base.lower())


def print_diff(out: Output, record: dict[str, Any]) -> None:
    a, b = record["a"], record["b"]
    out.styled(
        [
            ("diff ", "bold"),
            (a["id"][:12], "red"),
            (f" ({a['function']}) -> ", None),
            (b["id"][:12], "green"),
            (f" ({b['function']})", None),
        ]
    )
    _print_values(out, "arguments", record["args"], empty="(same)")
    if record.get("effects"):
        _print_values(out, "mutated arguments (state after the call)", record["effects"])
    if record.get("rng"):
        _print_rng(out, record["rng"])
    if record.get("version"):
        out.line()
        out.line(f"version {record['version']['a']!r} -> {record['version']['b']!r}", style="bold")
    print_code_changes(
        out,
        record["code"],
        title=f"code {_short(record['code']['a'])} -> {_short(record['code']['b'])}",
    )
    _print_result(out, record["result"])
    _print_metrics(out, record["metrics"])


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "-"


def _print_values(out: Output, title: str, changes: dict[str, Any], empty: str = "") -> None:
    out.line()
    out.heading(title)
    if not changes:
        out.line(f"  {empty or '(same)'}")
        return
    for name, change in changes.items():
        for parts in value_change_lines(name, change):
            out.styled(parts)


def _print_rng(out: Output, changes: dict[str, Any]) -> None:
    out.line()
    out.heading("random generators drawn from")
    for name, change in changes.items():
        if change.get("a") is None:
            text = "only in b"
        elif change.get("b") is None:
            text = "only in a"
        elif not change.get("before_same"):
            text = {
                True: "seeded: start state differs",
                False: "started from a different state (unseeded RNG: either stored run serves)",
            }.get(change.get("seeded"), "started from a different state")
        else:
            text = "same start, left in a different state"
        out.styled([(f"  {name}: ", "bold"), (text, None)])


def print_code_changes(out: Output, code: dict[str, Any], title: str) -> None:
    out.line()
    out.heading(title)
    if not (code.get("changed") or code.get("added") or code.get("removed")):
        out.line(
            "  (same)"
            if code.get("a") == code.get("b")
            else "  (digests differ; no dependency changed)"
        )
        return
    for change in code.get("changed") or []:
        out.styled([("  changed ", "bold"), (f"{change['symbol']} ({change.get('kind')})", None)])
        diff_text = (
            change.get("diff") or f"digest {_short(change.get('a'))} -> {_short(change.get('b'))}\n"
        )
        for line in diff_text.splitlines():
            out.line("    " + line, style=_diff_style(line))
    for change in code.get("added") or []:
        out.styled(
            [("  added ", "bold green"), (f"{change['symbol']} ({change.get('kind')})", None)]
        )
    for change in code.get("removed") or []:
        out.styled(
            [("  removed ", "bold red"), (f"{change['symbol']} ({change.get('kind')})", None)]
        )


def _diff_style(line: str) -> str | None:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    if line.startswith("@@"):
        return "cyan"
    return None


def _print_result(out: Output, result: dict[str, Any]) -> None:
    from memostore.values.summaries import describe

    out.line()
    out.heading("result")
    if result.get("same"):
        out.line("  (same)")
        return
    if result.get("a") is None and result.get("b") is None:
        out.line("  (no result on either side)")
        return
    if result.get("error"):
        out.line(f"  {result['error']}", style="red")
    summary = result.get("summary")
    if summary:
        out.styled([("  a: ", "bold"), (describe(summary.get("a"), 100), "red")])
        out.styled([("  b: ", "bold"), (describe(summary.get("b"), 100), "green")])
    tensors = result.get("tensors") or []
    if tensors:
        rows = []
        for t in tensors:
            shape, dtype = t.get("shape"), t.get("dtype")
            if "max_abs_diff" in t:
                diff_text, rel = number(t["max_abs_diff"]), number(t.get("rel_norm"))
            elif isinstance(shape, list) and shape and isinstance(shape[0], list):
                diff_text, rel = "shape differs", ""
            else:
                diff_text, rel = str(t.get("note") or t.get("error") or "differs"), ""
            rows.append([t["path"], str(shape), str(dtype), diff_text, rel])
        out.table(["tensor", "shape", "dtype", "max abs diff", "rel norm"], rows, indent="  ")
    for value in result.get("values") or []:
        where = value["path"]
        head = [] if where == "<result>" else [(f"{where}: ", "bold")]
        out.styled([("  ", None), *head, *field_parts(value)])
    if result.get("more"):
        out.line(f"  … and {result['more']} more differences", style="dim")
    if result.get("stopped"):
        out.line("  … the comparison stopped here (too many nodes)", style="dim")


def _print_metrics(out: Output, metrics: dict[str, Any]) -> None:
    out.line()
    out.heading("metrics")
    if not metrics:
        out.line("  (none)")
        return
    rows = []
    for tag, m in metrics.items():
        a, b = m.get("a") or {}, m.get("b") or {}
        rows.append(
            [
                tag,
                number(a.get("last")),
                number(b.get("last")),
                _signed(m.get("delta_last")),
                number(a.get("min")),
                number(b.get("min")),
                _signed(m.get("delta_min")),
            ]
        )
    out.table(["tag", "last a", "last b", "Δ last", "min a", "min b", "Δ min"], rows, indent="  ")


def _signed(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return ("+" if value > 0 else "") + number(value)


def print_why_miss(out: Output, record: dict[str, Any]) -> None:
    verdict = record.get("verdict")
    out.styled(
        [("evaluation ", "yellow"), (record["id"], "yellow"), (f"  {record['function']}", "bold")]
    )
    if record.get("method") == "source":
        where = ", ".join(record.get("source") or []) or "no source found"
        out.line(f"compared with today's source text (read, not run): {where}", style="dim")
    if verdict == "hit":
        out.line(
            "a call with the same arguments would hit now: nothing it depends on changed",
            style="green",
        )
    elif verdict == "miss":
        out.line("a call with the same arguments would miss now:", style="red")
    else:
        out.line("cannot tell whether a call would hit now:", style="yellow")
    for reason in record.get("reasons") or []:
        out.line(f"  - {reason}")
    if record.get("current_evaluation"):
        out.line(
            f"  (the ref now names evaluation {record['current_evaluation'][:12]})", style="dim"
        )
    unchecked = record.get("unchecked") or []
    if unchecked:
        out.line()
        out.heading("cannot be checked without running the code")
        for entry in unchecked:
            out.styled(
                [
                    (f"  {entry['symbol']}", "bold"),
                    (f" ({entry.get('kind')}): {entry.get('why')}", None),
                ]
            )
    code = record.get("code")
    if code and (code.get("changed") or code.get("added") or code.get("removed")):
        today = _short(code.get("current")) if code.get("current") else "today's source"
        print_code_changes(out, code, title=f"code {_short(code['recorded'])} -> {today}")
    for note in record.get("notes") or []:
        out.line(f"note: {note}", style="dim")
