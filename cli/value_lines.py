"""Lines of text for value differences (``memostore diff``): one per changed field.

A difference inside an object is written with its path, never cut before the
change: ``model: Net.fc1.training: True -> False``, ``args: Namespace.lr:
0.001 -> 0.003``, ``data: [2]: 3 -> 4``, ``cfg: ['opt']: 'sgd' -> 'adam'``.
"""

from __future__ import annotations

from typing import Any

from .output import number

Parts = list[tuple[str, str | None]]
# Width of each side of a change; long texts show the part around the first difference.
SIDE_WIDTH = 60
_LEAD = 20


def value_change_lines(name: str, change: dict[str, Any]) -> list[Parts]:
    """The lines describing how one named value (an argument, an effect) changed."""
    from memostore.values.summaries import describe

    head = (f"  {name}: ", "bold")
    kind = change.get("change")
    if kind == "added":
        return [[head, ("added ", None), (describe(change.get("b"), 80), "green")]]
    if kind == "removed":
        return [[head, ("removed ", None), (describe(change.get("a"), 80), "red")]]
    if change.get("error"):
        return [[head, (str(change["error"]), "red")]]
    fields = change.get("fields") or []
    if not fields:
        return [[head, *pair_parts(change.get("a"), change.get("b"))]]
    lines: list[Parts] = []
    for entry in fields:
        path = entry.get("path") or ""
        where = f"{change.get('class') or ''}{path}" if path and path[0] == "." else path
        parts: Parts = [head]
        if where:
            parts.append((f"{where}: ", "bold"))
        parts += field_parts(entry)
        lines.append(parts)
    if change.get("more"):
        lines.append([head, (f"… and {change['more']} more differences", "dim")])
    if change.get("stopped"):
        lines.append([head, ("… the comparison stopped here (too many nodes)", "dim")])
    return lines


def field_parts(entry: dict[str, Any]) -> Parts:
    """One difference: ``a -> b``, ``added x``, ``removed x`` or a tensor's change."""
    from memostore.values.summaries import describe

    if "tensor" in entry:
        return [(tensor_text(entry["tensor"]), "yellow")]
    kind = entry.get("change")
    if kind == "added":
        return [("added ", None), (describe(entry.get("b"), 80), "green")]
    if kind == "removed":
        return [("removed ", None), (describe(entry.get("a"), 80), "red")]
    parts = pair_parts(entry.get("a"), entry.get("b"))
    if entry.get("note"):
        parts.append((f"  ({entry['note']})", "dim"))
    return parts


def pair_parts(a: Any, b: Any) -> Parts:
    """``a -> b``, each side cut to :data:`SIDE_WIDTH` around where they first differ."""
    from memostore.values.summaries import describe

    left, right = describe(a, 1 << 20), describe(b, 1 << 20)
    left, right = excerpt(left, right)
    return [(left, "red"), (" -> ", None), (right, "green")]


def excerpt(left: str, right: str, width: int = SIDE_WIDTH) -> tuple[str, str]:
    """Both texts cut to *width*, keeping the first difference (and a little before it) in view."""
    if len(left) <= width and len(right) <= width:
        return left, right
    common = 0
    for x, y in zip(left, right, strict=False):
        if x != y:
            break
        common += 1
    start = max(0, common - _LEAD)
    return _window(left, start, width), _window(right, start, width)


def _window(text: str, start: int, width: int) -> str:
    if start >= len(text):
        start = max(0, len(text) - width)
    body = text[start : start + width]
    return ("…" if start else "") + body + ("…" if start + width < len(text) else "")


def tensor_text(stats: dict[str, Any]) -> str:
    """A tensor's change: shape or dtype change, max abs difference, or why no numbers."""
    shape, dtype = stats.get("shape"), stats.get("dtype")
    if isinstance(shape, list) and shape and isinstance(shape[0], list):
        text = f"shape {shape[0]} -> {shape[1]}"
        if isinstance(dtype, list):
            text += f", dtype {dtype[0]} -> {dtype[1]}"
        return text
    pieces = [f"dtype {dtype[0]} -> {dtype[1]}"] if isinstance(dtype, list) else []
    if "max_abs_diff" in stats:
        rel = number(stats.get("rel_norm"))
        pieces.append(f"max abs diff {number(stats['max_abs_diff'])} (rel norm {rel})")
    elif stats.get("note"):
        pieces.append(f"data differs ({stats['note']})")
    elif "error" in stats:
        pieces.append(str(stats["error"]))
    what = f"{shape}" if isinstance(dtype, list) else f"{dtype} {shape}"
    text = f"{what}: {', '.join(pieces)}"
    return text
