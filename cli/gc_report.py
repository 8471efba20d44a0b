"""How ``memostore gc`` prints eviction and remote gc reports."""

from __future__ import annotations

from typing import Any

from .output import Output, age, duration

# Evicted evaluations listed one per line; past this many, a count says the rest.
_SHOWN = 20


def _size(n: int) -> str:
    from memostore.values.summaries import format_bytes

    return format_bytes(n)


def print_eviction(out: Output, report: Any, *, where: str = "") -> None:
    """The evaluations an eviction chose, what they free, and what it spared."""
    verb = "would evict" if report.dry_run else "evicted"
    shown = report.evicted if report.dry_run else report.evicted[:_SHOWN]
    for ev in shown:
        out.line(
            f"{verb} {ev.id[:12]}  {ev.function}  last used {age(ev.last_used)}  "
            f"{_size(ev.bytes)}  ({ev.reason})"
        )
    if len(report.evicted) > len(shown):
        out.line(f"... and {len(report.evicted) - len(shown)} more")
    out.line(
        f"gc{where}: {verb} {len(report.evicted)} evaluation(s), "
        f"{_size(report.bytes_evicted)} they alone held; "
        f"{_size(report.bytes_before)} -> {_size(report.bytes_after)}"
    )
    if report.protected:
        spared = ", ".join(f"{n} {why}" for why, n in sorted(report.protected.items()))
        out.line(f"gc{where}: kept evaluations the policy chose but that must stay: {spared}")
    if report.over_limit:
        out.line(
            f"gc{where}: still over --max-size: the rest is tagged, running or younger than "
            "the grace period (`memostore tag -d` unpins, --grace shortens)",
            style="yellow",
        )


def print_remote(out: Output, report: Any, grace: float) -> None:
    """The report of ``gc --remote``."""
    where = f" {report.remote}"
    if report.eviction is not None:
        print_eviction(out, report.eviction, where=where)
    verb = "would delete" if report.dry_run else "deleted"
    out.line(
        f"gc{where}: {verb} {len(report.refs_removed)} ref(s) and "
        f"{report.objects_deleted} object(s) ({_size(report.bytes_freed)}); "
        f"{report.reachable} reachable object(s) kept"
    )
    if report.leases_removed or report.markers_removed:
        out.line(
            f"gc{where}: {verb} {report.leases_removed} stale lease(s) and "
            f"{report.markers_removed} waiter marker(s) left by processes that are gone"
        )
    if report.kept_young:
        out.line(
            f"gc{where}: kept {report.kept_young} unreachable object(s) written less than "
            f"{duration(grace)} ago (a push may be sending them)"
        )
    if report.kept_undated:
        out.line(
            f"gc{where}: kept {report.kept_undated} unreachable object(s): this remote gives "
            "no modification times (run with --grace 0 when nothing pushes to it)",
            style="yellow",
        )
    if report.restored:
        out.line(
            f"gc{where}: sent back {len(report.restored)} object(s) that a concurrent push "
            "relied on"
        )
    for name, why in sorted(report.damaged_refs.items()):
        out.line(f"gc{where}: ref {name}: {why}", style="red")
    for name, why in sorted(report.skipped.items()):
        out.line(f"gc{where}: ref {name} ignored: {why}", style="yellow")
