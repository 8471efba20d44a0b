"""Metric curves drawn in the terminal with braille dots.

Each character cell holds 2 x 4 dots. Points are reduced to one (min, max)
span per dot column before drawing, so a million points cost one vectorised
pass and a single spike still reaches the screen. Smoothing is TensorBoard's:
an exponential moving average debiased for its start, skipping non-finite
points. Pure functions: the caller decides colour and size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row % 4][col % 2]
_COLORS = (34, 31, 32, 33, 35, 36, 94, 91, 92, 93, 95, 96)  # ANSI foreground codes
_RESET = "\x1b[0m"
# Largest power of 1/weight a smoothing block may reach: far from overflow,
# and short blocks keep the rounding of the running sum negligible.
_BLOCK_LIMIT = 1e200
_BLOCK_MAX = 4096


@dataclass
class Curve:
    """One line of a plot: a label and its points (x and y, float64)."""

    label: str
    x: np.ndarray
    y: np.ndarray


def ema_smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: debiased EMA over the finite points.

    Non-finite points keep their value and do not move the average; a
    constant series is returned unchanged.

    Args:
        values: the series.
        weight: the smoothing weight in [0, 1); 0 returns the series itself.
    """
    y = np.asarray(values, dtype=np.float64)
    out = y.copy()
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    if weight == 0.0 or y.size == 0 or bool(np.all(y == y[0])):
        return out
    finite = np.isfinite(y)
    f = y[finite]
    if f.size == 0:
        return out
    # Beyond 1e100 the scaled running sum of the block method could overflow.
    big = np.abs(f).max() > 1e100
    smoothed = _ema_loop(f, weight) if big else _ema_blocks(f, weight)
    counts = np.arange(1, f.size + 1, dtype=np.float64)
    out[finite] = smoothed / (1.0 - weight**counts)
    return out


def _ema_blocks(f: np.ndarray, w: float) -> np.ndarray:
    # Within a block starting at a: s[a+k] = w^(k+1) * (s[a-1] + (1-w) * sum_j w^-(j+1) f[a+j]),
    # a cumulative sum instead of a Python loop over every point.
    block = int(min(_BLOCK_MAX, max(1, math.log(_BLOCK_LIMIT) / -math.log(w)))) if w > 0 else 1
    grow = w ** -np.arange(1, block + 1, dtype=np.float64)
    shrink = w ** np.arange(1, block + 1, dtype=np.float64)
    out = np.empty_like(f)
    carry = 0.0
    for a in range(0, f.size, block):
        seg = f[a : a + block]
        n = seg.size
        acc = np.cumsum(seg * grow[:n])
        out[a : a + n] = shrink[:n] * (carry + (1.0 - w) * acc)
        carry = float(out[a + n - 1])
    return out


def _ema_loop(f: np.ndarray, w: float) -> np.ndarray:
    out = np.empty_like(f)
    last = 0.0
    for i, v in enumerate(f.tolist()):
        last = last * w + (1.0 - w) * v
        out[i] = last
    return out


def column_spans(
    x: np.ndarray, y: np.ndarray, x0: float, x1: float, columns: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per dot column, the min and max of the finite y whose x falls in it (NaN if none)."""
    ok = np.isfinite(x) & np.isfinite(y)
    xs, ys = x[ok], y[ok]
    lo = np.full(columns, np.inf)
    hi = np.full(columns, -np.inf)
    if xs.size:
        scale = (columns - 1) / (x1 - x0) if x1 > x0 else 0.0
        col = np.clip(((xs - x0) * scale + 0.5).astype(np.int64), 0, columns - 1)
        np.minimum.at(lo, col, ys)
        np.maximum.at(hi, col, ys)
    empty = lo > hi
    lo[empty] = np.nan
    hi[empty] = np.nan
    return lo, hi


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.bits = np.zeros((height, width), dtype=np.uint8)
        self.color = np.full((height, width), -1, dtype=np.int16)

    def column(self, c: int, top: int, bottom: int, color: int) -> None:
        for r in range(max(top, 0), min(bottom, 4 * self.height - 1) + 1):
            cell = (r // 4, c // 2)
            self.bits[cell] |= _DOTS[r % 4][c % 2]
            self.color[cell] = color

    def rows(self, colored: bool) -> list[str]:
        lines = []
        for r in range(self.height):
            parts = []
            for c in range(self.width):
                bits = int(self.bits[r, c])
                ch = chr(0x2800 + bits) if bits else " "
                color = int(self.color[r, c])
                if colored and bits and color >= 0:
                    ch = f"\x1b[{_COLORS[color % len(_COLORS)]}m{ch}{_RESET}"
                parts.append(ch)
            lines.append("".join(parts))
        return lines


def _joined(top: int, bottom: int, prev: tuple[int, int] | None) -> tuple[int, int]:
    """Stretch a column's span to touch the previous column's, so the line is unbroken."""
    if prev is None:
        return top, bottom
    ptop, pbottom = prev
    if bottom < ptop:
        bottom = ptop
    elif top > pbottom:
        top = pbottom
    return top, bottom


def _draw(
    canvas: _Canvas, lo: np.ndarray, hi: np.ndarray, y0: float, y1: float, color: int
) -> None:
    scale = (4 * canvas.height - 1) / (y1 - y0)
    tops = np.rint((y1 - hi) * scale)
    bottoms = np.rint((y1 - lo) * scale)
    prev: tuple[int, int] | None = None
    prev_col = -1
    for c in np.flatnonzero(~np.isnan(lo)).tolist():
        span = (int(tops[c]), int(bottoms[c]))
        if prev is not None and c - prev_col > 1:
            # A gap between populated columns: a straight line between their middles.
            start, end = sum(prev) / 2, sum(span) / 2
            for k in range(prev_col + 1, c):
                r = round(start + (end - start) * (k - prev_col) / (c - prev_col))
                canvas.column(k, *_joined(r, r, prev), color)
                prev = (r, r)
        canvas.column(c, *_joined(*span, prev), color)
        prev, prev_col = span, c


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _fmt_x(v: float, mode: str, span: float) -> str:
    if mode == "step":
        return str(round(v))
    if mode == "wall":
        pattern = "%H:%M:%S" if span < 86400 else "%m-%d %H:%M"
        return time.strftime(pattern, time.localtime(v))
    sign, v = ("-" if v < 0 else ""), abs(v)
    if v < 120:
        return f"{sign}{v:.3g}s"
    if v < 7200:
        return f"{sign}{v / 60:.3g}m"
    return f"{sign}{v / 3600:.3g}h"


def render(
    curves: list[Curve],
    *,
    width: int = 80,
    height: int = 20,
    x_mode: str = "step",
    color: bool = True,
    title: str = "",
) -> str:
    """Draw *curves* on shared axes; the text to print (ANSI colours if *color*).

    Args:
        curves: the lines, drawn in order (later ones on top).
        width: total width in characters, axis labels included.
        height: height of the plotting area in rows.
        x_mode: ``step``, ``wall`` or ``relative``: how to label the x axis.
        color: colour each curve (otherwise curves are told apart only by the legend).
        title: a first line.
    """
    finite_x = [c.x[np.isfinite(c.x) & np.isfinite(c.y)] for c in curves]
    finite_y = [c.y[np.isfinite(c.x) & np.isfinite(c.y)] for c in curves]
    lines = [title] if title else []
    if not any(v.size for v in finite_y):
        return "\n".join([*lines, "(no finite points to plot)"])
    x0 = min(float(v.min()) for v in finite_x if v.size)
    x1 = max(float(v.max()) for v in finite_x if v.size)
    y0 = min(float(v.min()) for v in finite_y if v.size)
    y1 = max(float(v.max()) for v in finite_y if v.size)
    if y1 == y0:
        pad = abs(y0) * 0.05 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    labels = [_fmt(y1), _fmt((y0 + y1) / 2), _fmt(y0)]
    margin = max(len(s) for s in labels) + 1
    plot_w = max(8, width - margin - 1)
    plot_h = max(3, height)
    canvas = _Canvas(plot_w, plot_h)
    for i, curve in enumerate(curves):
        lo, hi = column_spans(curve.x, curve.y, x0, x1, 2 * plot_w)
        _draw(canvas, lo, hi, y0, y1, i)
    for r, text in enumerate(canvas.rows(color)):
        label = ""
        if r == 0:
            label = labels[0]
        elif r == plot_h // 2:
            label = labels[1]
        elif r == plot_h - 1:
            label = labels[2]
        lines.append(f"{label:>{margin - 1}} ┤{text}")
    lines.append(" " * margin + "└" + "─" * plot_w)
    left, mid, right = (_fmt_x(v, x_mode, x1 - x0) for v in (x0, (x0 + x1) / 2, x1))
    axis = [" "] * (plot_w + 1)
    for pos, text in ((0, left), ((plot_w - len(mid)) // 2, mid), (plot_w + 1 - len(right), right)):
        for k, ch in enumerate(text):
            if 0 <= pos + k < len(axis):
                axis[pos + k] = ch
    lines.append(" " * margin + "".join(axis))
    for i, curve in enumerate(curves):
        mark = "━━"
        if color:
            mark = f"\x1b[{_COLORS[i % len(_COLORS)]}m{mark}{_RESET}"
        lines.append(f"{mark} {curve.label}")
    return "\n".join(lines)
