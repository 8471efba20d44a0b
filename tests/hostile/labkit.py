"""A victim's script, an attacker who plants results under its real call key, and checks.

The attacker runs the victim's own script once (in a store of its own, or the
victim's), so the ref it rewrites is exactly the one the victim's plain call
reads; then it swaps the stored result for a crafted value document. Every
attack aims at a marker file under ``outside/``: a test passes only if the
victim's next call computes (prints ``COMPUTED``), the marker never appears,
and no file changed anywhere under the test's directory except inside stores.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memostore import Store
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.records.evaluation import evaluation_doc
from memostore.remote.fetch import reset_state
from memostore.trust import signers

VICTIM = """
import sys

from memostore import memo


@memo
def compute(n):
    print("COMPUTED")
    return [n, n + 1]


if __name__ == "__main__":
    print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
"""

# Where the victim's code lives; a "remote" inside it is on its sys.path.
PROJECT = "project"
MEMOSTORE = Path(sys.executable).with_name("memostore")


@dataclass
class Lab:
    """One attack's world: the victim's project and store, the attacker's store, a remote."""

    root: Path
    stores: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.project = self.root / PROJECT
        self.project.mkdir()
        self.script = self.project / "victim.py"
        self.script.write_text(textwrap.dedent(VICTIM))
        self.outside = self.root / "outside"
        self.outside.mkdir()
        self.marker = self.outside / "MARKER"
        # Anything that asks for a web browser (antigravity) runs this instead.
        self.browser = self.root / "browser.sh"
        self.browser.write_text(f"#!/bin/sh\ntouch {self.marker}\n")
        self.browser.chmod(0o755)
        self.victim_store = self.store("victim-store")
        self.attacker_store = self.store("attacker-store")
        self.remote = self.project / "shared_remote"

    def store(self, name: str) -> Path:
        path = self.root / name
        self.stores.append(path)
        return path

    def env(self, store: Path, **extra: str) -> dict[str, str]:
        return {"MEMOSTORE_DIR": str(store), "BROWSER": str(self.browser), **extra}

    def run(self, store: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the victim's script with *store* as its store, in a fresh interpreter."""
        proc = subprocess.run(
            [sys.executable, str(self.script), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env(store, **env)},
            cwd=str(self.project),
            timeout=180,
        )
        assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc

    def cli(self, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """The real ``memostore`` command on *store*; it must succeed."""
        proc = subprocess.run(
            [str(MEMOSTORE), "--store", str(store), *args],
            capture_output=True,
            text=True,
            env={**os.environ, "BROWSER": str(self.browser)},
            cwd=str(self.project),
            timeout=180,
        )
        assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc

    def files(self) -> dict[str, int]:
        """Every file under the lab outside its stores and remotes, with its size."""
        skip = [*self.stores, self.remote]
        out: dict[str, int] = {}
        for path in self.root.rglob("*"):
            if any(path == s or s in path.parents for s in skip) or not path.is_file():
                continue
            out[str(path.relative_to(self.root))] = path.stat().st_size
        return out

    def victim_meets_attack(
        self, store: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """The victim's plain call: it must compute, and nothing outside stores may change."""
        before = self.files()
        proc = self.run(store or self.victim_store, **env)
        assert "COMPUTED" in proc.stdout, proc.stdout + proc.stderr
        assert "RESULT [3, 4]" in proc.stdout
        assert not self.marker.exists(), "the attack ran"
        assert self.files() == before, "a file changed outside the stores"
        return proc


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    """A fresh lab (test modules import this fixture: ``from .labkit import lab``)."""
    reset_state()  # auto-fetch remembers remotes per process; tests share one process
    return Lab(tmp_path)


# -- crafting -----------------------------------------------------------------------------------
def code(module: str, qualname: str, **extra: Any) -> dict[str, Any]:
    return {"$": "code", "module": module, "qualname": qualname, **extra}


def reduce(fn: Any, *args: Any) -> dict[str, Any]:
    return {"$": "reduce", "fn": fn, "args": list(args)}


def plant(
    store_path: Path,
    node: Any,
    *,
    blobs: dict[str, bytes] | None = None,
    payloads: dict[str, str] | None = None,
    ref: str | None = None,
    payload_ids: dict[str, str] | None = None,
) -> str:
    """Replace the result of the store's one stored call (or *ref*'s) by *node*.

    *blobs*: name -> bytes stored as blobs; *payloads* maps code digests to those
    names (code stored by value), *payload_ids* to blobs already in the store.
    Returns the planted evaluation's id.
    """
    store = Store(store_path)
    refs = [r for r in store.refs.iter("evals/") if ref is None or r[0] == ref]
    assert len(refs) == 1, refs
    ref, evaluation_id = refs[0]
    blob_ids = {name: store.objects.add_bytes(data) for name, data in (blobs or {}).items()}
    docs = set(_refs_in(node))  # documents the node references travel with it on push
    value = Doc(KIND_VALUE, {"node": node}, Links(docs=docs, blobs=set(blob_ids.values())))
    store.objects.add_doc(value)
    body = dict(store.evaluation(evaluation_id).body)
    body["result"] = value.id
    body["payloads"] = {
        **(body.get("payloads") or {}),
        **{digest: blob_ids[name] for digest, name in (payloads or {}).items()},
        **(payload_ids or {}),
    }
    doc = evaluation_doc(body, Links())
    store.objects.add_doc(doc)
    # Signed with the session's key, which the victim trusts as its own: these attacks
    # are what even a trusted signer cannot do (test_signatures.py: what others cannot).
    signers.sign(store, doc.id)
    store.refs.set(ref, doc.id)
    return doc.id


def _refs_in(node: Any) -> list[str]:
    if isinstance(node, list):
        return [i for item in node for i in _refs_in(item)]
    if isinstance(node, dict):
        own = [node["id"]] if node.get("$") == "ref" else []
        return own + [i for value in node.values() for i in _refs_in(value)]
    return []


class _Command:
    """Pickles as a call of os.system: what a hostile cloudpickle payload does on load."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def hostile_pickle(marker: Path) -> bytes:
    return pickle.dumps(_Command(f"touch {marker}"), protocol=4)


def code_digest(project: Path, module: str, qualname: str) -> str:
    """The digest the victim's own code has today (what a code node must carry)."""
    script = (
        "import sys, importlib\n"
        "from memostore.code.deps import code_info\n"
        "obj = importlib.import_module(sys.argv[1])\n"
        "for part in sys.argv[2].split('.'):\n"
        "    obj = getattr(obj, part)\n"
        "print(code_info(obj).digest)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, module, qualname],
        capture_output=True,
        text=True,
        cwd=str(project),
        env={**os.environ, "PYTHONPATH": str(project)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "MemostoreWarning" in line]
