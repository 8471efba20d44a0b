"""Bytecode for code digests: scanning for the globals a function reads, and hashing.

Scanning decodes ``co_code`` directly for the common case (``LOAD_GLOBAL``
followed by attribute loads) and uses ``dis`` only for the rare code that
imports inside a function body or rebinds closure variables. Hashing
bytecode is the fallback for code without source.
"""

from __future__ import annotations

import dis
import inspect
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

import blake3

__all__ = ["LocalImport", "bytecode_digest", "code_tree", "scan_dis", "scan_fast"]

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
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs) | frozenset(getattr(dis, "hasjump", ()))
_CONSTS = frozenset(dis.hasconst)
_PADDING = frozenset({"NOP", "CACHE", "EXTENDED_ARG"})
_DOCSTRING_FLAG = getattr(inspect, "CO_HAS_DOCSTRING", 0)
_STORES = frozenset({"STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL"})


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


def scan_dis(
    codes: list[CodeType],
) -> tuple[dict[str, LocalImport], dict[tuple[str, ...], None], set[str]]:
    imports: dict[str, LocalImport] = {}
    derefs: set[str] = set()
    streams = []
    for code in codes:
        instrs = [i for i in dis.get_instructions(code) if i.opname not in _PADDING]
        streams.append(instrs)
        for n, ins in enumerate(instrs):
            if ins.opname in ("STORE_DEREF", "DELETE_DEREF"):
                derefs.add(ins.argval)
            if ins.opname != "IMPORT_NAME" or n < 2:
                continue
            level = instrs[n - 2].argval
            fromlist = instrs[n - 1].argval
            level = level if isinstance(level, int) else 0
            path: list[str] = []
            j = n + 1
            while j < len(instrs):
                op = instrs[j].opname
                if op == "IMPORT_FROM":
                    path.append(instrs[j].argval)
                elif op in _STORES:
                    local = instrs[j].argval
                    if fromlist:
                        imports[local] = LocalImport(level, ins.argval, path[-1], False)
                        path = []
                    else:
                        imports[local] = LocalImport(level, ins.argval, None, bool(path))
                        break
                elif fromlist or op not in ("ROT_TWO", "SWAP", "POP_TOP"):
                    break
                j += 1
    chains: dict[tuple[str, ...], None] = {}
    if imports:
        for instrs in streams:
            chain: list[str] | None = None
            for ins in instrs:
                op = ins.opname
                name = ins.argval[-1] if isinstance(ins.argval, tuple) else ins.argval
                if op.startswith(("LOAD_FAST", "LOAD_DEREF")) and name in imports:
                    if chain:
                        chains[tuple(chain)] = None
                    chain = [name]
                elif chain is not None and op in ("LOAD_ATTR", "LOAD_METHOD"):
                    chain.append(name)
                elif chain is not None:
                    chains[tuple(chain)] = None
                    chain = None
            if chain:
                chains[tuple(chain)] = None
    return imports, chains, derefs


def _encode_const(value: Any) -> str:
    if isinstance(value, CodeType):
        return "code:" + bytecode_digest(value)
    if isinstance(value, frozenset):
        return "frozenset:" + repr(sorted(_encode_const(v) for v in value))
    if isinstance(value, tuple):
        return "tuple:" + repr([_encode_const(v) for v in value])
    return f"{type(value).__name__}:{value!r}"


def bytecode_digest(code: CodeType) -> str:
    """Digest of *code*'s behaviour: instructions, arguments, constants and names.

    Line tables, file name, first line, ``NOP`` padding and docstrings (a
    constant no instruction loads) are left out. Jump targets are counted in
    instructions so padding does not shift them.
    """
    instrs = [i for i in dis.get_instructions(code) if i.opname not in _PADDING]
    index: dict[int, int] = {}
    for n, ins in enumerate(instrs):
        index[ins.offset] = n
    offsets = sorted(index)

    def target(offset: int) -> int:
        for candidate in offsets:
            if candidate >= offset:
                return index[candidate]
        return len(instrs)

    parts = [
        code.co_name,
        repr(
            (
                code.co_argcount,
                code.co_posonlyargcount,
                code.co_kwonlyargcount,
                code.co_flags & ~_DOCSTRING_FLAG,
                code.co_varnames,
                code.co_freevars,
                code.co_cellvars,
            )
        ),
    ]
    for ins in instrs:
        if ins.opcode in _CONSTS:
            arg = _encode_const(ins.argval)
        elif ins.opcode in _JUMPS and isinstance(ins.argval, int):
            arg = f"->{target(ins.argval)}"
        else:
            arg = ins.argrepr or ("" if ins.arg is None else str(ins.arg))
        parts.append(f"{ins.opname} {arg}")
    for entry in getattr(dis.Bytecode(code), "exception_entries", ()):
        parts.append(
            f"except {target(entry.start)} {target(entry.end)} {target(entry.target)} "
            f"{entry.depth} {entry.lasti}"
        )
    return blake3.blake3("\n".join(parts).encode()).hexdigest()
