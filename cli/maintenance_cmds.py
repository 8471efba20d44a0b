"""``memostore gc`` and ``memostore fsck``."""

from __future__ import annotations

import re
from typing import Any

import click

from .output import Output, duration
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
    from memostore.summaries import format_bytes

    return format_bytes(n)


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Report what would be freed; delete nothing.")
@click.option(
    "--grace",
    type=Duration(),
    default="1h",
    show_default=True,
    help="Keep unreachable objects and temp files younger than this (SECONDS or 30m, 1h, 2d).",
)
@click.option(
    "--quarantine-age",
    type=Duration(),
    default="14d",
    show_default=True,
    help="Delete damaged objects and packs moved to quarantine/ longer ago than this.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@pass_state
def gc(state: State, dry_run: bool, grace: float, quarantine_age: float, as_json: bool) -> None:
    """Delete objects that no ref reaches, stale temp files and old quarantined objects.

    Objects younger than the grace period are kept, so an evaluation another
    process is recording right now is never broken.
    """
    from memostore.maintenance import gc as run_gc

    out = Output()
    with out.progress("gc") as progress:
        report = run_gc(
            state.store,
            grace_s=grace,
            dry_run=dry_run,
            quarantine_age_s=quarantine_age,
            progress=progress,
        )
    if as_json:
        out.json(report.to_json())
        return
    verb = "would free" if dry_run else "freed"
    out.line(
        f"gc: {verb} {len(report.deleted)} object(s) ({_size(report.bytes_freed)}), "
        f"{report.tmp_removed} temp file(s) ({_size(report.tmp_bytes)}), "
        f"{report.quarantine_removed} quarantined object(s) ({_size(report.quarantine_bytes)})"
    )
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
    from memostore.maintenance import fsck as run_fsck

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
        click.echo(
            f"memostore: fsck found {len(report.problems)} problem(s); a memoised call whose "
            "objects are damaged recomputes them, and `memostore gc` frees what no ref reaches",
            err=True,
        )
        click.get_current_context().exit(1)
