"""Bytecode for code digests: scanning for the globals a function reads, and hashing.

Everything here decodes ``co_code`` directly instead of through ``dis``,
which costs about ten times more: ``scan_fast`` for the common case
(``LOAD_GLOBAL`` followed by attribute loads), ``scan_dis`` for the rarer
code that imports inside a function body or rebinds closure variables, and
``bytecode_digest``, the fallback for code without source. ``co_code`` is
the bytecode as compiled (specialised instructions are undone); an
argument is resolved to a name or a constant only for the opcodes that
take one, by the tables below.
"""

from __future__ import annotations

import dis
import inspect
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

import blake3

__all__ = [
    "LocalImport",
    "bytecode_digest",
    "code_tree",
    "encode_constant",
    "scan_dis",
    "scan_fast",
]

_OP = dis.opmap
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_LOAD_NAME = _OP["LOAD_NAME"]
_LOAD_ATTR = _OP["LOAD_ATTR"]
_LOAD_METHOD = _OP.get("LOAD_METHOD", -1)
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_CACHE = _OP.get("CACHE", -1)
_STORE_GLOBAL = _OP["STORE_GLOBAL"]
_DELETE_GLOBAL = _OP["DELETE_GLOBAL"]
_GLOBAL_STORES = frozenset({_STORE_GLOBAL, _DELETE_GLOBAL})
_NEEDS_DIS = frozenset(
    _OP[name] for name in ("IMPORT_NAME", "STORE_DEREF", "DELETE_DEREF") if name in _OP
)
# Since 3.11 LOAD_GLOBAL, and since 3.12 LOAD_ATTR, keep a flag in the low bit.
_GLOBAL_SHIFT = 1 if sys.version_info >= (3, 11) else 0
_ATTR_SHIFT = 1 if sys.version_info >= (3, 12) else 0
_NOP = _OP["NOP"]
_OPNAME = dis.opname
_CONSTS = frozenset(dis.hasconst)
_DOCSTRING_FLAG = getattr(inspect, "CO_HAS_DOCSTRING", 0)


def _opcodes(*names: str) -> frozenset[int]:
    return frozenset(_OP[name] for name in names if name in _OP and _OP[name] < 256)


# How each opcode's argument names something (absent: a number, a jump, a flag).
_ARG_NAME, _ARG_ATTR, _ARG_GLOBAL, _ARG_LOCAL, _ARG_PAIR, _ARG_CONST = range(6)
_ARG_KINDS: dict[int, int] = {}
for _kind, _ops in (
    (
        _ARG_NAME,
        _opcodes(
            "IMPORT_NAME",
            "IMPORT_FROM",
            "LOAD_NAME",
            "STORE_NAME",
            "DELETE_NAME",
            "STORE_GLOBAL",
            "DELETE_GLOBAL",
            "LOAD_METHOD",
            "STORE_ATTR",
            "DELETE_ATTR",
            "LOAD_FROM_DICT_OR_GLOBALS",
        ),
    ),
    (_ARG_ATTR, _opcodes("LOAD_ATTR")),
    (_ARG_GLOBAL, _opcodes("LOAD_GLOBAL")),
    (
        _ARG_LOCAL,
        _opcodes(
            "LOAD_FAST",
            "STORE_FAST",
            "DELETE_FAST",
            "LOAD_FAST_CHECK",
            "LOAD_FAST_AND_CLEAR",
            "LOAD_FAST_BORROW",
            "LOAD_DEREF",
            "STORE_DEREF",
            "DELETE_DEREF",
            "LOAD_CLASSDEREF",
            "LOAD_FROM_DICT_OR_DEREF",
            "LOAD_CLOSURE",
            "MAKE_CELL",
        ),
    ),
    (
        _ARG_PAIR,
        _opcodes(
            "LOAD_FAST_LOAD_FAST",
            "STORE_FAST_LOAD_FAST",
            "STORE_FAST_STORE_FAST",
            "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
        ),
    ),
    (_ARG_CONST, _CONSTS),
):
    for _op in _ops:
        _ARG_KINDS[_op] = _kind
# Before 3.11 cell and free variables have an index space of their own.
_DEREFS = _opcodes(
    "LOAD_DEREF",
    "STORE_DEREF",
    "DELETE_DEREF",
    "LOAD_CLASSDEREF",
    "LOAD_CLOSURE",
    "LOAD_FROM_DICT_OR_DEREF",
    "MAKE_CELL",
)

_STORES = frozenset(
    {
        "STORE_FAST",
        "STORE_DEREF",
        "STORE_NAME",
        "STORE_GLOBAL",
        "STORE_FAST_LOAD_FAST",
        "STORE_FAST_STORE_FAST",
        "STORE_FAST_MAYBE_NULL",
    }
)


def code_tree(code: CodeType) -> list[CodeType]:
    codes = [code]
    i = 0
    while i < len(codes):
        codes.extend(c for c in codes[i].co_consts if isinstance(c, CodeType))
        i += 1
    return codes


def scan_fast(code: CodeType, chains: dict[tuple[str, ...], None], stored: set[str]) -> bool:
    """Collect ``LOAD_GLOBAL name (.attr)*`` chains of one code object.

    Decodes ``co_code`` directly: ``dis`` costs about 30x more, and this runs
    over every function of the user's project the first time it is keyed.
    Returns whether the code also needs the slower ``dis`` pass (imports,
    ``nonlocal`` stores).
    """
    raw = code.co_code
    names = code.co_names
    chain: list[str] | None = None
    ext = 0
    needs_dis = False
    for i in range(0, len(raw), 2):
        op = raw[i]
        arg = raw[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = arg << 8
            continue
        ext = 0
        if op == _CACHE:
            continue
        if op == _LOAD_GLOBAL:
            if chain:
                chains[tuple(chain)] = None
            chain = [names[arg >> _GLOBAL_SHIFT]]
        elif op == _LOAD_NAME:
            if chain:
                chains[tuple(chain)] = None
            chain = [names[arg]]
        elif chain is not None and op == _LOAD_ATTR:
            chain.append(names[arg >> _ATTR_SHIFT])
        elif chain is not None and op == _LOAD_METHOD:
            chain.append(names[arg])
        else:
            if chain:
                chains[tuple(chain)] = None
                chain = None
            if op in _GLOBAL_STORES:
                stored.add(names[arg])
            elif op in _NEEDS_DIS:
                needs_dis = True
    if chain:
        chains[tuple(chain)] = None
    return needs_dis


@dataclass(frozen=True)
class LocalImport:
    """``import``/``from ... import`` inside a function, binding a local name."""

    level: int
    module: str  # as written, relative to the package when level > 0
    attr: str | None  # the name taken with ``from module import attr``
    submodule: bool  # ``import a.b as m`` binds ``a.b``; plain ``import a.b`` binds ``a``


def _raw(code: CodeType) -> list[tuple[int, int]]:
    """``(opcode, argument)`` of each instruction; ``EXTENDED_ARG`` folded, padding left out."""
    raw = code.co_code
    out = []
    ext = 0
    for i in range(0, len(raw), 2):
        op = raw[i]
        arg = raw[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = arg << 8
            continue
        ext = 0
        if op != _CACHE and op != _NOP:
            out.append((op, arg))
    return out


def _instructions(code: CodeType) -> list[tuple[str, Any]]:
    """``(opname, argval)`` of each instruction: a name, a name pair, a constant or a number.

    Raises:
        IndexError: an argument points past its table (code not made by the compiler).
    """
    names, consts = code.co_names, code.co_consts
    # Since 3.11 local and cell variables share one index space ("localsplus").
    local = getattr(code, "_varname_from_oparg", None)
    varnames, cells = code.co_varnames, code.co_cellvars + code.co_freevars
    out: list[tuple[str, Any]] = []
    for op, arg in _raw(code):
        kind = _ARG_KINDS.get(op)
        argval: Any = arg
        if kind is None:
            pass
        elif kind == _ARG_NAME:
            argval = names[arg]
        elif kind == _ARG_ATTR:
            argval = names[arg >> _ATTR_SHIFT]
        elif kind == _ARG_GLOBAL:
            argval = names[arg >> _GLOBAL_SHIFT]
        elif kind == _ARG_LOCAL:
            if local is not None:
                argval = local(arg)
            else:
                argval = cells[arg] if op in _DEREFS else varnames[arg]
        elif kind == _ARG_PAIR:
            argval = (local(arg >> 4), local(arg & 15)) if local is not None else arg
        elif kind == _ARG_CONST:
            argval = consts[arg]
        out.append((_OPNAME[op], argval))
    return out


def scan_dis(
    codes: list[CodeType],
) -> tuple[dict[str, LocalImport], dict[tuple[str, ...], None], set[str]]:
    """Imports inside function bodies, attribute chains read on them, and ``nonlocal`` stores.

    Only instructions whose argument is a name are looked at by name (another
    opcode's argument is a constant, a number or a name pair: ``LOAD_CONST ()``
    comes before ``CALL_FUNCTION_EX``), so nothing here indexes an argument
    without checking what it is.
    """
    imports: dict[str, LocalImport] = {}
    derefs: set[str] = set()
    streams = []
    for code in codes:
        instrs = _instructions(code)
        streams.append(instrs)
        for n, (op, argval) in enumerate(instrs):
            if op in ("STORE_DEREF", "DELETE_DEREF"):
                name = _name_arg(argval, 0)
                if name is not None:
                    derefs.add(name)
            elif op == "IMPORT_NAME" and isinstance(argval, str):
                _read_import(instrs, n, imports)
    chains: dict[tuple[str, ...], None] = {}
    if imports:
        for instrs in streams:
            chain: list[str] | None = None
            for op, argval in instrs:
                if op.startswith(("LOAD_FAST", "LOAD_DEREF")):
                    # A superinstruction (``LOAD_FAST_LOAD_FAST``) pushes its last name on top.
                    name = _name_arg(argval, -1)
                    if name in imports:
                        if chain:
                            chains[tuple(chain)] = None
                        chain = [name]  # type: ignore[list-item]
                        continue
                elif chain is not None and op in ("LOAD_ATTR", "LOAD_METHOD"):
                    name = _name_arg(argval, -1)
                    if name is not None:
                        chain.append(name)
                        continue
                if chain is not None:
                    chains[tuple(chain)] = None
                    chain = None
            if chain:
                chains[tuple(chain)] = None
    return imports, chains, derefs


def _name_arg(argval: Any, index: int) -> str | None:
    """The name an instruction names: its ``argval``, or one of a superinstruction's pair."""
    if isinstance(argval, str):
        return argval
    if isinstance(argval, tuple) and argval and all(isinstance(v, str) for v in argval):
        return argval[index]
    return None


def _read_import(instrs: list[tuple[str, Any]], n: int, imports: dict[str, LocalImport]) -> None:
    """Record the local names bound by the import whose ``IMPORT_NAME`` is ``instrs[n]``."""
    module = instrs[n][1]
    # ``IMPORT_NAME`` pops the level and the fromlist pushed just before it.
    level = instrs[n - 2][1] if n >= 2 else 0
    level = level if type(level) is int else 0
    fromlist = instrs[n - 1][1] if n >= 1 else None
    fromlist = fromlist if isinstance(fromlist, tuple) else None
    path: list[str] = []
    for op, argval in instrs[n + 1 :]:
        if op == "IMPORT_FROM":
            name = _name_arg(argval, 0)
            if name is None:
                return
            path.append(name)
        elif op in _STORES:
            local = _name_arg(argval, 0)
            if local is None:
                return
            if fromlist:
                if not path:
                    return
                imports[local] = LocalImport(level, module, path[-1], False)
                path = []
            else:
                imports[local] = LocalImport(level, module, None, bool(path))
                return
        elif fromlist or op not in ("ROT_TWO", "SWAP", "POP_TOP"):
            return


def encode_constant(value: Any) -> str:
    """A constant as text that two equal constants share: by type and value, the
    members of a frozenset sorted (their iteration order can differ between two
    compiles of the same source), nested code by its bytecode digest."""
    if isinstance(value, CodeType):
        return "code:" + bytecode_digest(value)
    if isinstance(value, frozenset):
        return "frozenset:" + repr(sorted(encode_constant(v) for v in value))
    if isinstance(value, tuple):
        return "tuple:" + repr([encode_constant(v) for v in value])
    return f"{type(value).__name__}:{value!r}"


def bytecode_digest(code: CodeType) -> str:
    """Digest of *code*'s behaviour: instructions, arguments, constants and names.

    Line tables, file name, first line, ``NOP`` padding and docstrings (a
    constant no instruction loads) are left out. Constants enter by value
    (their index moves when a docstring is added); every other argument
    enters as the number it is: an index into the names hashed with it, a
    flag, or a jump distance, which does not depend on where the code sits
    in its file.
    """
    consts = code.co_consts
    parts = [
        code.co_name,
        repr(
            (
                code.co_argcount,
                code.co_posonlyargcount,
                code.co_kwonlyargcount,
                code.co_flags & ~_DOCSTRING_FLAG,
                code.co_names,
                code.co_varnames,
                code.co_freevars,
                code.co_cellvars,
            )
        ),
    ]
    for op, arg in _raw(code):
        if op in _CONSTS:
            parts.append(f"{_OPNAME[op]} {encode_constant(consts[arg])}")
        else:
            parts.append(f"{_OPNAME[op]} {arg}")
    # Where exceptions jump to (3.11+), in the same code units as the jumps.
    parts.append("except " + getattr(code, "co_exceptiontable", b"").hex())
    return blake3.blake3("\n".join(parts).encode()).hexdigest()
