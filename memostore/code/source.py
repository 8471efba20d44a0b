"""Source lookup and normalisation for code digests.

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
import linecache
import os
import sys
import textwrap
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import blake3

from .bytecode import (
    LocalImport,
    bytecode_digest,
    code_tree,
    encode_constant,
    scan_dis,
    scan_fast,
)
from .fallback import code_fallback, describe

__all__ = [
    "CodeFacts",
    "SourceFile",
    "class_source",
    "code_facts",
    "find_definition",
    "normalised_dump",
    "parse_lines",
    "qualname_of",
    "source_file",
]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)
_DEFINITIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_SCOPE_TYPES = frozenset(_SCOPES)
# Field values written as their ``repr`` (what ``normalised_dump`` does for any non-node).
_LEAVES = frozenset({type(None), str, int, float, complex, bool, bytes, type(...)})
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


def normalised_dump(node: ast.AST, parts: dict[int, str] | None = None) -> str:
    """A canonical text of *node*: no positions, comments, type comments or docstrings.

    Args:
        node: The syntax tree.
        parts: The texts of definitions dumped before, by ``id`` of their
            node, reused and filled in: a class's text holds its methods',
            which are hashed on their own too.
    """
    out: list[str] = []
    append = out.append
    fields_of = _fields_of

    def dump(value: Any) -> None:
        t = type(value)
        if t is list:
            append("[")
            for item in value:
                dump(item)
                append(",")
            append("]")
            return
        fields = fields_of.get(t)
        if fields is None:
            if not isinstance(value, ast.AST):
                append(repr(value))
                return
            fields = fields_of[t] = tuple(f for f in t._fields if f not in _SKIP_FIELDS)
        start = -1
        if parts is not None and t in _DEFINITIONS:
            found = parts.get(id(value))
            if found is not None:
                append(found)
                return
            start = len(out)
        append(t.__name__)
        append("(")
        scope = t in _SCOPE_TYPES
        for name in fields:
            item = getattr(value, name, None)
            if scope and name == "body" and _has_docstring(item):
                item = item[1:]
            # Leaves (names, numbers, ``None``, ``Load()``) inline: most of a tree is leaves.
            leaf = type(item)
            if leaf in _LEAVES:
                append(repr(item))
            elif leaf is list:
                append("[")
                for element in item:
                    dump(element)
                    append(",")
                append("]")
            elif fields_of.get(leaf) == ():
                append(leaf.__name__)
                append("()")
            else:
                dump(item)
            append(",")
        append(")")
        if start >= 0:
            parts[id(value)] = "".join(out[start:])  # type: ignore[index]

    dump(node)
    return "".join(out)


# AST node type -> the fields that carry meaning.
_fields_of: dict[type, tuple[str, ...]] = {}


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno  # type: ignore[attr-defined]


@dataclass(eq=False)
class SourceFile:
    """One parsed source file with its definitions indexed."""

    filename: str
    lines: list[str]
    tree: ast.Module
    # Functions by the line their code object starts on (the first decorator's
    # line for a decorated function).
    defs_by_line: dict[int, list[ast.AST]]
    classes_by_qualname: dict[str, list[ast.ClassDef]]
    qualnames: dict[int, str]  # id(function node) -> qualified name
    # Names some function in the file declares ``global``: state, not constants.
    global_decls: frozenset[str]
    _digests: dict[int, str] = field(default_factory=dict)
    _dumps: dict[int, str] = field(default_factory=dict)  # see ``normalised_dump``
    _compiled: dict[tuple[str, int], list[CodeType]] | None = None
    _lambdas: dict[int, list[ast.Lambda]] | None = None  # by line, filled on demand
    _unchanged_since_start: bool | None = None

    def digest(self, node: ast.AST) -> str:
        """Digest of a definition's normalised syntax tree (cached per node)."""
        key = id(node)
        found = self._digests.get(key)
        if found is None:
            found = blake3.blake3(normalised_dump(node, self._dumps).encode()).hexdigest()
            self._digests[key] = found
        return found

    def lambdas_at(self, line: int) -> list[ast.Lambda]:
        """Lambdas starting on *line*, found in the innermost statement holding it."""
        if self._lambdas is None:
            self._lambdas = {}
        found = self._lambdas.get(line)
        if found is None:
            statement = _statement_at(self.tree.body, line)
            found = [
                node
                for node in (ast.walk(statement) if statement is not None else ())
                if isinstance(node, ast.Lambda) and node.lineno == line
            ]
            self._lambdas[line] = found
        return found

    def _compiled_codes(self, code: CodeType) -> list[CodeType]:
        """Code objects compiled from this text with *code*'s name and first line."""
        if self._compiled is None:
            self._compiled = defaultdict(list)
            try:
                # dont_inherit: this module's own ``from __future__`` must not leak in.
                module_code = compile(self.tree, self.filename, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, TypeError, RecursionError):
                module_code = None
            if module_code is not None:
                for compiled in code_tree(module_code):
                    self._compiled[(compiled.co_name, compiled.co_firstlineno)].append(compiled)
        return self._compiled.get((code.co_name, code.co_firstlineno), [])

    def matches(self, code: CodeType) -> bool:
        """Whether this text compiles to *code*: false when the file was edited after import.

        Hashing the edited text would key the call by code that is not what
        runs; the caller then hashes the running bytecode instead. A file last
        written before this process started cannot have changed since its
        module was imported, so the compile that proves it is skipped.
        """
        if self._unchanged_since_start is None:
            self._unchanged_since_start = _written_before_start(self.filename)
        if self._unchanged_since_start:
            return True
        return any(_same_code(code, compiled) for compiled in self._compiled_codes(code))

    def pick_by_compiling(self, code: CodeType, candidates: list[ast.AST]) -> list[ast.AST]:
        """Among definitions on one line, those whose compiled code is *code*.

        Compiled code objects come out in source order, as the candidates are.
        """
        compiled = self._compiled_codes(code)
        if len(compiled) != len(candidates):
            return []
        ordered = sorted(candidates, key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]
        return [node for node, c in zip(ordered, compiled, strict=True) if _same_code(code, c)][:1]

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


def _process_start() -> float | None:
    """When this process started (Linux), or None where that is not known."""
    try:
        with open("/proc/self/stat") as f:
            # The command name (field 2) may hold spaces; fields after it are plain.
            fields = f.read().rpartition(")")[2].split()
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration, AttributeError):
        return None


_PROCESS_START = _process_start()


def _written_before_start(filename: str) -> bool:
    if _PROCESS_START is None:
        return False
    try:
        modified = os.stat(filename).st_mtime
    except OSError:
        return False
    # One second of slack for coarse file-system clocks.
    return modified < _PROCESS_START - 1.0


def _same_code(a: CodeType, b: CodeType) -> bool:
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars) != (
        b.co_code,
        b.co_names,
        b.co_varnames,
        b.co_freevars,
    ) or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, CodeType) and isinstance(y, CodeType):
            if not _same_code(x, y):
                return False
        elif encode_constant(x) != encode_constant(y):
            return False
    return True


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists nested in a compound statement."""
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [part.body for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ()))]
    return [block for block in blocks if isinstance(block, list)]


def _statement_at(statements: list[ast.stmt], line: int) -> ast.stmt | None:
    for statement in statements:
        if _first_line(statement) <= line <= (statement.end_lineno or statement.lineno):
            for block in _blocks(statement):
                inner = _statement_at(block, line)
                if inner is not None:
                    return inner
            return statement
    return None


def _index(filename: str, lines: list[str], tree: ast.Module) -> SourceFile:
    """Index definitions by walking statements only; lambdas are found when asked for."""
    defs: dict[int, list[ast.AST]] = defaultdict(list)
    classes: dict[str, list[ast.ClassDef]] = defaultdict(list)
    qualnames: dict[int, str] = {}
    global_decls: set[str] = set()

    def visit(statements: list[ast.stmt], prefix: str) -> None:
        for node in statements:
            if isinstance(node, _DEFS):
                defs[_first_line(node)].append(node)
                qualnames[id(node)] = prefix + node.name
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                qualname = prefix + node.name
                classes[qualname].append(node)
                visit(node.body, qualname + ".")
            elif isinstance(node, ast.Global):
                global_decls.update(node.names)
            else:
                for block in _blocks(node):
                    visit(block, prefix)

    visit(tree.body, "")
    return SourceFile(
        filename, lines, tree, dict(defs), dict(classes), qualnames, frozenset(global_decls)
    )


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
        parsed = parse_lines(filename, lines)
        _files[filename] = (lines, parsed)
    return parsed


def parse_lines(filename: str, lines: list[str]) -> SourceFile | None:
    """*lines* (with their ends) parsed as the source of *filename*, or None if they do not."""
    try:
        tree = ast.parse("".join(lines), filename)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _index(filename, lines, tree)


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
    if name == "<lambda>":
        candidates: list[ast.AST] = list(sf.lambdas_at(code.co_firstlineno))
    else:
        candidates = [
            node
            for node in sf.defs_by_line.get(code.co_firstlineno, ())
            if getattr(node, "name", None) == name
        ]
    if len(candidates) > 1:
        # Several lambdas on one line: keep the innermost one whose span holds
        # every instruction of the code (column positions exist on 3.11+).
        positions = _positions(code)
        if positions:
            candidates = [n for n in candidates if all(_contains(n, p) for p in positions)]
            candidates.sort(key=_extent)
            candidates = candidates[:1]
        else:
            candidates = sf.pick_by_compiling(code, candidates)
    return candidates[0] if len(candidates) == 1 else None


def qualname_of(code: CodeType) -> str:
    """The qualified name *code* was written under (``co_qualname`` before 3.11)."""
    found = getattr(code, "co_qualname", None)
    if found is not None:
        return found
    sf = source_file(code.co_filename)
    node = find_definition(code, sf) if sf is not None else None
    if sf is not None and node is not None:
        return sf.qualnames.get(id(node), code.co_name)
    return code.co_name


def _extent(node: ast.AST) -> tuple[int, int]:
    return (
        node.end_lineno - node.lineno,  # type: ignore[attr-defined, operator]
        node.end_col_offset - node.col_offset,  # type: ignore[attr-defined, operator]
    )


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
    # Why the scanner failed on this code, when it did: the digest is then the
    # coarse one of ``fallback`` and ``source`` says so.
    failure: str | None = None
    # Every name the code mentions, when its bytecode could not be scanned.
    fallback_names: tuple[str, ...] = ()


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
    failures: list[str] = []
    digest, source, span = "", None, None
    try:
        digest, source, span = _own_digest(code, module_globals)
    except Exception as exc:  # one function the scanner cannot read must not break the call
        failures.append(f"reading its source: {describe(exc)}")
    codes = code_tree(code)
    chains: dict[tuple[str, ...], None] = {}
    stored: set[str] = set()
    imports: dict[str, LocalImport] = {}
    import_chains: dict[tuple[str, ...], None] = {}
    derefs: set[str] = set()
    fallback_names: tuple[str, ...] = ()
    try:
        needs_dis = False
        for c in codes:
            needs_dis = scan_fast(c, chains, stored) or needs_dis
        if needs_dis:
            imports, import_chains, derefs = scan_dis(codes)
    except Exception as exc:
        failures.append(f"scanning its bytecode: {describe(exc)}")
        # Every name the code mentions may be a global it reads: the closure follows
        # them all (and hashes the user modules among them whole).
        fallback_names = tuple(dict.fromkeys(name for c in codes for name in c.co_names))
        chains = {(name,): None for name in fallback_names}
        stored, imports, import_chains, derefs = set(), {}, {}, set()
    failure = "; ".join(failures) or None
    if failure is not None:
        digest, why = code_fallback(code, module_globals, failure)
        source = why + (source or "")
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
        failure=failure,
        fallback_names=fallback_names,
    )


def _own_digest(
    code: CodeType, module_globals: dict[str, Any] | None
) -> tuple[str, str | None, tuple[int, int] | None]:
    """The digest of *code* itself: of its definition's source, else of its bytecode."""
    sf = source_file(code.co_filename, module_globals)
    node = find_definition(code, sf) if sf is not None else None
    if sf is not None and node is not None and sf.matches(code):
        return "ast:" + sf.digest(node), sf.text(node), sf.span(node)
    return "bytecode:" + bytecode_digest(code), None, None


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
