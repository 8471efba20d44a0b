"""The CLI imports only what a command uses: listing never loads numpy, torch or the UI.

Each command runs in a fresh interpreter that writes, at exit, the names of the
modules it loaded; the heavy ones must be absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memostore import Store, memo

HEAVY = ("numpy", "torch", "memostore.ui", "memostore.distributed", "memostore.call")

# Runs the console entry point, then dumps sys.modules (also when click exits).
_WRAPPER = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from memostore_cli.main import main
sys.argv[0] = "memostore"
main()
"""


def _modules(tmp: Path, *args: str) -> set[str]:
    out = tmp / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("imports") / "store"

    @memo(store=Store(root))
    def double(x: int) -> int:
        return 2 * x

    for i in range(3):
        double(i)
    evaluation_id = next(Store(root).iter_evaluation_refs())[1]
    return root, evaluation_id


@pytest.mark.parametrize(
    "command",
    [("log", "-n", "5"), ("log", "double", "-n", "2"), ("show", "ID"), ("du",)],
    ids=lambda c: " ".join(c),
)
def test_listing_commands_import_no_heavy_module(
    store: tuple[Path, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    root, evaluation_id = store
    args = [evaluation_id if a == "ID" else a for a in command]
    loaded = _modules(tmp_path, "--store", str(root), *args)
    assert "memostore.odb.store" in loaded  # the command did reach the store
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert not heavy, f"`memostore {' '.join(command)}` imported {heavy[:8]}"


def test_import_memostore_alone_loads_nothing_heavy(tmp_path: Path) -> None:
    """``import memostore`` registers its codecs and the value digest, and no more:
    no numpy, torch, dashboard, call machinery or metrics until a public name is used."""
    out = tmp_path / "modules.json"
    code = f"import json, sys, memostore; open({str(out)!r}, 'w').write(json.dumps([*sys.modules]))"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    loaded = set(json.loads(out.read_text()))
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}
    assert "memostore.metrics" not in loaded
