"""``memostore gc`` and ``memostore fsck``."""

from __future__ import annotations

import re
from typing import Any

import click

from .output import Output, duration, echo
from .state import State, pass_state

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")


class Duration(click.ParamType):
    """Seconds, or a number with a unit: ``90``, ``30m``, ``1h``, ``2d``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        match = _DURATION_RE.match(str(value))
        if not match:
            self.fail(f"{value!r} is not a duration (e.g. 3600, 30m, 1h, 2d)", param, ctx)
        return float(match.group(1)) * _UNITS[match.group(2)]


def _size(n: int) -> str:
    from memostore.values.summaries import format_bytes

    return format_bytes(n)


class Size(click.ParamType):
    """Bytes, or a number with a binary unit: ``1000000``, ``500M``, ``50G``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from memostore.lifecycle.settings import parse_size

        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command("gc")
@click.option(
    "--dry-run", is_flag=True, help="Report what would be evicted and freed; change nothing."
)
@click.option(
    "--grace",
    type=Duration(),
    default="1h",
    show_default=True,
    help="Keep unreachable objects and temp files younger than this (SECONDS or 30m, 1h, 2d); "
    "evaluations created or used within it are never evicted.",
)
@click.option(
    "--quarantine-age",
    type=Duration(),
    default="14d",
    show_default=True,
    help="Delete damaged objects and packs moved to quarantine/ longer ago than this.",
)
@click.option(
    "--max-size",
    type=Size(),
    default=None,
    help="Evict least recently used evaluations until the store fits in SIZE (500M, 50G, bytes).",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Per function, keep only the N most recently used evaluations.",
)
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="Evict evaluations created longer ago than this (e.g. 30d).",
)
@click.option(
    "--unused-for",
    type=Duration(),
    default=None,
    help="Evict evaluations not used (stored or hit) for this long (e.g. 14d).",
)
@click.option(
    "--remote",
    "remote",
    default=None,
    metavar="NAME",
    help="Run gc and these policies on a remote (name or URL) instead of this store.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@pass_state
def gc(
    state: State,
    dry_run: bool,
    grace: float,
    quarantine_age: float,
    max_size: int | None,
    keep_last: int | None,
    older_than: float | None,
    unused_for: float | None,
    remote: str | None,
    as_json: bool,
) -> None:
    """Delete objects that no ref reaches, stale temp files and old quarantined objects.

    Objects younger than the grace period are kept, so an evaluation another
    process is recording right now is never broken. With --max-size,
    --keep-last, --older-than or --unused-for, evaluations are evicted first
    (their refs removed; tagged, running and recent ones never), least
    recently used first, and the sweep then frees what they alone held.
    """
    from memostore.lifecycle.eviction import EvictionPolicy

    from .gc_report import print_eviction, print_remote

    policy = EvictionPolicy(max_size, keep_last, older_than, unused_for)
    out = Output()
    if remote is not None:
        from memostore.lifecycle.remote_gc import gc_remote

        remote_report = gc_remote(state.store, remote, policy, grace_s=grace, dry_run=dry_run)
        if as_json:
            out.json(remote_report.to_json())
        else:
            print_remote(out, remote_report, grace)
        return
    eviction = None
    with out.progress("gc") as progress:
        if policy.empty:
            report = _plain_gc(state, grace, dry_run, quarantine_age, progress)
        else:
            from memostore.lifecycle.eviction import evict

            eviction = evict(
                state.store,
                policy,
                grace_s=grace,
                dry_run=dry_run,
                quarantine_age_s=quarantine_age,
                progress=progress,
            )
            # A dry run removed no ref: its sweep shows today's garbage only.
            report = eviction.gc or _plain_gc(state, grace, True, quarantine_age, progress)
    if as_json:
        data = report.to_json()
        if eviction is not None:
            data["eviction"] = {k: v for k, v in eviction.to_json().items() if k != "gc"}
        out.json(data)
        return
    if eviction is not None:
        print_eviction(out, eviction)
    # A dry run's sweep ran before any ref went: what it counts is today's garbage,
    # on top of what the eviction above would free.
    _print_gc(out, report, dry_run, grace, besides_eviction=eviction is not None and dry_run)


def _plain_gc(
    state: State, grace: float, dry_run: bool, quarantine_age: float, progress: Any
) -> Any:
    from memostore.lifecycle.maintenance import gc as run_gc

    return run_gc(
        state.store,
        grace_s=grace,
        dry_run=dry_run,
        quarantine_age_s=quarantine_age,
        progress=progress,
    )


def _print_gc(
    out: Output, report: Any, dry_run: bool, grace: float, besides_eviction: bool = False
) -> None:
    verb = "would free" if dry_run else "freed"
    if besides_eviction:
        verb = "besides the eviction, would free"
    out.line(
        f"gc: {verb} {len(report.deleted)} object(s) ({_size(report.bytes_freed)}) no ref "
        f"reaches{' now' if besides_eviction else ''}, "
        f"{report.tmp_removed} temp file(s) ({_size(report.tmp_bytes)}), "
        f"{report.quarantine_removed} quarantined object(s) ({_size(report.quarantine_bytes)})"
    )
    if besides_eviction:
        out.line(f"gc: {report.reachable} object(s) reachable from refs now")
    else:
        out.line(f"gc: {report.reachable} object(s) reachable from refs kept")
    if report.packs_merged:
        out.line(f"gc: merged {report.packs_merged} small pack(s)")
    if report.packs_quarantined:
        out.line(
            f"gc: moved {report.packs_quarantined} damaged pack(s) to quarantine/ "
            "(their objects are recomputed when next needed)",
            style="yellow",
        )
    if report.kept_young:
        out.line(
            f"gc: kept {report.kept_young} unreachable object(s) younger than {duration(grace)} "
            "(they may belong to an evaluation being recorded)"
        )
    if report.unreadable:
        out.line(
            f"gc: {len(report.unreadable)} reachable object(s) are missing or damaged; "
            "run `memostore fsck`",
            style="yellow",
        )


@click.command("fsck")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@pass_state
def fsck(state: State, as_json: bool) -> None:
    """Check every object's digest, every document's links and every ref's target.

    Exits with status 1, naming each bad object or ref, when anything is wrong.
    Rebuilds the evaluation index when it is missing or out of date.
    """
    from memostore.lifecycle.maintenance import fsck as run_fsck

    out = Output()
    with out.progress("fsck") as progress:
        report = run_fsck(state.store, progress=progress)
    if as_json:
        out.json(report.to_json())
    else:
        for problem in report.problems:
            out.line(str(problem), style="red")
        out.line(
            f"fsck: checked {report.objects} object(s) ({_size(report.bytes)}) "
            f"and {report.refs} ref(s); index {report.index}"
        )
    if not report.ok:
        echo(
            f"memostore: fsck found {len(report.problems)} problem(s); a memoised call whose "
            "objects are damaged recomputes them, and `memostore gc` frees what no ref reaches",
            err=True,
        )
        click.get_current_context().exit(1)
