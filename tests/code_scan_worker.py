"""Run the code-dependency scanner over every function of installed libraries.

Run as ``python tests/code_scan_worker.py GROUP...`` (``stdlib``, ``torch``,
``transformers``); prints one JSON object: modules imported and skipped,
code objects scanned, and every scanner failure with the function it was in.
``tests/test_code_scan_all.py`` runs it, one process per group.

Each module of a group is imported (a module that fails to import is
skipped). Every function reachable from a module's namespace -- module
functions, methods, static and class methods, property accessors,
``cached_property`` functions, functions in nested classes and the functions
behind ``functools.wraps`` wrappers -- goes through what ``code_info`` does
for user code: source lookup, normalisation and digest of its definition,
the check that the source still compiles to it, the bytecode digest, and
both bytecode scanners (``scan_fast`` on every code object nested in it,
``scan_dis`` on all of them). Every class goes through the lookup of its
``class`` statement and the digest of its source.
"""

from __future__ import annotations

import functools
import gc
import importlib
import io
import json
import os
import sys
import time
import traceback
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

# Modules whose import does something besides defining names: opens a
# browser, starts a program, runs a test suite, prints to the terminal.
_SIDE_EFFECTS = frozenset({"antigravity", "this", "idlelib.idle", "test", "turtledemo"})
# Extension-module file suffixes, e.g. ``.cpython-311-x86_64-linux-gnu.so``.
_EXTENSIONS = (".so", ".pyd")


def _module_names(root: Path, prefix: str) -> list[str]:
    """Module names under a package directory, from its files (nothing is imported)."""
    names = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".py":
            parts = path.relative_to(root).with_suffix("").parts
        elif path.suffix in _EXTENSIONS:
            parts = (*path.relative_to(root).parent.parts, path.name.split(".")[0])
        else:
            continue
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        if any(not part.isidentifier() for part in parts):
            continue  # a script or data directory, not an importable name
        names.append(".".join(filter(None, (prefix, *parts))))
    return names


def _stdlib_names() -> list[str]:
    stdlib = Path(os.__file__).parent
    names = set(sys.builtin_module_names)
    for path in stdlib.iterdir():
        if path.name in ("site-packages", "dist-packages", "__pycache__"):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            names.update(_module_names(path, path.name))
        elif path.suffix == ".py" or (path.name == "lib-dynload"):
            if path.is_dir():
                names.update(_module_names(path, ""))
            else:
                names.add(path.stem)
    return sorted(n for n in names if n in sys.stdlib_module_names or "." in n)


def _package_names(top: str) -> list[str]:
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return []
    return _module_names(Path(next(iter(spec.submodule_search_locations))), top)


def _skipped(name: str) -> bool:
    parts = name.split(".")
    if parts[-1] == "__main__":
        return True
    return any(".".join(parts[: i + 1]) in _SIDE_EFFECTS for i in range(len(parts)))


def _import(name: str) -> ModuleType | None:
    sink = io.StringIO()
    try:
        with redirect_stdout(sink), redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except BaseException:  # ImportError, SystemExit, anything a module raises on import
        return None


def _functions_of(value: Any) -> list[Any]:
    """Functions behind a namespace entry: a function, a descriptor, a wrapper."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, FunctionType)]
    elif isinstance(value, functools.cached_property):
        value = value.func
    found = []
    for _ in range(10):  # a chain of functools.wraps wrappers
        if not isinstance(value, FunctionType):
            break
        found.append(value)
        value = value.__dict__.get("__wrapped__")
    return found


class Scan:
    """Collects functions and classes of the imported modules, then scans them."""

    def __init__(self) -> None:
        self.functions: dict[int, FunctionType] = {}  # id(code) -> a function with that code
        self.classes: dict[int, type] = {}
        self.failures: list[dict[str, str]] = []

    def collect(self, module: ModuleType, owned: set[str]) -> None:
        """Functions and classes reachable from *module* and defined in a module in *owned*."""
        try:
            namespace = dict(vars(module))
        except TypeError:
            return
        for value in namespace.values():
            self._collect_value(value, owned)

    def _collect_value(self, value: Any, owned: set[str]) -> None:
        for func in _functions_of(value):
            # Where the code was defined (``functools.wraps`` copies ``__module__``).
            if func.__globals__.get("__name__") in owned:
                self.functions.setdefault(id(func.__code__), func)
        if isinstance(value, type) and id(value) not in self.classes:
            if getattr(value, "__module__", None) not in owned:
                return
            self.classes[id(value)] = value
            try:
                attrs = list(value.__dict__.values())
            except Exception:
                return
            for attr in attrs:
                self._collect_value(attr, owned)

    def run(self) -> dict[str, int]:
        """Scan file by file, dropping each parsed file afterwards to keep memory flat."""
        from memostore.code import bytecode as code_bytecode
        from memostore.code import source as code_source

        by_file: dict[str, tuple[list[FunctionType], list[type]]] = {}
        for func in self.functions.values():
            by_file.setdefault(func.__code__.co_filename, ([], []))[0].append(func)
        for cls in self.classes.values():
            module = sys.modules.get(cls.__module__)
            file = getattr(module, "__file__", None)
            by_file.setdefault(file if isinstance(file, str) else "", ([], []))[1].append(cls)
        codes = 0
        for file, (functions, classes) in by_file.items():
            for func in functions:
                try:
                    codes += self._scan_function(func, code_bytecode, code_source)
                except Exception as exc:
                    self._fail(func, exc)
            for cls in classes:
                try:
                    self._scan_class(cls, code_source)
                except Exception as exc:
                    self._fail(cls, exc)
            code_source._files.pop(file, None)
        return {"functions": len(self.functions), "classes": len(self.classes), "codes": codes}

    @staticmethod
    def _scan_function(func: FunctionType, bytecode: Any, source: Any) -> int:
        code = func.__code__
        tree = bytecode.code_tree(code)
        chains: dict[tuple[str, ...], None] = {}
        for c in tree:
            bytecode.scan_fast(c, chains, set())
        bytecode.scan_dis(tree)
        bytecode.bytecode_digest(code)
        sf = source.source_file(code.co_filename, func.__globals__)
        if sf is not None:
            for c in tree:
                if not isinstance(c, CodeType) or c.co_name.startswith("<"):
                    continue  # comprehensions and genexprs have no definition of their own
                node = source.find_definition(c, sf)
                if node is not None and c is code:
                    sf.digest(node)
                    sf.text(node)
                    sf.span(node)
                    sf.matches(code)
        source.qualname_of(code)
        return len(tree)

    @staticmethod
    def _scan_class(cls: type, source: Any) -> None:
        lines = []
        for value in list(cls.__dict__.values()):
            for f in _functions_of(value):
                lines.append((f.__code__.co_filename, f.__code__.co_firstlineno))
        found = source.class_source(cls, lines)
        if found is not None:
            sf, statement = found
            sf.digest(statement)
            sf.text(statement)

    def _fail(self, obj: Any, exc: BaseException) -> None:
        where = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"
        frames = traceback.extract_tb(exc.__traceback__)
        at = frames[-1] if frames else None
        self.failures.append(
            {
                "object": where,
                "error": f"{type(exc).__name__}: {exc}"[:300],
                "at": f"{Path(at.filename).name}:{at.lineno} {at.name}" if at else "?",
            }
        )


def main(args: list[str]) -> None:
    """``[--shard K/N] GROUP...``: scan the K-th of N interleaved shares of the modules."""
    shard, count = 0, 1
    if args[:1] == ["--shard"]:
        shard, count = (int(part) for part in args[1].split("/"))
        args = args[2:]
    started = time.perf_counter()
    names: list[str] = []
    for group in args:
        names += _stdlib_names() if group == "stdlib" else _package_names(group)
    names = [name for i, name in enumerate(names) if i % count == shard]
    scan = Scan()
    imported, skipped = set(), 0
    for name in names:
        module = None if _skipped(name) else _import(name)
        if module is None:
            skipped += 1
            continue
        imported.add(name)
    # Collect after every import: a module's namespace is complete only then.
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            scan.collect(module, imported)
    import_s = time.perf_counter() - started
    # What is imported stays alive to the end: leave it out of every collection
    # (a full collection over torch's objects costs more than the parse it interrupts).
    gc.freeze()
    counts = scan.run()
    report = {
        "groups": args,
        "imported": len(imported),
        "skipped": skipped,
        **counts,
        "import_s": round(import_s, 2),
        "scan_s": round(time.perf_counter() - started - import_s, 2),
        "failures": scan.failures,
    }
    sys.__stdout__.write(json.dumps(report) + "\n")
    sys.__stdout__.flush()
    # Some imported module may have started a thread that would keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
