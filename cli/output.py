"""Presentation: rich tables and colours on a terminal, plain text when piped, JSON on request.

Commands build their output from plain data and hand it to an :class:`Output`
(or :func:`echo`); nothing here reads the store. Every string written here
goes through :func:`memostore.errors.printable`, since what a record holds
may come from whoever wrote a pulled store: a terminal is never handed an
escape sequence from it, and rich never reads markup (``[link=...]``) in it.
JSON escapes control characters itself.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from memostore.errors import printable


def json_safe(value: Any) -> Any:
    """*value* with non-finite floats as strings, so the output is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def age(timestamp: Any, now: float | None = None) -> str:
    """How long ago: ``12s ago``, ``5m ago``, ``3h ago``, ``4d ago``, else the date."""
    if not isinstance(timestamp, (int, float)):
        return "?"
    seconds = (now if now is not None else time.time()) - timestamp
    if seconds < 0:
        return "just now"
    for limit, unit, size in (
        (60, "s", 1),
        (3600, "m", 60),
        (86400, "h", 3600),
        (30 * 86400, "d", 86400),
    ):
        if seconds < limit:
            return f"{int(seconds // size)}{unit} ago"
    return time.strftime("%Y-%m-%d", time.localtime(timestamp))


def duration(seconds: Any) -> str:
    """A short duration: ``12ms``, ``3.4s``, ``2m05s``, ``1h02m``."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def number(value: Any) -> str:
    """A metric value, compactly."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.6g}"
    if value is None:
        return ""
    return str(value)


STATUS_STYLE = {"ok": "green", "error": "red", "interrupted": "yellow"}


class Output:
    """Where a command writes: a terminal (rich) or a pipe (plain text).

    Attributes:
        rich: True when stdout is a terminal; styles and tables are drawn then.
    """

    def __init__(self, force_plain: bool = False) -> None:
        self.rich = not force_plain and _isatty(sys.stdout)
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True)
        return self._console

    # -- primitives -----------------------------------------------------------------------
    def line(self, text: str = "", style: str | None = None) -> None:
        """One line; *style* is a rich style used on a terminal only."""
        if self.rich:
            from rich.text import Text

            self.console.print(Text(printable(text), style=style or ""))
        else:
            click.echo(printable(text))

    def text(self, text: str) -> None:
        """A block of plain lines, written at once."""
        if text:
            click.echo(printable(text, lines=True))

    def styled(self, parts: Sequence[tuple[str, str | None]]) -> None:
        """One line made of (text, style) parts."""
        if self.rich:
            from rich.text import Text

            text = Text()
            for chunk, style in parts:
                text.append(printable(chunk), style=style or "")
            self.console.print(text)
        else:
            click.echo(printable("".join(chunk for chunk, _ in parts)))

    def json(self, data: Any) -> None:
        """*data* as indented, strict JSON."""
        click.echo(json.dumps(json_safe(data), indent=2, default=str))

    def json_list(self, items: Sequence[Any]) -> None:
        """A JSON list with one compact item per line (fast for long listings)."""
        lines = []
        for item in items:
            try:
                lines.append(_dumps(item))
            except ValueError:  # a non-finite float somewhere: spell it as a string
                lines.append(_dumps(json_safe(item)))
        click.echo("[\n" + ",\n".join(lines) + "\n]" if lines else "[]")

    def heading(self, text: str) -> None:
        self.line(text, style="bold cyan")

    def pairs(self, rows: Sequence[tuple[str, str]], indent: str = "") -> None:
        """Aligned ``key  value`` lines."""
        if not rows:
            return
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            self.styled([(f"{indent}{key.ljust(width)}  ", "bold"), (value, None)])

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[str]],
        styles: Sequence[str | None] | None = None,
        indent: str = "",
    ) -> None:
        """A table: rich on a terminal, space-aligned columns when piped."""
        if self.rich:
            from rich.table import Table
            from rich.text import Text

            table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
            for i, name in enumerate(columns):
                style = styles[i] if styles and i < len(styles) else None
                table.add_column(Text(printable(name)), style=style or "", overflow="fold")
            for row in rows:
                # Text, not str: rich would read markup in a string a record holds.
                table.add_row(*(Text(printable(cell)) for cell in row))
            if indent:
                from rich.padding import Padding

                self.console.print(Padding(table, (0, 0, 0, len(indent))))
            else:
                self.console.print(table)
            return
        cells = [[printable(c) for c in r] for r in (columns, *rows)]
        for line in aligned(cells):
            click.echo(indent + line)

    @contextmanager
    def progress(self, description: str) -> Iterator[Callable[[str, int, int | None], None]]:
        """A progress callback ``(phase, done, total)``: a bar on a terminal, silent otherwise."""
        if not _isatty(sys.stderr):
            yield lambda phase, done, total: None
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bars.add_task(f"{description}: {phase}", total=total)
            bars.update(tasks[phase], completed=done, total=total)

        with bars:
            yield update


def padded(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    """Rows with each cell padded to its column's width (the last cell is not padded)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    return [
        [cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        for row in rows
    ]


def aligned(rows: Sequence[Sequence[str]], gap: str = "  ") -> list[str]:
    """Rows as lines with space-padded columns."""
    return [gap.join(cells).rstrip() for cells in padded(rows)]


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(printable(c) for c in columns)
    writer.writerows([printable(c) if isinstance(c, str) else c for c in row] for row in rows)
    return buffer.getvalue()


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return printable(str(text).replace("|", "\\|").replace("\n", " "))

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |"]
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _dumps(item: Any) -> str:
    return json.dumps(item, allow_nan=False, default=str, separators=(", ", ": "))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def warn(message: str) -> None:
    """A warning on stderr (never mixed into JSON or CSV on stdout)."""
    click.echo(f"memostore: warning: {printable(message, lines=True)}", err=True)


def echo(text: Any = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` for text that may quote a record: lines kept, controls escaped."""
    click.echo(printable(text, lines=True), err=err, nl=nl)


def echo_drawn(text: str = "", *, nl: bool = True) -> None:
    """Text with escape sequences of its own (a plot's colours, a redraw's cursor moves).

    The strings of records in it were escaped as it was drawn (``metrics_cmds._render``).
    """
    click.echo(text, nl=nl)


__all__ = [
    "STATUS_STYLE",
    "Output",
    "age",
    "aligned",
    "csv_text",
    "duration",
    "echo",
    "echo_drawn",
    "json_safe",
    "markdown_table",
    "number",
    "padded",
    "warn",
]
