"""``memostore remote add/list/remove/trust``, ``push`` and ``pull``."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from memostore.errors import MemostoreError
from memostore.odb.store import Store
from memostore.remote import (
    RemoteConfig,
    SyncReport,
    TransferProgress,
    add_remote,
    get_remote,
    list_remotes,
    pull,
    push,
    remove_remote,
    set_remote_trust,
)
from memostore.transport.config import looks_like_url

from .output import echo


def register(group: click.Group) -> None:
    """Add ``remote`` (add/list/remove/trust), ``push`` and ``pull`` to *group*."""
    group.add_command(remote_group)
    group.add_command(push_cmd)
    group.add_command(pull_cmd)


# -- shared helpers -----------------------------------------------------------------------
def _store(create: bool) -> Store:
    """The store the root command chose (``--store PATH``, else the default).

    A pull may create the store (a fresh machine pulls into a new one); the
    other commands need an existing store.
    """
    ctx = click.get_current_context()
    found = ctx.find_object(Store)
    if found is not None:
        return found
    root = ctx.find_root()
    path = getattr(root.obj, "store_path", None)
    if path is None:
        path = root.params.get("store_path") or root.params.get("store")
    if path:
        return Store(path, create=create)
    return Store.default(create=create)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Expected failures become a one-line message and exit status 1."""
    try:
        yield
    except MemostoreError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        echo("interrupted; run the command again to resume", err=True)
        raise SystemExit(130) from None


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


class RichProgress(TransferProgress):
    """A progress bar on stderr: bytes, objects, rate and time left."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TextColumn("{task.fields[objects]} objects"),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._label = label
        self._task: Any = None
        self._lock = threading.Lock()
        self._objects = 0
        self._total_objects = 0

    def start(self, objects: int, nbytes: int) -> None:
        if objects == 0:
            return
        self._total_objects = objects
        self._progress.start()
        self._task = self._progress.add_task(self._label, total=nbytes, objects=f"0/{objects}")

    def advance(self, objects: int, nbytes: int) -> None:
        if self._task is None:
            return
        with self._lock:
            self._objects += objects
            count = f"{self._objects}/{self._total_objects}"
        self._progress.update(self._task, advance=nbytes, objects=count)

    def finish(self) -> None:
        if self._task is not None:
            self._progress.stop()
            self._task = None


def _progress(label: str, quiet: bool) -> TransferProgress | None:
    # Only on a terminal: logs and pipes get the one-line summary alone.
    if quiet or not sys.stderr.isatty():
        return None
    return RichProgress(label)


def _split_args(store: Store, args: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """``[NAME] [REV...]``: the first word is a remote if it names one (or is a URL)."""
    if not args:
        return None, ()
    names = {r.name for r in list_remotes(store)}
    if args[0] in names or looks_like_url(args[0]):
        return args[0], args[1:]
    return None, args


def _summary(report: SyncReport, remote: RemoteConfig) -> str:
    where = f"{remote.name} ({report.remote})" if remote.name else report.remote
    verb, prep = ("pushed", "to") if report.direction == "push" else ("pulled", "from")
    if report.up_to_date:
        line = f"{where}: everything up to date ({report.refs_unchanged} refs)"
    else:
        line = (
            f"{verb} {report.objects} objects ({_size(report.bytes)}) and "
            f"{len(report.refs_updated)} refs {prep} {where} in {report.seconds:.1f} s"
        )
        if report.refs_unchanged:
            line += f"; {report.refs_unchanged} refs unchanged"
    lines = [line]
    if report.refs_kept:
        side = "remote's" if report.direction == "push" else "local"
        shown = ", ".join(report.refs_kept[:3]) + (" …" if len(report.refs_kept) > 3 else "")
        lines.append(
            f"kept the {side} value of {len(report.refs_kept)} refs that differ (both are "
            f"valid results of the same call; --force overwrites): {shown}"
        )
    for name, reason in list(report.skipped.items())[:5]:
        lines.append(f"skipped ref {name}: {reason}")
    if len(report.skipped) > 5:
        lines.append(f"skipped {len(report.skipped) - 5} more refs")
    return "\n".join(lines)


_JOBS = click.option(
    "-j", "--jobs", type=click.IntRange(1, 64), default=8, show_default=True,
    help="Objects transferred in parallel.",
)  # fmt: skip
_FORCE = click.option(
    "--force", is_flag=True, help="Overwrite refs the other side holds with another value."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
_QUIET = click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
_TRUSTED = click.option(
    "--trusted",
    is_flag=True,
    help="Trust the remote: code stored by value (pickled) in what it sends may be loaded.",
)


def _sync(
    operation: Callable[..., SyncReport],
    label: str,
    args: tuple[str, ...],
    jobs: int,
    force: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    with _user_errors():
        store = _store(create=operation is pull)
        name, revs = _split_args(store, args)
        remote = get_remote(store, name)
        report = operation(
            store,
            remote,
            revs,
            jobs=jobs,
            force=force,
            progress=_progress(label, quiet or as_json),
        )
    if as_json:
        echo(json.dumps(report.to_json(), indent=2))
    else:
        echo(_summary(report, remote))


# -- commands ------------------------------------------------------------------------------
@click.group("remote")
def remote_group() -> None:
    """Manage the remotes this store pushes to and pulls from."""


@remote_group.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--endpoint", help="S3 endpoint URL (MinIO, R2, ...); default $AWS_ENDPOINT_URL.")
@click.option(
    "--auto-fetch/--no-auto-fetch",
    default=False,
    show_default=True,
    help="Look up local misses of memoised calls on this remote.",
)
@click.option(
    "--hardlinks/--no-hardlinks",
    default=True,
    show_default=True,
    help="Directory remotes on the store's file system: push by hard-linking object files "
    "(they never change) instead of copying them.",
)
@_TRUSTED
@click.option("--replace", is_flag=True, help="Overwrite a remote of the same name.")
def remote_add(
    name: str,
    url: str,
    endpoint: str | None,
    auto_fetch: bool,
    hardlinks: bool,
    trusted: bool,
    replace: bool,
) -> None:
    """Add a remote: a directory (/shared/ms, file:///...) or s3://bucket/prefix.

    Credentials are never stored: S3 uses the standard AWS chain
    (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws, roles).
    """
    with _user_errors():
        remote = add_remote(
            _store(create=True), name, url, endpoint=endpoint, auto_fetch=auto_fetch,
            hardlinks=hardlinks, trusted=trusted, replace=replace,
        )  # fmt: skip
    settings = [s for s, on in (("auto-fetch on", remote.auto_fetch), ("trusted", trusted)) if on]
    extra = f" ({', '.join(settings)})" if settings else ""
    echo(f"added remote {remote.name}: {remote.url}{extra}")


@remote_group.command("trust")
@click.argument("name")
@click.option("--off", is_flag=True, help="Stop trusting it: its pickled code is no longer loaded.")
def remote_trust(name: str, off: bool) -> None:
    """Trust a remote: code stored by value (pickled) in what it sends may be loaded.

    Pickled code runs when it is loaded: trust a remote only if you trust
    everyone who can write to it. Untrusted, its values restore through the
    decoding allowlist alone (classes defined in scripts or inside functions
    are then recomputed). Applies to objects pulled before, too.
    """
    with _user_errors():
        remote = set_remote_trust(_store(create=False), name, not off)
    if remote.trusted:
        echo(f"trusting remote {remote.name} ({remote.url}): its pickled code may be loaded")
    else:
        echo(f"no longer trusting remote {remote.name} ({remote.url})")


@remote_group.command("list")
@_JSON
def remote_list(as_json: bool) -> None:
    """List the configured remotes."""
    with _user_errors():
        remotes = list_remotes(_store(create=False))
    if as_json:
        echo(json.dumps([{"name": r.name, **r.to_json()} for r in remotes], indent=2))
        return
    for r in remotes:
        details = [f"endpoint {r.endpoint}"] if r.endpoint else []
        if r.auto_fetch:
            details.append("auto-fetch")
        if not r.hardlinks:
            details.append("no hard links")
        if r.trusted:
            details.append("trusted")
        suffix = f"  ({', '.join(details)})" if details else ""
        echo(f"{r.name}\t{r.url}{suffix}")


@remote_group.command("remove")
@click.argument("name")
def remote_remove(name: str) -> None:
    """Forget a remote (nothing on the remote is deleted)."""
    with _user_errors():
        remove_remote(_store(create=False), name)
    echo(f"removed remote {name}")


@click.command("push")
@click.argument("args", nargs=-1, metavar="[NAME] [REV...]")
@_JOBS
@_FORCE
@_JSON
@_QUIET
def push_cmd(args: tuple[str, ...], jobs: int, force: bool, as_json: bool, quiet: bool) -> None:
    """Send evaluations (all, or those REV names) to a remote.

    NAME is a configured remote (default: the only one, or origin) or a URL.
    REV is an evaluation id, a prefix of one, or a function name (all its
    evaluations). Only objects the remote lacks are sent; an interrupted push
    resumes when run again.
    """
    _sync(push, "push", args, jobs, force, as_json, quiet)


@click.command("pull")
@click.argument("args", nargs=-1, metavar="[NAME] [REV...]")
@_JOBS
@_FORCE
@_JSON
@_QUIET
def pull_cmd(args: tuple[str, ...], jobs: int, force: bool, as_json: bool, quiet: bool) -> None:
    """Fetch evaluations (all, or those REV names) from a remote.

    Every object is verified against its digest before it is stored. NAME and
    REV as for push.
    """
    _sync(pull, "pull", args, jobs, force, as_json, quiet)
