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


# -- the import graph, counting every import ---------------------------------------------------
#
# A lazy import inside a function, or one under ``if TYPE_CHECKING:``, is still a
# dependency: it only defers the circle. So every import statement counts here.

WINGS_ROOT = "memostore"

# Each wing of memostore and the wings it may import (besides memostore.errors,
# which every wing may import). Lower wings come first; docs/architecture.md
# draws the same table.
ALLOWED: dict[str, set[str]] = {
    "odb": set(),
    "transport": {"odb"},
    "code": {"odb"},
    "trust": {"odb", "transport", "code"},
    "values": {"odb", "code", "trust"},
    "effects": {"odb", "code", "values"},
    "records": {"odb", "values"},
    "metrics": {"odb", "values", "records"},
    "remote": {"odb", "transport", "trust", "values", "records"},
    "lifecycle": {"odb", "transport", "trust", "values", "records", "metrics", "remote"},
    "inspect": {"odb", "code", "trust", "values", "effects", "records", "metrics", "lifecycle"},
    "call": {
        "odb",
        "transport",
        "code",
        "trust",
        "values",
        "effects",
        "records",
        "metrics",
        "remote",
        "lifecycle",
        "inspect",
    },
    "distributed": {"odb", "values", "effects", "records", "call"},
    "ui": {"odb", "values", "records", "metrics", "lifecycle", "inspect"},
    "tensorboard": {"metrics"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def every_import(path: Path, known: set[str]) -> set[str]:
    """The modules of *known* that *path* imports anywhere (functions, TYPE_CHECKING too).

    Relative imports are resolved; ``from pkg import sub`` counts as ``pkg.sub``
    where ``sub`` is a module, else as ``pkg``.
    """
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    return (found & known) - {name}


def import_graph(*packages: str) -> dict[str, set[str]]:
    paths = [path for package in packages for path in files(package)]
    known = {_module_name(path) for path in paths}
    return {_module_name(path): every_import(path, known) for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of *graph*, as a closed path of module names, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        stack = [(start, iter(sorted(graph[start])))]
        trail = [start]
        while stack:
            module, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                trail.pop()
                done.add(module)
            elif child in trail:
                return [*trail[trail.index(child) :], child]
            elif child not in done:
                stack.append((child, iter(sorted(graph[child]))))
                trail.append(child)
    return None


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != WINGS_ROOT or len(parts) < 2 or parts[1] == "errors":
        return None
    return parts[1]


@pytest.mark.parametrize("package", ["memostore", "torch_codecs", "cli"])
def test_no_import_cycle_counting_every_import(package: str) -> None:
    cycle = find_cycle(import_graph(package))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_is_found_however_it_is_imported(tmp_path: Path) -> None:
    # The checker itself: a cycle closed by a lazy import or a TYPE_CHECKING one counts.
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "one.py").write_text("def f():\n    from . import two\n")
    (package / "two.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .one import f\n"
    )
    known = {"pkg.one", "pkg.two"}
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        edges = {m: every_import(tmp_path / f"{m.replace('.', '/')}.py", known) for m in known}
    finally:
        REPO = saved
    assert edges == {"pkg.one": {"pkg.two"}, "pkg.two": {"pkg.one"}}
    assert find_cycle(edges) is not None


def test_the_top_of_memostore_holds_only_wings() -> None:
    top = {p.name for p in (REPO / "memostore").iterdir() if p.suffix == ".py"}
    assert top == {"__init__.py", "errors.py"}
    wings = {p.name for p in (REPO / "memostore").iterdir() if (p / "__init__.py").exists()}
    assert wings == set(ALLOWED), f"wings without a rule: {sorted(wings - set(ALLOWED))}"
    for wing in wings:
        doc = ast.get_docstring(ast.parse((REPO / "memostore" / wing / "__init__.py").read_text()))
        assert doc and len(doc) > 80, f"memostore/{wing}/__init__.py says what it holds"


def test_wings_import_only_the_wings_below_them() -> None:
    graph = import_graph("memostore")
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (here := wing_of(module)) is not None
        and (there := wing_of(target)) not in (None, here)
        and there not in ALLOWED[here]
    )
    assert not wrong, "imports against the direction of the wings:\n" + "\n".join(wrong)


def test_the_wing_order_itself_has_no_cycle() -> None:
    assert find_cycle({wing: set(below) for wing, below in ALLOWED.items()}) is None


def test_no_private_name_is_imported_from_another_module() -> None:
    crossing = []
    for package in ("memostore", "torch_codecs", "cli"):
        for path in files(package):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    crossing += [
                        f"{path.relative_to(REPO)}:{node.lineno} {alias.name}"
                        for alias in node.names
                        if alias.name.startswith("_") and not alias.name.startswith("__")
                    ]
    assert not crossing, "private names imported across modules:\n" + "\n".join(crossing)
