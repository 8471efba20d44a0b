"""Dependencies point one way: cli -> memostore <- torch_codecs.

memostore's core never imports the CLI or torch_codecs (codecs are found
through the registry's entry points), and never imports torch at module level,
so that `import memostore` stays fast and works without torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def imported_modules(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", files("memostore"), ids=lambda p: str(p.relative_to(REPO)))
def test_core_never_imports_cli_or_codec_packages(path: Path) -> None:
    for name in imported_modules(path):
        root = name.split(".")[0]
        assert root not in {"torch_codecs", "memostore_cli", "cli"}, f"{path} imports {name}"


@pytest.mark.parametrize("path", files("memostore"), ids=lambda p: str(p.relative_to(REPO)))
def test_core_imports_torch_lazily(path: Path) -> None:
    top = {name.split(".")[0] for name in imported_modules(path, top_level_only=True)}
    assert "torch" not in top, f"{path} imports torch at module level"


@pytest.mark.parametrize("path", files("torch_codecs"), ids=lambda p: str(p.relative_to(REPO)))
def test_codecs_never_import_the_cli(path: Path) -> None:
    for name in imported_modules(path):
        assert name.split(".")[0] not in {"memostore_cli", "cli"}, f"{path} imports {name}"


def test_import_memostore_loads_neither_torch_nor_codecs() -> None:
    code = (
        "import sys, memostore\n"
        "bad = [m for m in ('torch', 'torch_codecs', 'memostore_cli') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_package_is_listed_for_the_wheel() -> None:
    # pyproject lists its packages by hand (the CLI's directory is mapped to another
    # name): a sub-package missing there is missing from every non-editable install.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {v: k for k, v in config.get("package-dir", {}).items()}
    found = set()
    for top in ("memostore", "torch_codecs", "cli"):
        for init in (REPO / top).rglob("__init__.py"):
            parts = list(init.parent.relative_to(REPO).parts)
            parts[0] = mapped.get(parts[0], parts[0])
            found.add(".".join(parts))
    assert found == listed, f"missing: {sorted(found - listed)}, stale: {sorted(listed - found)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load_time_imports(path: Path, known: set[str]) -> set[str]:
    """The modules of *known* that importing *path* imports first: its module-level
    imports, relative ones resolved; ``from pkg import sub`` counts as ``pkg.sub``
    where ``sub`` is a module (not as ``pkg``, which is already being imported)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue  # never runs
        for stmt in node.body if isinstance(node, ast.Try) else [node]:
            if isinstance(stmt, ast.Import):
                found.update(alias.name for alias in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level:
                    base = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                    module = ".".join([*base, *([stmt.module] if stmt.module else [])])
                else:
                    module = stmt.module or ""
                subs = {f"{module}.{alias.name}" for alias in stmt.names} & known
                found.update(subs or {module})
    return (found & known) - {name}


def test_the_core_imports_form_no_cycle() -> None:
    # A cycle makes the import order matter and hides what depends on what:
    # imports that must wait go inside the function that needs them.
    paths = files("memostore")
    known = {_module_name(path) for path in paths}
    graph = {_module_name(path): _load_time_imports(path, known) for path in paths}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycle = [*trail[trail.index(module) :], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for child in sorted(graph[module]):
            visit(child, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
