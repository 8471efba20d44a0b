"""Source lookup, normalisation and bytecode scanning for code digests.

A function's or class's own digest is the digest of its syntax tree with
docstrings, comments, formatting and line numbers left out. Where no source
can be found (``python -c``, generated code), it is the digest of its
bytecode with line information, ``NOP`` padding and docstrings left out.

Everything here depends only on immutable inputs (code objects, the text of a
source file as ``linecache`` holds it), so it is cached for the life of the
process.
"""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import sys
import textwrap
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import blake3

__all__ = [
    "CodeFacts",
    "SourceFile",
    "class_source",
    "code_facts",
    "source_file",
]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)
# Fields that only record how the source was written.
_SKIP_FIELDS = frozenset({"type_comment", "kind"})


def _has_docstring(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    first = body[0]
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )


def normalised_dump(node: ast.AST) -> str:
    """A canonical text of *node*: no positions, comments, type comments or docstrings."""
    out: list[str] = []
    append = out.append

    def dump(value: Any) -> None:
        if isinstance(value, ast.AST):
            append(type(value).__name__)
            append("(")
            scope = isinstance(value, _SCOPES)
            for name in value._fields:
                if name in _SKIP_FIELDS:
                    continue
                item = getattr(value, name, None)
                if scope and name == "body" and _has_docstring(item):
                    item = item[1:]
                dump(item)
                append(",")
            append(")")
        elif isinstance(value, list):
            append("[")
            for item in value:
                dump(item)
                append(",")
            append("]")
        else:
            append(repr(value))

    dump(node)
    return "".join(out)


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno  # type: ignore[attr-defined]


@dataclass(eq=False)
class SourceFile:
    """One parsed source file with its definitions indexed."""

    filename: str
    lines: list[str]
    tree: ast.Module
    # Functions and lambdas by the line their code object starts on (the first
    # decorator's line for a decorated function).
    defs_by_line: dict[int, list[ast.AST]]
    classes_by_qualname: dict[str, list[ast.ClassDef]]
    # Names some function in the file declares ``global``: state, not constants.
    global_decls: frozenset[str]
    _digests: dict[int, str] = field(default_factory=dict)

    def digest(self, node: ast.AST) -> str:
        """Digest of a definition's normalised syntax tree (cached per node)."""
        key = id(node)
        found = self._digests.get(key)
        if found is None:
            found = blake3.blake3(normalised_dump(node).encode()).hexdigest()
            self._digests[key] = found
        return found

    def module_digest(self) -> str:
        """Digest of the whole file's normalised syntax tree."""
        return self.digest(self.tree)

    def text(self, node: ast.AST) -> str:
        """The source text of a definition, dedented (the expression for a lambda)."""
        end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        if isinstance(node, ast.Lambda):
            chunk = self.lines[node.lineno - 1 : end]
            encoded = [line.encode() for line in chunk]
            if len(encoded) == 1:
                encoded[0] = encoded[0][node.col_offset : node.end_col_offset]
            else:
                encoded[0] = encoded[0][node.col_offset :]
                encoded[-1] = encoded[-1][: node.end_col_offset]
            return b"".join(encoded).decode(errors="replace")
        return textwrap.dedent("".join(self.lines[_first_line(node) - 1 : end]))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return _first_line(node), node.end_lineno or node.lineno  # type: ignore[attr-defined]


def _index(filename: str, lines: list[str], tree: ast.Module) -> SourceFile:
    defs: dict[int, list[ast.AST]] = defaultdict(list)
    classes: dict[str, list[ast.ClassDef]] = defaultdict(list)
    global_decls: set[str] = set()

    def visit(nodes: list[ast.AST], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, _DEFS):
                defs[_first_line(node)].append(node)
                outer = [*node.decorator_list, node.args]
                if node.returns is not None:
                    outer.append(node.returns)
                visit(outer, prefix)
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                qualname = prefix + node.name
                classes[qualname].append(node)
                visit([*node.decorator_list, *node.bases, *node.keywords], prefix)
                visit(node.body, qualname + ".")
            else:
                if isinstance(node, ast.Lambda):
                    defs[node.lineno].append(node)
                elif isinstance(node, ast.Global):
                    global_decls.update(node.names)
                visit(list(ast.iter_child_nodes(node)), prefix)

    visit(tree.body, "")
    return SourceFile(filename, lines, tree, dict(defs), dict(classes), frozenset(global_decls))


_files: dict[str, tuple[list[str], SourceFile | None]] = {}
_lock = threading.RLock()


def source_file(filename: str, module_globals: dict[str, Any] | None = None) -> SourceFile | None:
    """The parsed source of *filename* as ``linecache`` holds it, or None.

    ``linecache`` also serves notebook cells and zip imports. A file edited
    after its module was imported is not noticed unless ``linecache`` was
    refreshed; the code that runs is the code that was imported either way.
    """
    if not filename:
        return None
    try:
        lines = linecache.getlines(filename, module_globals)
    except Exception:
        return None
    if not lines:
        return None
    cached = _files.get(filename)
    if cached is not None and cached[0] is lines:
        return cached[1]
    with _lock:
        try:
            tree = ast.parse("".join(lines), filename)
        except (SyntaxError, ValueError):
            parsed = None
        else:
            parsed = _index(filename, lines, tree)
        _files[filename] = (lines, parsed)
    return parsed


def _positions(code: CodeType) -> list[tuple[int, int, int, int]]:
    if not hasattr(code, "co_positions"):
        return []
    # Zero-width positions (RESUME, implicit returns) point at the start of the line.
    return [
        pos  # type: ignore[misc]
        for pos in code.co_positions()
        if None not in pos and (pos[0], pos[2]) != (pos[1], pos[3])
    ]


def _contains(node: ast.AST, pos: tuple[int, int, int, int]) -> bool:
    start = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    return start <= (pos[0], pos[2]) and (pos[1], pos[3]) <= end


def find_definition(code: CodeType, sf: SourceFile) -> ast.AST | None:
    """The function or lambda node in *sf* that compiled to *code*, if unambiguous."""
    name = code.co_name
    candidates = [
        node
        for node in sf.defs_by_line.get(code.co_firstlineno, ())
        if (
            isinstance(node, ast.Lambda)
            if name == "<lambda>"
            else getattr(node, "name", None) == name
        )
    ]
    if len(candidates) > 1:
        # Several lambdas on one line: keep the innermost one whose span holds
        # every instruction of the code (column positions exist on 3.11+).
        positions = _positions(code)
        if positions:
            candidates = [n for n in candidates if all(_contains(n, p) for p in positions)]
            candidates.sort(
                key=lambda n: (n.end_lineno - n.lineno, n.end_col_offset - n.col_offset)
            )  # type: ignore[attr-defined]
            candidates = candidates[:1]
    return candidates[0] if len(candidates) == 1 else None


# -- bytecode ---------------------------------------------------------------------------------

_OP = dis.opmap
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_LOAD_NAME = _OP["LOAD_NAME"]
_LOAD_ATTR = _OP["LOAD_ATTR"]
_LOAD_METHOD = _OP.get("LOAD_METHOD", -1)
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_CACHE = _OP.get("CACHE", -1)
_STORE_GLOBAL = _OP["STORE_GLOBAL"]
_DELETE_GLOBAL = _OP["DELETE_GLOBAL"]
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


def _code_tree(code: CodeType) -> list[CodeType]:
    codes = [code]
    i = 0
    while i < len(codes):
        codes.extend(c for c in codes[i].co_consts if isinstance(c, CodeType))
        i += 1
    return codes


def _scan_fast(code: CodeType, chains: dict[tuple[str, ...], None], stored: set[str]) -> bool:
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
            if op == _STORE_GLOBAL or op == _DELETE_GLOBAL:
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


def _scan_dis(
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


@dataclass(frozen=True)
class CodeFacts:
    """What a function's code object says about it, independent of its bindings."""

    digest: str  # "ast:<hex>" from the source, or "bytecode:<hex>"
    source: str | None
    chains: tuple[tuple[str, ...], ...]  # global name, then attributes read on it
    stored_globals: frozenset[str]  # names the code rebinds with ``global``
    stored_derefs: frozenset[str]  # closure variables the code rebinds with ``nonlocal``
    imports: tuple[tuple[str, LocalImport], ...]  # local name -> import inside the body
    import_chains: tuple[tuple[str, ...], ...]  # local import name, then attributes
    filename: str
    span: tuple[int, int] | None  # first and last line of the definition in the file


# id(code) -> (weak reference to the code, facts). Code objects are immutable,
# so facts never go stale; the weak reference drops them with the code.
_facts: dict[int, tuple[weakref.ref[CodeType], CodeFacts]] = {}


def _forget(key: int, ref: weakref.ref[CodeType]) -> None:
    entry = _facts.get(key)
    if entry is not None and entry[0] is ref:
        del _facts[key]


def code_facts(code: CodeType, module_globals: dict[str, Any] | None = None) -> CodeFacts:
    """Facts about *code* (cached per code object)."""
    key = id(code)
    entry = _facts.get(key)
    if entry is not None and entry[0]() is code:
        return entry[1]
    facts = _compute_facts(code, module_globals)
    ref = weakref.ref(code, lambda r, key=key: _forget(key, r))
    _facts[key] = (ref, facts)
    return facts


def _compute_facts(code: CodeType, module_globals: dict[str, Any] | None) -> CodeFacts:
    sf = source_file(code.co_filename, module_globals)
    node = find_definition(code, sf) if sf is not None else None
    if sf is not None and node is not None:
        digest = "ast:" + sf.digest(node)
        source: str | None = sf.text(node)
        span: tuple[int, int] | None = sf.span(node)
    else:
        digest = "bytecode:" + bytecode_digest(code)
        source, span = None, None
    codes = _code_tree(code)
    chains: dict[tuple[str, ...], None] = {}
    stored: set[str] = set()
    needs_dis = False
    for c in codes:
        needs_dis = _scan_fast(c, chains, stored) or needs_dis
    imports: dict[str, LocalImport] = {}
    import_chains: dict[tuple[str, ...], None] = {}
    derefs: set[str] = set()
    if needs_dis:
        imports, import_chains, derefs = _scan_dis(codes)
    return CodeFacts(
        digest=digest,
        source=source,
        chains=tuple(chains),
        stored_globals=frozenset(stored),
        stored_derefs=frozenset(derefs),
        imports=tuple(imports.items()),
        import_chains=tuple(import_chains),
        filename=code.co_filename,
        span=span,
    )


def class_source(
    cls: type, method_lines: list[tuple[str, int]]
) -> tuple[SourceFile, ast.ClassDef] | None:
    """The ``class`` statement that defined *cls*, located by qualified name.

    Args:
        cls: The class.
        method_lines: ``(file, first line)`` of functions found in its ``__dict__``;
            they pick the right statement when the name is defined more than once.
    """
    module = sys.modules.get(cls.__module__)
    module_globals = getattr(module, "__dict__", None)
    files = [file for file, _ in method_lines]
    module_file = getattr(module, "__file__", None)
    if isinstance(module_file, str):
        files.append(module_file)
    first_line = getattr(cls, "__firstlineno__", None)
    seen: set[str] = set()
    for file in files:
        if file in seen:
            continue
        seen.add(file)
        sf = source_file(file, module_globals)
        if sf is None:
            continue
        candidates = sf.classes_by_qualname.get(cls.__qualname__, [])
        if not candidates:
            continue
        lines = [line for f, line in method_lines if f == file]
        if isinstance(first_line, int):
            exact = [c for c in candidates if first_line in (c.lineno, _first_line(c))]
            if exact:
                candidates = exact
        if lines:
            holding = [
                c
                for c in candidates
                if all(sf.span(c)[0] <= line <= sf.span(c)[1] for line in lines)
            ]
            if holding:
                candidates = holding
            elif file != module_file:
                continue
        # A name bound twice at module level ends up as the later definition.
        return sf, candidates[-1]
    return None
