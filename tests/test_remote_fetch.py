"""Auto-fetch on a local miss, unreachable remotes, and downloaded data used offline."""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path

import pytest
from conftest import run_script
from s3server import DUMMY_AWS_ENV, free_port
from test_remote import FETCH_HOOK, Project

from memostore import Store
from memostore.odb.objects import digest_bytes
from memostore.remote import add_remote, fetch_on_miss, pull, push
from memostore.remote.fetch import reset_state
from memostore.remote.transfer import LIST_THRESHOLD, RemotePresence
from memostore.remote.walk import object_name
from memostore.transport import MemoryTransport


@pytest.fixture(autouse=True)
def _fresh_fetch_state() -> None:
    reset_state()


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _prepare(project: Project, remote: Path, *calls: str) -> None:
    """Store A computes *calls* and pushes them; store B points at the remote, auto-fetching."""
    project.run("A", *calls)
    push(Store(project.store("A")), str(remote))
    add_remote(Store(project.store("B")), "origin", str(remote), auto_fetch=True)


def test_auto_fetch_hits_by_downloading_only_that_evaluation(
    project: Project, tmp_path: Path
) -> None:
    remote = tmp_path / "remote"
    _prepare(project, remote, "1", "2x40")
    runs = project.body_runs()
    out = project.run("B", "1")
    assert project.body_runs() == runs  # a hit: the body did not run
    assert out == project.run("A", "1")
    b, a = Store(project.store("B")), Store(project.store("A"))
    b_refs, a_refs = dict(b.refs.iter("")), dict(a.refs.iter(""))
    assert len(b_refs) == 1 and b_refs.items() <= a_refs.items()
    # compute(2, 40)'s forty arrays stayed on the remote.
    assert len(list(b.objects.iter_ids())) < len(list(a.objects.iter_ids())) - 40
    # A miss on the remote too: computed locally, without a warning.
    proc = run_script(project.script, "3", env=project.env("B"))
    assert project.body_runs()[-1] == "3"
    assert "MemostoreWarning" not in proc.stderr


@pytest.mark.parametrize("kind", ["directory", "s3"])
def test_unreachable_remote_computes_locally_after_one_warning(
    project: Project, tmp_path: Path, kind: str
) -> None:
    if kind == "directory":
        remote = tmp_path / "remote"
        _prepare(project, remote, "1")
        shutil.rmtree(remote)  # an unmounted share
        env = {}
    else:
        pytest.importorskip("boto3")
        project.run("A", "1")
        port = free_port()  # nothing listens there
        add_remote(
            Store(project.store("B")),
            "origin",
            "s3://bucket/store",
            endpoint=f"http://127.0.0.1:{port}",
            auto_fetch=True,
        )
        env = dict(DUMMY_AWS_ENV)
    started = time.monotonic()
    proc = run_script(project.script, "1", "2", "3", env={**project.env("B"), **env}, timeout=60)
    elapsed = time.monotonic() - started
    assert project.body_runs()[-3:] == ["1", "2", "3"]  # computed locally
    assert proc.stderr.count("MemostoreWarning") == 1, proc.stderr
    assert "unreachable" in proc.stderr
    assert elapsed < 15


def test_fetch_on_miss_in_process(project: Project, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    _prepare(project, remote, "1")
    a, b = Store(project.store("A")), Store(project.store("B"))
    ((ref, evaluation_id),) = list(a.refs.iter("evals/"))
    assert fetch_on_miss(b, ref) == evaluation_id
    assert b.refs.read(ref) == evaluation_id
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fetch_on_miss(b, ref.rsplit("/", 1)[0] + "/" + "0" * 64) is None
        assert fetch_on_miss(b, "../../etc/passwd") is None  # never raises


def test_no_remote_configured_is_nearly_free(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    ref = "evals/m%3Af/" + "0" * 64
    started = time.perf_counter()
    for _ in range(2000):
        assert fetch_on_miss(store, ref) is None
    per_call = (time.perf_counter() - started) / 2000
    assert per_call < 100e-6, per_call
    assert fetch_on_miss(Store.in_memory(), ref) is None


def test_presence_by_listing_fans() -> None:
    transport = MemoryTransport()
    ids = [digest_bytes(str(i).encode()) for i in range(LIST_THRESHOLD + 200)]
    for object_id in ids[::2]:
        transport.put_bytes(object_name(object_id), b"x")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        presence = RemotePresence(transport, pool, listing=True)
        assert presence(ids) == set(ids[::2])
        assert presence(ids[:10]) == set(ids[:10:2])  # answered from the listing


# -- downloaded data, offline ---------------------------------------------------------------
DOWNLOAD = """
import hashlib, os, random
import memostore
{shim}

@memostore.memo
def download_data(name: str):
    with open(os.environ["COUNT_FILE"], "a") as f:
        f.write("download\\n")
    target = os.path.join(os.environ["DOWNLOAD_DIR"], name)
    os.makedirs(os.path.join(target, "labels"), exist_ok=True)
    rng = random.Random(name)
    for i in range(3):
        with open(os.path.join(target, f"part{{i}}.bin"), "wb") as f:
            f.write(rng.randbytes(200_000 + i))
    with open(os.path.join(target, "labels", "index.txt"), "w") as f:
        f.write("a,b,c\\n")
    return memostore.snapshot(target)

snap = download_data("mnist")
print("ROOT", snap.path)
for path in snap.files():
    rel = os.path.relpath(path, snap.path)
    print(rel, hashlib.sha256(open(path, "rb").read()).hexdigest())
"""


def test_downloaded_snapshot_is_restored_offline(project: Project, tmp_path: Path) -> None:
    script = tmp_path / "download.py"
    script.write_text(DOWNLOAD.format(shim=FETCH_HOOK))
    remote = tmp_path / "remote"
    downloads = tmp_path / "downloads"
    env_a = {**project.env("A"), "DOWNLOAD_DIR": str(downloads)}
    first = run_script(script, env=env_a).stdout.splitlines()
    push(Store(project.store("A")), str(remote))
    b = Store(project.store("B"))
    pull(b, str(remote))
    # Offline: the downloads and the remote are gone; the remote stays configured.
    add_remote(b, "origin", str(remote), auto_fetch=True)
    shutil.rmtree(downloads)
    shutil.rmtree(remote)
    # The body reads DOWNLOAD_DIR: configured alike on both machines (a hit needs the
    # value the stored call read), though nothing is left there.
    env_b = {**project.env("B"), "DOWNLOAD_DIR": str(downloads)}
    proc = run_script(script, env=env_b)
    second = proc.stdout.splitlines()
    assert project.body_runs() == ["download"]
    assert second[1:] == first[1:] and len(second) == 5  # same names, same bytes
    root = Path(second[0].split(" ", 1)[1])
    assert root.is_relative_to(project.store("B"))
    assert all(not (p.stat().st_mode & 0o222) for p in root.rglob("*") if p.is_file())
    assert "MemostoreWarning" not in proc.stderr  # a local hit never asks the remote
