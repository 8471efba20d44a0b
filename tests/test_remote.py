"""push/pull through a directory remote: real scripts in real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import run_script

from memostore import MemostoreWarning, Store
from memostore.errors import MalformedObject, MemostoreError
from memostore.lifecycle.maintenance import fsck
from memostore.odb.objects import KIND_EVALUATION, KIND_TREE, Doc, Links, digest_bytes
from memostore.remote import list_remotes, pull, push
from memostore.remote.walk import TransferPlan, object_name
from memostore.transport import DirectoryTransport

# Until memoize.py calls the auto-fetch hook itself, scripts wire it in (inert afterwards).
FETCH_HOOK = """
import inspect
import memostore.call.memoize as _memo

if "fetch_on_miss" not in inspect.getsource(_memo):
    _restore = _memo.MemoizedFunction._restore

    def _restore_with_fetch(self, store, ref, *args, **kwargs):
        if store.refs.read(ref) is None:
            from memostore.remote import fetch_on_miss
            fetch_on_miss(store, ref)
        return _restore(self, store, ref, *args, **kwargs)

    _memo.MemoizedFunction._restore = _restore_with_fetch
"""

# A memoised job that counts the runs of its body in a side file.
JOB = (
    FETCH_HOOK
    + """
import os, sys
import numpy as np
import memostore


@memostore.memo
def compute(n: int, parts: int = 3):
    with open(os.environ["COUNT_FILE"], "a") as f:
        f.write(f"{n}\\n")
    rng = np.random.default_rng(n)
    return {"n": n, "w": [rng.standard_normal(2000 + i) for i in range(parts)]}


@memostore.memo
def other(n: int):
    with open(os.environ["COUNT_FILE"], "a") as f:
        f.write(f"other {n}\\n")
    return [n] * 3


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        if arg.startswith("other"):
            print(arg, other(int(arg[5:])))
            continue
        n, _, parts = arg.partition("x")
        result = compute(int(n), int(parts or 3))
        print(n, sum(float(w.sum()) for w in result["w"]))
"""
)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


class Project:
    """A script plus stores and a side file that counts body runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script = root / "job.py"
        self.script.write_text(textwrap.dedent(JOB))
        self.counts = root / "count.txt"
        self.counts.write_text("")

    def store(self, name: str) -> Path:
        return self.root / name

    def run(self, store: str, *args: str, env: dict[str, str] | None = None) -> str:
        proc = run_script(
            self.script,
            *args,
            env={
                "MEMOSTORE_DIR": str(self.store(store)),
                "COUNT_FILE": str(self.counts),
                **(env or {}),
            },
        )
        return proc.stdout

    def env(self, store: str) -> dict[str, str]:
        return {"MEMOSTORE_DIR": str(self.store(store)), "COUNT_FILE": str(self.counts)}

    def body_runs(self) -> list[str]:
        return self.counts.read_text().split()


def cli_group() -> click.Group:
    """The real CLI once it registers the remote commands, else a minimal root group."""
    try:
        from memostore_cli.main import cli as main_group

        if "push" in main_group.commands:
            return main_group
    except ImportError:
        pass
    from memostore_cli.remote_cmds import register

    @click.group()
    @click.option("--store", type=click.Path())
    def root(store: str | None) -> None:
        pass

    register(root)
    return root


def cli(store: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli_group(), ["--store", str(store), *args])
    return result


def remote_is_sound(remote: Path) -> None:
    report = fsck(Store(remote, create=False), rebuild_index=False)
    assert report.ok, report.problems


# -- configuration --------------------------------------------------------------------------
def test_remote_add_list_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    Store(store)
    monkeypatch.chdir(tmp_path)
    assert cli(store, "remote", "add", "origin", "shared/ms", "--auto-fetch").exit_code == 0
    r = cli(store, "remote", "add", "lab", "s3://bucket/pre/", "--endpoint", "http://127.0.0.1:9")
    assert r.exit_code == 0, r.output
    listed = cli(store, "remote", "list", "--json")
    assert json.loads(listed.output) == [
        {
            "name": "lab",
            "url": "s3://bucket/pre",
            "endpoint": "http://127.0.0.1:9",
            "auto_fetch": False,
        },
        {"name": "origin", "url": str(tmp_path / "shared/ms"), "auto_fetch": True},
    ]
    assert "origin" in cli(store, "remote", "list").output
    # Taken names, bad names and credentials are refused with a one-line fix.
    taken = cli(store, "remote", "add", "origin", "/elsewhere")
    assert taken.exit_code == 1 and "remove it first" in taken.output
    assert cli(store, "remote", "add", "../x", "/elsewhere").exit_code == 1
    secret = cli(store, "remote", "add", "leak", "s3://AKIA:secret@bucket/p")
    assert secret.exit_code == 1 and "credentials" in secret.output
    assert "secret" not in (store / "config.json").read_text()
    assert cli(store, "remote", "remove", "lab").exit_code == 0
    assert [r.name for r in list_remotes(Store(store))] == ["origin"]
    missing = cli(store, "remote", "remove", "lab")
    assert missing.exit_code == 1 and "remote add" in missing.output


def test_push_hard_links_objects_unless_told_not_to(project: Project, tmp_path: Path) -> None:
    project.run("A", "1")
    store = project.store("A")
    assert cli(store, "remote", "add", "linked", str(tmp_path / "linked")).exit_code == 0
    added = cli(store, "remote", "add", "copied", str(tmp_path / "copied"), "--no-hardlinks")
    assert added.exit_code == 0, added.output
    assert "no hard links" in cli(store, "remote", "list").output
    assert cli(store, "push", "linked").exit_code == 0
    assert cli(store, "push", "copied").exit_code == 0
    blobs = [  # documents are sent as bytes; blobs as the store's files
        p
        for p in (store / "objects").rglob("*")
        if p.is_file() and not p.read_bytes().startswith(b"memostore:")
    ]
    assert blobs
    for remote, shared in (("linked", True), ("copied", False)):
        remote_is_sound(tmp_path / remote)
        for local in blobs:
            there = tmp_path / remote / local.relative_to(store)
            assert os.path.samefile(local, there) is shared, remote
    bad = cli(store, "remote", "add", "s3", "s3://bucket/p", "--no-hardlinks")
    assert bad.exit_code == 1 and "directory remotes only" in bad.output


def test_push_without_remote_names_the_fix(tmp_path: Path) -> None:
    Store(tmp_path / "s")
    result = cli(tmp_path / "s", "push")
    assert result.exit_code == 1
    assert "memostore remote add origin URL" in result.output
    assert "Traceback" not in result.output


# -- acceptance: push, pull, hit ------------------------------------------------------------
def test_push_pull_then_hit_without_running(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    project.run("A", "1", "2", "other5")
    assert project.body_runs() == ["1", "2", "other", "5"]
    assert cli(project.store("A"), "remote", "add", "origin", str(remote)).exit_code == 0
    pushed = cli(project.store("A"), "push", "--json")
    assert pushed.exit_code == 0, pushed.output
    first = json.loads(pushed.output)
    assert first["objects"] > 0 and len(first["refs_updated"]) == 3

    # The remote is a store in its own right.
    remote_is_sound(remote)

    pulled = cli(project.store("B"), "pull", str(remote))
    assert pulled.exit_code == 0, pulled.output
    assert "pulled" in pulled.output
    out_a = project.run("A", "1", "2", "other5")
    out_b = project.run("B", "1", "2", "other5")
    assert out_b == out_a
    assert project.body_runs() == ["1", "2", "other", "5"]  # no body ran again

    again = json.loads(cli(project.store("A"), "push", "--json").output)
    assert again["objects"] == 0 and again["refs_updated"] == [] and again["up_to_date"]
    assert "up to date" in cli(project.store("B"), "pull", str(remote)).output


def test_push_and_pull_selected_revisions(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    project.run("A", "1", "other7")
    a = Store(project.store("A"))
    report = push(a, str(remote), ["other"])
    assert [n.split("/")[1] for n in report.refs_updated] == ["__main__%3Aother"]
    evaluation = dict(a.refs.iter("evals/__main__%3Acompute"))
    (compute_id,) = evaluation.values()
    push(a, str(remote), [compute_id[:8]])
    b = Store(project.store("B"))
    report = pull(b, str(remote), ["compute"])
    assert list(dict(b.refs.iter("")).values()) == [compute_id]
    with pytest.raises(MemostoreError, match="no ref"):
        pull(b, str(remote), ["nosuchfunction"])


def test_second_push_touches_only_refs(project: Project, tmp_path: Path) -> None:
    """Nothing is scanned per object: an unchanged push reads refs and stops."""
    project.run("A", "1", "2")
    remote = CountingTransport(tmp_path / "remote")
    a = Store(project.store("A"))
    push(a, remote)
    remote.calls.clear()
    push(a, remote)
    assert set(remote.calls) <= {"get_bytes"}  # FORMAT and the two refs
    assert remote.calls.count("get_bytes") == 3

    # A new evaluation sharing nothing: only its own objects and their links are checked.
    project.run("A", "3")
    remote.calls.clear()
    report = push(a, remote)
    assert report.objects > 0
    assert remote.calls.count("stat") <= report.objects + 1
    assert "list" not in remote.calls


class CountingTransport(DirectoryTransport):
    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.calls: list[str] = []

    def stat(self, name: str) -> int | None:
        self.calls.append("stat")
        return super().stat(name)

    def get_bytes(self, name: str) -> bytes:
        self.calls.append("get_bytes")
        return super().get_bytes(name)

    def get_bytes_at_most(self, name: str, limit: int) -> bytes:
        self.calls.append("get_bytes")  # a bounded read (refs, FORMAT) is a read all the same
        return super().get_bytes_at_most(name, limit)

    def list(self, prefix: str = ""):
        self.calls.append("list")
        return super().list(prefix)


# -- interruption and concurrency ----------------------------------------------------------
KILLING_PUSH = """
import os, signal, sys
from memostore import Store
from memostore.remote import TransferProgress, push

class KillHalfway(TransferProgress):
    done = 0
    def start(self, objects, nbytes):
        self.half = objects // 2
    def advance(self, objects, nbytes):
        self.done += objects
        if self.done >= self.half:
            os.kill(os.getpid(), signal.SIGKILL)

push(Store(sys.argv[1]), sys.argv[2], jobs=2, progress=KillHalfway())
"""


def test_interrupted_push_resumes_and_remote_is_sound(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    project.run("A", "1x60")
    killer = tmp_path / "killer.py"
    killer.write_text(KILLING_PUSH)
    proc = subprocess.run(
        [sys.executable, str(killer), str(project.store("A")), str(remote)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    sent = list((remote / "objects").rglob("*"))
    assert 0 < len([p for p in sent if p.is_file()]) < 64
    assert not (remote / "refs").exists() or not list((remote / "refs").rglob("*"))
    remote_is_sound(remote)  # what is there is whole; nothing names a missing object

    report = push(Store(project.store("A")), str(remote))
    assert report.refs_updated and 0 < report.objects < 64
    remote_is_sound(remote)
    pull(Store(project.store("B")), str(remote))
    project.run("B", "1x60")
    assert project.body_runs() == ["1"]


CONCURRENT_PUSH = """
import sys, time
from memostore import Store
from memostore.remote import push
while time.time() < float(sys.argv[3]):
    time.sleep(0.005)
report = push(Store(sys.argv[1]), sys.argv[2], jobs=4)
print(len(report.refs_updated), len(report.refs_kept))
"""


def test_concurrent_pushers_keep_each_others_refs(project: Project, tmp_path: Path) -> None:
    import time

    remote = tmp_path / "remote"
    project.run("A", "1", "2", "3", "other1")
    project.run("C", "4", "5", "6", "other1")  # other(1) is the same call in both stores
    pusher = tmp_path / "pusher.py"
    pusher.write_text(CONCURRENT_PUSH)
    start_at = str(time.time() + 1.5)
    procs = [
        subprocess.Popen(
            [sys.executable, str(pusher), str(project.store(s)), str(remote), start_at],
            stdout=subprocess.PIPE,
            text=True,
        )
        for s in ("A", "C")
    ]
    outputs = [[int(x) for x in p.communicate(timeout=120)[0].split()] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    remote_refs = dict(Store(remote, create=False).refs.iter(""))
    for s in ("A", "C"):
        for name, value in Store(project.store(s)).refs.iter("evals/__main__%3Acompute"):
            assert remote_refs[name] == value
    # The shared key is on the remote once: one pusher set it, the other kept it.
    assert sorted(updated for updated, _ in outputs) == [3, 4]
    assert sum(kept for _, kept in outputs) == 1
    assert len(remote_refs) == 7
    remote_is_sound(remote)


# -- verification and hostile remotes --------------------------------------------------------
def test_corrupt_object_on_remote_is_never_stored(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    project.run("A", "1")
    push(Store(project.store("A")), str(remote))
    blob = max(
        (remote / "objects").rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0
    )
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    b = Store(project.store("B"))
    with pytest.warns(MemostoreWarning, match="skipped 1 ref"):
        report = pull(b, str(remote))  # the ref above it is skipped, the pull goes on
    expected = blob.parent.name + blob.name
    ((_, reason),) = report.skipped.items()
    assert expected in reason and "corrupt" in reason
    assert not b.objects.contains(expected)
    assert list(b.refs.iter("")) == []  # no ref names an incomplete evaluation


def _put_doc(remote: DirectoryTransport, doc: Doc) -> str:
    remote.add_if_new(object_name(doc.id), doc.data)
    return doc.id


def test_hostile_refs_and_links_are_refused(tmp_path: Path) -> None:
    remote = DirectoryTransport(tmp_path / "remote")
    remote.put_bytes("FORMAT", b"memostore 1\n")
    # A link that is not an id (a path) must never name a file.
    evil = Doc(KIND_TREE, {"x": 1}, Links(docs={"../../../../etc/passwd"}))
    key = "ab" * 32
    evaluation = Doc(
        KIND_EVALUATION,
        {"function": "m:f", "key": key},
        Links(docs={_put_doc(remote, evil)}),
    )
    remote.put_bytes(f"refs/evals/m%3Af/{key}", (_put_doc(remote, evaluation) + "\n").encode())
    # A ref whose content is not an id, and a ref naming another call's evaluation.
    remote.put_bytes("refs/evals/m%3Af/" + "cd" * 32, b"../../../etc/passwd\n")
    remote.put_bytes("refs/evals/m%3Ag/" + "ef" * 32, (evaluation.id + "\n").encode())
    store = Store(tmp_path / "store")
    with pytest.raises(MalformedObject, match="not an object id"):
        pull(store, remote, ["m:f"])
    assert list(store.objects.iter_ids()) == []
    report = pull(store, remote, ["m:g"])
    assert "not this call's" in report.skipped["evals/m%3Ag/" + "ef" * 32]
    assert report.refs_updated == []


def test_waves_send_children_first() -> None:
    leaf = Doc(KIND_TREE, {"a": 1})
    blob = digest_bytes(b"blob")
    mid = Doc(KIND_TREE, {"b": 2}, Links(docs={leaf.id}, blobs={blob}))
    top = Doc(KIND_TREE, {"c": 3}, Links(docs={mid.id, leaf.id}))
    plan = TransferPlan(
        docs={d.id: d for d in (top, mid, leaf)},
        blobs={blob},
        children={d.id: (d.links.docs, d.links.blobs) for d in (top, mid, leaf)},
    )
    waves = plan.waves()
    position = {i: n for n, wave in enumerate(waves) for i in wave}
    assert position[blob] == position[leaf.id] == 0
    assert position[leaf.id] < position[mid.id] < position[top.id]


def test_differing_refs_are_kept_unless_forced(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    project.run("A", "1")
    project.run("B", "1")  # the same call, computed twice: two valid evaluations
    a, b = Store(project.store("A")), Store(project.store("B"))
    push(a, str(remote))
    report = pull(b, str(remote))
    assert len(report.refs_kept) == 1 and report.objects == 0
    ((name, mine),) = list(b.refs.iter(""))
    assert mine != a.refs.read(name)
    forced = pull(b, str(remote), force=True)
    assert forced.refs_updated == [name] and b.refs.read(name) == a.refs.read(name)
    assert push(b, str(remote)).refs_unchanged == 1


def test_refuses_a_remote_of_a_newer_format(tmp_path: Path) -> None:
    remote = DirectoryTransport(tmp_path / "remote")
    remote.put_bytes("FORMAT", b"memostore 99\n")
    with pytest.raises(MemostoreError, match="upgrade memostore"):
        pull(Store(tmp_path / "s"), remote)
    with pytest.raises(MemostoreError, match="no memostore store"):
        pull(Store(tmp_path / "s"), DirectoryTransport(tmp_path / "empty"))
