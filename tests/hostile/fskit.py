"""Helpers of the file-system attack tests: forging stored values, running the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from memostore import Store
from memostore.odb.objects import KIND_EVALUATION, KIND_VALUE, Doc, Links

MEMOSTORE = Path(sys.executable).with_name("memostore")


def cli(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``memostore`` command on *store* (never raises on a failure)."""
    return subprocess.run(
        [str(MEMOSTORE), "--store", str(store), *args],
        capture_output=True,
        text=True,
        cwd=str(cwd) if cwd else None,
        env={k: v for k, v in os.environ.items() if k != "MEMOSTORE_DIR"},
        timeout=120,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit status 1, one line on stderr naming *words*, no Python traceback."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def only_ref(store: Store, prefix: str = "evals/") -> tuple[str, str]:
    """(name, evaluation id) of the one ref under *prefix*."""
    refs = list(store.refs.iter(prefix))
    assert len(refs) == 1, refs
    return refs[0]


def result_node(store: Store, evaluation_id: str) -> dict[str, Any]:
    body = store.evaluation(evaluation_id).body
    return store.objects.get_doc(body["result"]).body["node"]


def forge_result(store: Store, node: Any, blobs: set[str], prefix: str = "evals/") -> str:
    """Point the one evaluation's ref at a copy of it whose result is *node*.

    What a teammate with write access to a shared store (or a compromised
    remote, once pulled) can do: every object is well formed and hashes to its
    id; only the value's content is hostile. Returns the new evaluation's id.
    """
    name, evaluation_id = only_ref(store, prefix)
    old = store.evaluation(evaluation_id)
    value = Doc(KIND_VALUE, {"node": node}, Links(blobs=set(blobs)))
    store.objects.add_doc(value)
    docs = (old.links.docs - {old.body["result"]}) | {value.id}
    forged = Doc(KIND_EVALUATION, {**old.body, "result": value.id}, Links(docs, old.links.blobs))
    store.objects.add_doc(forged)
    store.refs.set(name, forged.id)
    return forged.id


def tree_state(root: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every path under *root*: (mode, mtime_ns, content or link target)."""
    state: dict[str, tuple[int, int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                content: bytes | str = os.readlink(path)
            elif path.is_file():
                content = path.read_bytes()
            else:
                content = ""
            state[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, content)
    return state
