"""``memostore diff``: what changed between two evaluations, or why one would miss now."""

from __future__ import annotations

import os
from typing import Any

import click

from .output import Output, number
from .state import State, pass_state


@click.command("diff")
@click.argument("rev_a")
@click.argument("rev_b", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def diff(state: State, rev_a: str, rev_b: str | None, as_json: bool) -> None:
    """Compare two evaluations: arguments, code, result tensors, metrics.

    With one REV: would the same call hit today? Its recorded code dependencies
    are compared with today's code (the function's module is imported, with
    the current directory on the import path).
    """
    out = Output()
    first = state.resolve(rev_a)
    if rev_b is None:
        from memostore.comparison import why_miss

        record = why_miss(state.store, first, import_paths=_import_paths(state, first))
        if as_json:
            out.json(record)
        else:
            print_why_miss(out, record)
        return
    from memostore.comparison import diff_records

    second = state.resolve(rev_b)
    paths = list(dict.fromkeys(_import_paths(state, first) + _import_paths(state, second)))
    record = diff_records(state.store, first, second, import_paths=paths)
    if as_json:
        out.json(record)
    else:
        print_diff(out, record)


def _import_paths(state: State, evaluation_id: str) -> list[str]:
    """The working directory, then the one the evaluation ran in (where its modules were)."""
    paths = [os.getcwd()]
    body = state.store.evaluation(evaluation_id).body
    recorded = (body.get("provenance") or {}).get("cwd")
    if isinstance(recorded, str) and os.path.isdir(recorded) and recorded not in paths:
        paths.append(recorded)
    return paths


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
    _print_args(out, record["args"])
    print_code_changes(
        out,
        record["code"],
        title=f"code {_short(record['code']['a'])} -> {_short(record['code']['b'])}",
    )
    _print_result(out, record["result"])
    _print_metrics(out, record["metrics"])


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "-"


def _print_args(out: Output, args: dict[str, Any]) -> None:
    from memostore.summaries import describe

    out.line()
    out.heading("arguments")
    if not args:
        out.line("  (same)")
        return
    for name, change in args.items():
        kind = change["change"]
        if kind == "changed":
            out.styled(
                [
                    (f"  {name}: ", "bold"),
                    (describe(change["a"], 60), "red"),
                    (" -> ", None),
                    (describe(change["b"], 60), "green"),
                ]
            )
        elif kind == "added":
            out.styled(
                [(f"  {name}: ", "bold"), ("added ", None), (describe(change["b"], 80), "green")]
            )
        else:
            out.styled(
                [(f"  {name}: ", "bold"), ("removed ", None), (describe(change["a"], 80), "red")]
            )


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
        diff_text = change.get("diff") or f"digest {_short(change['a'])} -> {_short(change['b'])}\n"
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
    from memostore.summaries import describe

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
            if "error" in t:
                rows.append([t["path"], "", "", t["error"], ""])
            elif "max_abs_diff" not in t:
                rows.append(
                    [t["path"], str(t.get("shape")), str(t.get("dtype")), "shape differs", ""]
                )
            else:
                rows.append(
                    [
                        t["path"],
                        str(t["shape"]),
                        str(t["dtype"]),
                        number(t["max_abs_diff"]),
                        number(t["rel_norm"]),
                    ]
                )
        out.table(["tensor", "shape", "dtype", "max abs diff", "rel norm"], rows, indent="  ")
    for value in result.get("values") or []:
        out.styled(
            [
                (f"  {value['path']}: ", "bold"),
                (str(value.get("a")), "red"),
                (" -> ", None),
                (str(value.get("b")), "green"),
            ]
        )
    if "compared" in result and not tensors and not result.get("values"):
        out.line(f"  (encodings differ; all {result['compared']} compared values are equal)")


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
    code = record.get("code")
    if code and (code.get("changed") or code.get("added") or code.get("removed")):
        print_code_changes(
            out, code, title=f"code {_short(code['recorded'])} -> {_short(code['current'])} (today)"
        )
