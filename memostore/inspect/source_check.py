"""Recorded code dependencies against today's source text, found by reading files only.

A function defined in a script run as ``__main__`` or in a notebook cell
cannot be imported to compute today's code digest, and running the script
would run the user's whole program. Instead, each recorded dependency's
source (kept in the evaluation's code document) is compared with the
definition of the same name in today's text of the script or notebook, and of
the user's modules beside it: files are read and parsed, never executed, and
never put on ``sys.path``. A file is read through :func:`read_named_file`
only: a regular file, at most :data:`NAMED_FILE_MAX` bytes, never more of it
(a path a pulled record names may point at anything), and
:func:`named_files_refusal` says whether an evaluation's recorded paths
are followed at all: only when it was made in this store.

Comparisons reuse the code scanner's normalisation
(:func:`memostore.code.source.normalised_dump`: no comments, docstrings,
formatting or positions), so what it would not count as a change is not
reported as one. A constant is checked when today's binding is a literal (its
digest is recomputed as the scanner computes it); a global bound to a
computed value, to an object, or bound more than once cannot be checked
without running the code, and is reported as such.
"""

from __future__ import annotations

import ast
import errno
import importlib.machinery
import json
import os
import stat
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..code.source import SourceFile, normalised_dump, parse_lines
from ..trust.origins import origins_of

if TYPE_CHECKING:
    from ..odb.store import Store

MAIN = "__main__"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES = (*_DEFS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# argv[0] of a Jupyter kernel (``python -m ipykernel_launcher`` gives the module's file).
_KERNEL_LAUNCHERS = ("ipykernel_launcher.py", "colab_kernel_launcher.py")
# A script or notebook bigger than this is not read: source is not this big, and a
# record's path may name a 600 MB file (a sparse one costs its writer nothing).
NAMED_FILE_MAX = 8 << 20


def read_named_file(path: str | os.PathLike[str], limit: int = NAMED_FILE_MAX) -> bytes:
    """The bytes of a file a record or the user names: a regular file of at most *limit* bytes.

    Never reads more than *limit* + 1 bytes, whatever the file's size says, and
    never blocks on a FIFO.

    Raises:
        OSError: the file cannot be opened, or is not a regular file.
        ValueError: it holds more than *limit* bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} holds more than {limit >> 20} MiB: not read as source")
    return data


def named_files_refusal(store: Store, evaluation_id: str) -> str | None:
    """Why the files an evaluation's record names are not read; None when they may be.

    Only an evaluation made in this store: one that arrived by a pull or an
    auto-fetch (:mod:`memostore.trust.origins`) was written by someone else,
    and the paths it records (its script, its working directory) are theirs.
    """
    sources = origins_of(store.objects, evaluation_id)
    if not sources:
        return None
    where = ", ".join(sorted(s.name or s.url for s in sources))
    return (
        f"it was pulled (from {where}): the files its record names are not read; "
        "pass today's source with --source PATH"
    )


def _parsed(origin: str) -> SourceFile:
    text = read_named_file(origin).decode("utf-8", "replace")
    parsed = parse_lines(origin, text.splitlines(keepends=True))
    if parsed is None:
        raise ValueError(f"{origin} does not parse as Python")
    return parsed


@dataclass
class TodaySource:
    """Today's text of a script or notebook, parsed (never run).

    Attributes:
        origin: the file read.
        files: its parsed parts in execution order (one for a script, one per
            code cell for a notebook); a later definition of a name wins.
    """

    origin: str
    files: list[SourceFile] = field(default_factory=list)


def read_source(path: str | os.PathLike[str]) -> TodaySource:
    """Read and parse a script (``.py``) or a notebook (``.ipynb``) as text.

    Raises:
        OSError: the file cannot be read.
        ValueError: a notebook that is not JSON, or a script that does not parse.
    """
    origin = str(Path(path).resolve())
    if origin.endswith(".ipynb"):
        return _read_notebook(origin)
    return TodaySource(origin, [_parsed(origin)])


def _read_notebook(origin: str) -> TodaySource:
    data = read_named_file(origin)
    try:
        notebook = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{origin} is not a notebook (JSON): {exc}") from None
    out = TodaySource(origin)
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    for i, cell in enumerate(cells if isinstance(cells, list) else []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        text = cell.get("source")
        text = "".join(text) if isinstance(text, list) else str(text or "")
        # Magics and shell escapes are not Python: blank them, keeping line numbers.
        lines = [
            ("#" + line if line.lstrip().startswith(("%", "!")) else line)
            for line in text.splitlines(keepends=True)
        ]
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        parsed = parse_lines(f"<notebook {origin} cell {i + 1}>", lines)
        if parsed is not None:
            out.files.append(parsed)
    return out


def is_kernel(provenance: Mapping[str, Any]) -> bool:
    """Whether the evaluation ran in a Jupyter kernel (its ``__main__`` is notebook cells)."""
    argv = provenance.get("argv") or []
    first = str(argv[0]) if argv else ""
    return first.endswith(_KERNEL_LAUNCHERS)


def recorded_script(provenance: Mapping[str, Any]) -> str | None:
    """The script an evaluation ran from, when its recorded path still names a file."""
    argv = provenance.get("argv") or []
    if not argv or is_kernel(provenance):
        return None
    first = str(argv[0])
    if not first or first in ("-c", "-m", "-"):
        return None
    path = Path(first)
    if not path.is_absolute():
        cwd = provenance.get("cwd")
        if not isinstance(cwd, str):
            return None
        path = Path(cwd) / path
    return str(path) if path.is_file() else None


def python_path() -> list[str]:
    """``sys.path`` as ``python`` started in the current directory has it.

    The CLI is a console script (its ``sys.path[0]`` is its own directory), so
    the current directory goes first, as ``python -c``/``-m`` would put it,
    unless ``PYTHONSAFEPATH``/``-P`` asks Python not to.
    """
    import sys

    paths = [p for p in sys.path if p]
    if not sys.flags.safe_path:
        cwd = os.getcwd()
        paths = [cwd, *(p for p in paths if p != cwd)]
    return paths


def find_module_source(name: str, search_path: Iterable[str]) -> str | None:
    """The source file module *name* would be imported from, found without importing it."""
    parts = name.split(".")
    locations: list[str] | None = list(search_path)
    for i in range(len(parts)):
        fullname = ".".join(parts[: i + 1])
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, locations)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if i == len(parts) - 1:
            origin = spec.origin if spec.has_location else None
            return origin if isinstance(origin, str) and origin.endswith(".py") else None
        locations = list(spec.submodule_search_locations or ())
    return None


# -- checking ---------------------------------------------------------------------------------
class _Files:
    """Today's parsed files, by module name (``__main__``: the script or notebook)."""

    def __init__(self, main: TodaySource | None, search_path: list[str]) -> None:
        self.main = main
        self.search_path = search_path
        self._modules: dict[str, tuple[list[SourceFile], str | None]] = {}

    def of(self, module: str) -> tuple[list[SourceFile], str | None]:
        """(parsed files, why none) for *module*."""
        if module == MAIN:
            if self.main is None:
                return [], "today's source of the script is not known"
            return self.main.files, None
        found = self._modules.get(module)
        if found is None:
            file = find_module_source(module, self.search_path)
            if file is None:
                found = ([], f"module {module} is not found beside the script or on sys.path")
            else:
                try:
                    found = ([_parsed(file)], None)
                except (OSError, ValueError) as exc:
                    found = ([], str(exc))
            self._modules[module] = found
        return found


def check_dependencies(
    deps: Mapping[str, Mapping[str, Any]], main: TodaySource | None, search_path: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Each recorded dependency against today's source text.

    Args:
        deps: the recorded dependencies, ``{symbol: {"kind", "digest", "source"}}``.
        main: today's text of the script or notebook that was ``__main__``.
        search_path: where the user's other modules are looked for (read only).

    Returns:
        ``{"changed": [...], "missing": [...], "unchecked": [...], "same": [...]}``,
        each entry ``{"symbol", "kind"}`` plus ``diff`` (a unified diff of the
        recorded source against today's) for changed ones and ``why`` for
        missing and unchecked ones.
    """
    files = _Files(main, search_path)
    out: dict[str, list[dict[str, Any]]] = {
        "changed": [],
        "missing": [],
        "unchecked": [],
        "same": [],
    }
    for symbol in sorted(deps):
        dep = deps[symbol]
        status, detail = _check_one(symbol, dep, files)
        entry: dict[str, Any] = {"symbol": symbol, "kind": dep.get("kind")}
        if status == "changed":
            entry["diff"] = detail
        elif detail:
            entry["why"] = detail
        out[status].append(entry)
    return out


def _check_one(symbol: str, dep: Mapping[str, Any], files: _Files) -> tuple[str, str]:
    kind = dep.get("kind")
    if kind == "python":
        from ..code.modules import python_digest

        same = python_digest() == dep.get("digest")
        return ("same", "") if same else ("changed", "the Python version changed\n")
    if kind == "distribution":
        return _check_distribution(symbol, dep)
    if kind == "module":
        return _check_module(symbol, dep, files)
    module, sep, qualname = symbol.partition(":")
    if not sep or "#" in qualname:
        return "unchecked", "a name defined more than once: the recorded one cannot be told apart"
    if kind == "object":
        source = dep.get("source") or symbol
        return "unchecked", f"a global value ({source}); only running the code tells its type"
    parsed, why = files.of(module)
    if not parsed:
        return "unchecked", why or "no source"
    if kind == "constant":
        return _check_constant(symbol, qualname, dep, parsed)
    if kind in ("function", "class"):
        return _check_definition(symbol, qualname, dep, parsed)
    return "unchecked", f"a dependency of kind {kind!r}"


def _check_distribution(symbol: str, dep: Mapping[str, Any]) -> tuple[str, str]:
    from importlib import metadata

    from ..code.modules import distribution_pin

    names = symbol.removeprefix("dist:").split(",")
    try:
        for name in names:
            metadata.distribution(name)
    except (metadata.PackageNotFoundError, ValueError):
        return "unchecked", f"{', '.join(names)} is not installed where this command runs"
    pinned, digest = distribution_pin(names[0])
    if pinned != symbol:
        return "unchecked", "a namespace package shared by several distributions"
    if digest == dep.get("digest"):
        return "same", ""
    versions = ", ".join(f"{n}=={metadata.version(n)}" for n in names)
    return "changed", f"installed version differs: now {versions}\n"


def _check_module(symbol: str, dep: Mapping[str, Any], files: _Files) -> tuple[str, str]:
    parsed, why = files.of(symbol)
    if not parsed:
        return "missing", why or f"module {symbol} is not found"
    if parsed[0].module_digest() == dep.get("digest"):
        return "same", ""
    return "changed", f"the source of module {symbol} changed ({parsed[0].filename})\n"


def _check_definition(
    symbol: str, qualname: str, dep: Mapping[str, Any], parsed: list[SourceFile]
) -> tuple[str, str]:
    from .comparison import unified_source_diff

    recorded = dep.get("source")
    if not isinstance(recorded, str):
        return "unchecked", "no source was recorded (its bytecode was hashed)"
    before = _parse_definition(recorded)
    if before is None:
        return "unchecked", "the recorded source does not parse"
    found = _find_definition(parsed, qualname, isinstance(before, ast.Lambda))
    if found is None:
        where = parsed[-1].filename if len(parsed) == 1 else "the notebook"
        return "missing", f"{qualname} is no longer defined in {where}"
    sf, node = found
    if type(node) is type(before) and normalised_dump(node) == normalised_dump(before):
        return "same", ""
    return "changed", unified_source_diff(symbol, recorded, sf.text(node))


def _parse_definition(source: str) -> ast.AST | None:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Lambda):
        return node.value
    return node if isinstance(node, _DEFS) else None


def _find_definition(
    parsed: list[SourceFile], qualname: str, is_lambda: bool
) -> tuple[SourceFile, ast.AST] | None:
    """Today's definition of *qualname*: the last one, in the last file that has one."""
    for sf in reversed(parsed):
        if is_lambda:
            bound = _literal_binding(sf, qualname)
            if bound is not None and isinstance(bound, ast.Lambda):
                return sf, bound
            continue
        classes = sf.classes_by_qualname.get(qualname)
        functions = [
            node
            for nodes in sf.defs_by_line.values()
            for node in nodes
            if sf.qualnames.get(id(node)) == qualname
        ]
        candidates = [*(classes or ()), *functions]
        if candidates:
            return sf, max(candidates, key=lambda n: n.lineno)  # type: ignore[attr-defined]
    return None


def _check_constant(
    symbol: str, name: str, dep: Mapping[str, Any], parsed: list[SourceFile]
) -> tuple[str, str]:
    from ..code.values import render_constant
    from ..values.hashing import digest_value
    from .comparison import unified_source_diff

    holders = [sf for sf in parsed if name in _module_bindings(sf.tree)]
    if not holders:
        return "missing", f"{name} is no longer bound at module level"
    if len(holders) > 1 or any(name in sf.global_decls for sf in holders):
        return "unchecked", f"{name} is bound more than once: its value is known only at run time"
    value_node = _literal_binding(holders[0], name)
    if value_node is None:
        return "unchecked", f"{name} is computed when the code runs (not a literal)"
    try:
        value = ast.literal_eval(value_node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return "unchecked", f"{name} is computed when the code runs (not a literal)"
    # The scanner keys a plain-data constant by the value's own digest.
    if digest_value(value) == dep.get("digest"):
        return "same", ""
    today = f"{name} = {render_constant(value)}"
    return "changed", unified_source_diff(symbol, dep.get("source"), today)


def _literal_binding(sf: SourceFile, name: str) -> ast.expr | None:
    """The value assigned to *name* when a single plain module-level statement binds it."""
    statements = _module_bindings(sf.tree).get(name) or []
    if len(statements) != 1:
        return None
    statement = statements[0]
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Name) and target.id == name:
            return statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.value
    return None


def _module_bindings(tree: ast.Module) -> dict[str, list[ast.stmt]]:
    """Names bound at module level (outside function and class bodies) -> binding statements."""
    found: dict[str, list[ast.stmt]] = {}

    def bind(name: str, statement: ast.stmt) -> None:
        found.setdefault(name, []).append(statement)

    def visit(statement: ast.stmt) -> None:
        if isinstance(statement, _DEFS):
            bind(statement.name, statement)
            return
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                bind((alias.asname or alias.name).partition(".")[0], statement)
            return
        stack: list[ast.AST] = [statement]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bind(node.id, statement)
            elif isinstance(node, ast.stmt) and node is not statement:
                visit(node)
                continue
            if not isinstance(node, _SCOPES) or node is statement:
                stack.extend(ast.iter_child_nodes(node))

    for statement in tree.body:
        visit(statement)
    return found
