"""``memostore du``, ``memostore rm`` and ``memostore tag``: what the store holds, removing
evaluations and pinning them."""

from __future__ import annotations

import heapq
import json
from typing import TYPE_CHECKING, Any

import click

from memostore.odb.collector import collector_paused

from .output import Output, age, echo, json_safe
from .state import State, pass_state

if TYPE_CHECKING:
    from memostore.lifecycle.usage import StoreUsage

# Rows of the largest evaluations that `du` without a target lists.
DU_TOP = 10


def register(group: click.Group) -> None:
    """Add du, rm and tag to the ``memostore`` group."""
    for command in (du, rm, tag):
        group.add_command(command)


def _size(n: int) -> str:
    from memostore.values.summaries import format_bytes

    return format_bytes(n)


def _targets(state: State, text: str) -> tuple[str | None, list[str]]:
    """(function, its evaluations) when *text* names a function, else (None, [the one
    evaluation the revision names])."""
    from memostore.odb.revisions import MIN_PREFIX, find_function
    from memostore.odb.tags import resolve_tag

    hexlike = len(text) >= MIN_PREFIX and not text.lower().strip("0123456789abcdef")
    if "~" not in text and not hexlike and resolve_tag(state.store, text) is None:
        function, listed, _ = find_function(state.store, text)
        if function is not None and listed:
            return function, [e["id"] for e in listed]
    return None, [state.resolve(text)]


# -- du ---------------------------------------------------------------------------------------
@click.command("du")
@click.argument("target", required=False, metavar="[FUNCTION|REV]")
@click.option(
    "-n",
    "top",
    type=click.IntRange(min=0),
    default=DU_TOP,
    show_default=True,
    help="Without a target: how many of the largest evaluations to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def du(state: State, target: str | None, top: int, as_json: bool) -> None:
    """Show what the store holds on disk: per function, per evaluation, in total.

    An evaluation's exclusive bytes are what the next gc frees if it alone goes
    (memostore rm); its shared bytes are what it reaches that others reach
    too (a tensor two results hold, the result of a parent it was computed from).
    With FUNCTION, each of its evaluations; with REV, that one evaluation.
    """
    with collector_paused():  # the sums and the table too, not only the walk
        _du(state, target, top, as_json)


def _du(state: State, target: str | None, top: int, as_json: bool) -> None:
    from memostore.lifecycle.usage import compute_usage
    from memostore.odb.tags import list_tags

    out = Output()
    function, ids = _targets(state, target) if target else (None, None)
    with out.progress("du") as progress:
        usage = compute_usage(state.store, progress=progress)
    tags: dict[str, list[str]] = {}
    for name, evaluation_id in list_tags(state.store).items():
        tags.setdefault(evaluation_id, []).append(name)
    if ids is not None:
        missing = [i for i in ids if i not in usage.evaluations]
        if missing:
            raise click.ClickException(
                f"evaluation {missing[0][:12]} is named by no ref (removed?); "
                "see what the store holds with `memostore log`"
            )
    if as_json:
        echo(_json_text(_du_json(usage, ids, tags)))
        return
    _print_store_line(out, usage)
    if ids is None:
        _print_functions(out, usage)
        _print_evaluations(out, usage, _largest(usage, top), tags, "largest evaluations")
    elif function is not None:
        _print_evaluations(out, usage, ids, tags, function)
    else:
        _print_one(out, usage, ids[0], tags)


def _du_json(usage: StoreUsage, ids: list[str] | None, tags: dict[str, list[str]]) -> Any:
    chosen = list(usage.evaluations) if ids is None else ids
    if ids is None:
        usage.evaluation_bytes()  # every evaluation's sums in one pass, before the lookups
    functions = usage.by_function()
    wanted = {usage.evaluations[e].function for e in chosen}
    return {
        "total_bytes": usage.total_bytes,
        "reachable_bytes": usage.reachable_bytes,
        "garbage_bytes": usage.garbage_bytes,
        "other_bytes": usage.other_bytes,
        "objects": len(usage.object_sizes),
        "functions": [
            {
                "function": f.function,
                "evaluations": len(f.evaluations),
                "bytes": f.bytes,
                "exclusive_bytes": f.exclusive_bytes,
                "shared_bytes": f.shared_bytes,
            }
            for f in functions.values()
            if f.function in wanted
        ],
        "evaluations": [_evaluation_json(usage, e, tags) for e in chosen],
    }


def _json_text(data: dict[str, Any]) -> str:
    """*data* as strict JSON: the top level indented, each item of a list on one line.

    ``json.dumps(..., indent=2)`` runs the pure-Python encoder: on 10,000
    evaluations it costs a third of a second, where compact items go through
    the C encoder (as ``log --json`` prints them).
    """
    fields = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            text = "[\n" + ",\n".join("    " + _compact_json(v) for v in value) + "\n  ]"
        else:
            text = _compact_json(value)
        fields.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(fields) + "\n}"


# One encoder for every item: json.dumps with options builds a new one per call,
# a third of the cost of 10,000 small items.
_COMPACT = json.JSONEncoder(allow_nan=False, default=str, separators=(", ", ": "))


def _compact_json(value: Any) -> str:
    try:
        return _COMPACT.encode(value)
    except ValueError:  # a non-finite float somewhere: spell it as a string
        return json.dumps(json_safe(value), default=str, separators=(", ", ": "))


def _evaluation_json(usage: StoreUsage, evaluation_id: str, tags: dict[str, list[str]]) -> Any:
    evaluation = usage.evaluations[evaluation_id]
    exclusive = usage.exclusive_bytes(evaluation_id)
    total = usage.bytes_of(evaluation_id)
    return {
        "id": evaluation_id,
        "function": evaluation.function,
        "status": evaluation.status,
        "started": evaluation.started,
        "refs": evaluation.refs,
        "tags": sorted(tags.get(evaluation_id, [])),
        "objects": len(evaluation.objects),
        "bytes": total,
        "exclusive_bytes": exclusive,
        "shared_bytes": total - exclusive,
    }


def _print_store_line(out: Output, usage: StoreUsage) -> None:
    line = (
        f"store: {_size(usage.total_bytes)} on disk in {len(usage.object_sizes)} object(s); "
        f"{_size(usage.reachable_bytes)} reachable from refs"
    )
    if usage.garbage_bytes:
        line += f", {_size(usage.garbage_bytes)} unreachable (the next gc frees it)"
    out.line(line)
    if usage.missing:
        out.line(
            f"du: {len(usage.missing)} object(s) linked but missing; run `memostore fsck`",
            style="yellow",
        )


def _print_functions(out: Output, usage: StoreUsage) -> None:
    functions = sorted(usage.by_function().values(), key=lambda f: (-f.bytes, f.function))
    if not functions:
        out.line("no evaluations")
        return
    out.line()
    out.table(
        ["function", "evaluations", "exclusive", "shared", "total"],
        [
            [
                f.function,
                str(len(f.evaluations)),
                _size(f.exclusive_bytes),
                _size(f.shared_bytes),
                _size(f.bytes),
            ]
            for f in functions
        ],
        styles=[None, None, "green", "dim", None],
    )


def _largest(usage: StoreUsage, top: int) -> list[str]:
    sums = usage.evaluation_bytes()
    # nsmallest, not a full sort: only the first *top* of 10,000 are shown.
    return heapq.nsmallest(top, sums, key=lambda e: (-sums[e][1], e))


def _print_evaluations(
    out: Output, usage: StoreUsage, ids: list[str], tags: dict[str, list[str]], title: str
) -> None:
    if not ids:
        return
    out.line()
    out.heading(title)
    rows = []
    for evaluation_id in ids:
        evaluation = usage.evaluations[evaluation_id]
        exclusive = usage.exclusive_bytes(evaluation_id)
        rows.append(
            [
                evaluation_id[:12],
                evaluation.function,
                evaluation.status,
                age(evaluation.started),
                _size(exclusive),
                _size(usage.bytes_of(evaluation_id) - exclusive),
                ", ".join(sorted(tags.get(evaluation_id, []))),
            ]
        )
    out.table(
        ["id", "function", "status", "created", "exclusive", "shared", "tags"],
        rows,
        styles=["yellow", None, None, "dim", "green", "dim", "cyan"],
    )


def _print_one(
    out: Output, usage: StoreUsage, evaluation_id: str, tags: dict[str, list[str]]
) -> None:
    evaluation = usage.evaluations[evaluation_id]
    exclusive = usage.exclusive_bytes(evaluation_id)
    total = usage.bytes_of(evaluation_id)
    out.line()
    out.styled([("evaluation ", "yellow"), (evaluation_id, "yellow")])
    rows = [
        ("function", evaluation.function),
        ("status", evaluation.status),
        ("objects", str(len(evaluation.objects))),
        ("exclusive", f"{_size(exclusive)} (the next gc frees it if this evaluation goes)"),
        ("shared", f"{_size(total - exclusive)} (other evaluations or refs reach it too)"),
        ("total", _size(total)),
        ("refs", ", ".join(evaluation.refs)),
    ]
    if tags.get(evaluation_id):
        rows.append(("tags", ", ".join(sorted(tags[evaluation_id]))))
    out.pairs(rows)


# -- rm ---------------------------------------------------------------------------------------
@click.command("rm")
@click.argument("targets", nargs=-1, required=True, metavar="REV... | FUNCTION")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@pass_state
def rm(state: State, targets: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Remove evaluations: delete the refs that name them; the next gc frees their objects.

    A FUNCTION name removes all of its evaluations (NAME~0 names its newest
    only). A tagged evaluation is refused until its tag is deleted
    (memostore tag -d NAME). What another evaluation still reaches (the
    result of a parent it was computed from) stays until that one goes too.
    """
    from memostore.lifecycle.removal import remove_evaluations

    ids: list[str] = []
    for text in targets:
        ids.extend(_targets(state, text)[1])
    ids = list(dict.fromkeys(ids))
    report = remove_evaluations(state.store, ids, dry_run=dry_run)
    out = Output()
    if as_json:
        out.json(report.to_json())
        return
    from memostore.odb import index

    entries, _ = index.lookup(state.store, report.evaluations)
    functions = {e: str(entry.get("function") or "?") for e, entry in entries.items()}
    verb = "would remove" if dry_run else "removed"
    out.line(
        f"rm: {verb} {len(report.evaluations)} evaluation(s) ({len(report.refs)} ref(s)); "
        f"the next gc frees {_size(report.freed_bytes)}"
        + (
            f" (and {_size(report.garbage_bytes)} unreachable already)"
            if report.garbage_bytes
            else ""
        )
    )
    for evaluation_id in report.evaluations:
        out.line(f"  {evaluation_id[:12]}  {functions.get(evaluation_id, '?')}")
    for name in report.kept_refs:
        out.line(f"rm: ref {name} changed meanwhile; left as it is", style="yellow")
    if not dry_run and report.freed_bytes:
        out.line(
            "rm: run `memostore gc` to free it (gc keeps objects younger than its "
            "grace period, 1h by default: `--grace`)"
        )


# -- tag --------------------------------------------------------------------------------------
@click.command("tag")
@click.argument("name", required=False)
@click.argument("rev", required=False)
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete tag NAME.")
@click.option("--force", is_flag=True, help="Move tag NAME if it names another evaluation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def tag(
    state: State, name: str | None, rev: str | None, delete: bool, force: bool, as_json: bool
) -> None:
    """Pin evaluations by name: tag NAME REV sets, tag -d NAME deletes, tag lists.

    A tagged evaluation is kept by gc, never evicted, and refused by
    memostore rm; NAME is a revision wherever REV is taken (memostore show NAME).
    """
    from memostore.odb import tags

    out = Output()
    if delete:
        if name is None or rev is not None:
            raise click.UsageError("give the tag to delete, alone: memostore tag -d NAME")
        target = tags.delete_tag(state.store, name)
        if as_json:
            out.json({"deleted": name, "id": target})
        else:
            out.line(f"tag: deleted {name} (was {target[:12]})")
        return
    if name is None:
        _list_tags(out, state, as_json)
        return
    if rev is None:
        raise click.UsageError("give the evaluation to tag: memostore tag NAME REV")
    tags.check_tag_name(name)  # before resolving REV: the name's rule is the likelier fix
    evaluation_id = state.resolve(rev)
    previous = tags.set_tag(state.store, name, evaluation_id, force=force)
    if as_json:
        out.json({"tag": name, "id": evaluation_id, "previous": previous})
    elif previous is not None and previous != evaluation_id:
        out.line(f"tag: moved {name} from {previous[:12]} to {evaluation_id[:12]}")
    else:
        out.line(f"tag: {name} -> {evaluation_id[:12]}")


def _list_tags(out: Output, state: State, as_json: bool) -> None:
    from memostore.odb import index
    from memostore.odb.tags import list_tags

    listed = list_tags(state.store)
    entries, _ = index.lookup(state.store, set(listed.values()))
    if as_json:
        out.json_list(
            [
                {"tag": name, "id": eid, "function": (entries.get(eid) or {}).get("function")}
                for name, eid in listed.items()
            ]
        )
        return
    if not listed:
        out.line("no tags; set one with `memostore tag NAME REV`")
        return
    rows = []
    for name, evaluation_id in listed.items():
        entry = entries.get(evaluation_id) or {}
        rows.append(
            [
                name,
                evaluation_id[:12],
                str(entry.get("function") or "(unreadable)"),
                age(entry.get("started")),
            ]
        )
    out.table(["tag", "id", "function", "created"], rows, styles=["cyan", "yellow", None, "dim"])
