"""Digests for code the scanner failed on: coarse, so they can only over-invalidate.

When reading a function's source, normalising it or scanning its bytecode
raises, the function is keyed by the whole text of its module's file and by
its raw bytecode and constants (nested code included). Any edit of that
file, and any change of the code that runs, changes the digest; a comment
edit elsewhere in the file does too, which costs a recompute, never a
stale result. Nothing here may raise: it is what runs after something did.
"""

from __future__ import annotations

import linecache
import os
import sys
from types import CodeType, FunctionType
from typing import Any

from ..odb.objects import hash_parts

__all__ = [
    "CODE_FALLBACK",
    "VALUE_FALLBACK",
    "class_fallback",
    "code_fallback",
    "describe",
    "file_text_digest",
    "raw_code_digest",
]

# How what failed was keyed instead, as the warning says it.
CODE_FALLBACK = (
    "it is keyed by its module's whole text and its bytecode instead, "
    "so any edit of that module recomputes its results"
)
VALUE_FALLBACK = "that value is keyed by its value at each call instead"


def describe(exc: BaseException) -> str:
    """``IndexError: tuple index out of range``, cut to one short line."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def file_text_digest(filename: str | None, module_globals: dict[str, Any] | None = None) -> str:
    """Digest of a source file's whole text as ``linecache`` holds it, or of its absence."""
    if not filename:
        return hash_parts(["no file"])
    try:
        lines = linecache.getlines(filename, module_globals)
    except Exception:
        lines = []
    if not lines:
        return hash_parts(["no source"])
    return hash_parts(["text", "".join(lines)])


def raw_code_digest(code: CodeType, depth: int = 0) -> str:
    """Digest of a code object's instructions, names, constants and layout, read raw.

    Unlike ``bytecode_digest`` it does not decode instructions (decoding is
    what may have failed); line tables and the file name are left out.
    """
    parts = [
        code.co_name,
        repr(
            (
                code.co_argcount,
                code.co_posonlyargcount,
                code.co_kwonlyargcount,
                code.co_flags,
                code.co_names,
                code.co_varnames,
                code.co_freevars,
                code.co_cellvars,
            )
        ),
        code.co_code.hex(),
        getattr(code, "co_exceptiontable", b"").hex(),
    ]
    parts += [_const_text(value, depth) for value in code.co_consts]
    return hash_parts(parts)


def _const_text(value: Any, depth: int) -> str:
    if depth > 50:
        return f"deep:{id(value)}"  # unique per process: a miss, never a false hit
    if isinstance(value, CodeType):
        return "code:" + raw_code_digest(value, depth + 1)
    if type(value) is tuple:
        return "tuple:" + repr([_const_text(v, depth + 1) for v in value])
    if type(value) is frozenset:
        return "frozenset:" + repr(sorted(_const_text(v, depth + 1) for v in value))
    try:
        return f"{type(value).__qualname__}:{value!r}"
    except Exception:
        return f"{type(value).__qualname__}:@{id(value)}"


def code_fallback(
    code: CodeType, module_globals: dict[str, Any] | None, why: str
) -> tuple[str, str]:
    """The local digest and the source text of a function whose scan failed."""
    try:
        text = file_text_digest(code.co_filename, module_globals)
        local = "fallback:" + hash_parts([text, raw_code_digest(code)])
    except Exception as exc:  # pragma: no cover - a code object without its attributes
        local = "fallback:" + hash_parts(["unreadable", str(id(code))])
        why = f"{why}; {describe(exc)}"
    return local, _explain(why, code.co_filename)


def class_fallback(cls: type, why: str) -> tuple[str, str]:
    """The local digest and the source text of a class whose scan failed."""
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    module_globals = getattr(module, "__dict__", None)
    file = getattr(module, "__file__", None)
    parts = [file_text_digest(file if isinstance(file, str) else None, module_globals)]
    try:
        attrs = list(cls.__dict__.items())
    except Exception:
        attrs = []
    for name, value in sorted(attrs, key=lambda item: str(item[0])):
        func = getattr(value, "__func__", value)
        if isinstance(func, FunctionType):
            parts.append(f"{name}={raw_code_digest(func.__code__)}")
    return "fallback:" + hash_parts(parts), _explain(why, file if isinstance(file, str) else None)


def _explain(why: str, filename: str | None) -> str:
    # The file's base name only: the text is stored with results that other machines read.
    where = f"the whole text of {os.path.basename(filename)}" if filename else "its module's text"
    return (
        f"# not scanned ({why});\n"
        f"# keyed instead by {where} and its bytecode: any edit there recomputes\n"
    )
