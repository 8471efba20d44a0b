"""The names evaluations are shown by: TensorBoard's run names, else function and arguments.

An evaluation that a TensorBoard run names (its record's ``run_name``: a
standalone run's writer, or a memoised call's writer given a ``log_dir``) is
shown as TensorBoard shows that run: its directory relative to the log root,
the deepest directory holding every such run shown (``runs`` for
``runs/lr0.1_seed4`` and ``runs/lr0.01_seed1``, as ``tensorboard --logdir
runs`` names them ``lr0.1_seed4`` and ``lr0.01_seed1``).

Any other evaluation is named by its function and the arguments that differ
among the evaluations of that function shown: ``train lr=0.1 seed=4`` beside
``train lr=0.01 seed=4`` (``train`` alone when nothing differs).

A name several evaluations would share gets each one's short id, ``train
(1a2b3c4d)``, so a name picks one evaluation among those shown. Names depend
on what is shown together; the evaluation id is the stable name.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

# Longest argument value written into a name (longer ones are cut with "…").
_VALUE_MAX = 24
_ID_SUFFIX = 8


def call_arguments(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments for listings: scalars as values, anything else as a summary line.

    *entry* is an evaluation record or index entry (its ``hparams`` and
    ``args_summary``); a standalone run's are the hyper-parameters it logged.
    """
    hparams = entry.get("hparams") or {}
    summary = entry.get("args_summary") or {}
    return {name: hparams.get(name, text) for name, text in summary.items()} | {
        name: value for name, value in hparams.items() if name not in summary
    }


def short_function(function: str) -> str:
    """``train`` for ``module:train``, ``train.py`` for the run ``run:train.py``."""
    return function.split(":", 1)[1] if ":" in function else function


def value_text(value: Any) -> str:
    """An argument value as a name shows it: ``0.1``, ``1e-05``, ``sgd``, ``True``."""
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text if len(text) <= _VALUE_MAX else text[: _VALUE_MAX - 1] + "…"


def log_root(run_names: Iterable[str]) -> str:
    """The deepest directory holding every one of *run_names* (``""``: none in common)."""
    parents = [posixpath.dirname(name.rstrip("/")).split("/") for name in run_names]
    if not parents:
        return ""
    common: list[str] = []
    for parts in zip(*parents, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return "/".join(common)


def run_display_name(run_name: str, root: str) -> str:
    """*run_name* relative to the log *root* (itself when it is not below it)."""
    if root and run_name.startswith(root.rstrip("/") + "/"):
        return run_name[len(root.rstrip("/")) + 1 :]
    if root == "/" and run_name.startswith("/"):
        return run_name[1:] or run_name
    return run_name


def _differing(args_of: list[Mapping[str, Any]]) -> list[str]:
    """The argument names whose values are not the same in every one of *args_of*."""
    order: dict[str, None] = {}
    for args in args_of:
        order.update(dict.fromkeys(args))
    missing = object()
    out = []
    for name in order:
        values = [args.get(name, missing) for args in args_of]
        first = values[0]
        if any(v is missing or type(v) is not type(first) or v != first for v in values):
            out.append(name)
    return out


def display_names(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The name of each evaluation among *records* (those shown together), by id.

    Args:
        records: ``{"id", "function", "args", "run_name"}`` each, as
            ``memostore log --json`` lists them (running ones too).

    Returns:
        id -> name (see the module's docstring).
    """
    records = list(records)
    names: dict[str, str] = {}
    named = [r for r in records if isinstance(r.get("run_name"), str) and r["run_name"]]
    root = log_root(r["run_name"] for r in named)
    for record in named:
        names[record["id"]] = run_display_name(record["run_name"], root)
    by_function: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if record["id"] not in names:
            by_function.setdefault(str(record.get("function") or ""), []).append(record)
    for function, group in by_function.items():
        args_of = [dict(r.get("args") or {}) for r in group]
        differing = _differing(args_of) if len(group) > 1 else []
        short = short_function(function)
        for record, args in zip(group, args_of, strict=True):
            shown = [f"{k}={value_text(args[k])}" for k in differing if k in args]
            names[record["id"]] = " ".join([short, *shown])
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {
        i: f"{name} ({i[:_ID_SUFFIX]})" if counts[name] > 1 else name for i, name in names.items()
    }


__all__ = [
    "call_arguments",
    "display_names",
    "log_root",
    "run_display_name",
    "short_function",
    "value_text",
]
