"""The transport contract suite, run against every transport, plus per-backend checks.

``TestTransportContract`` is the contract: every transport (memory, directory,
S3 on a local ``moto_server``) must pass it unchanged. The ``s3_server`` and
``s3_bucket`` fixtures come from ``conftest_s3.py`` through ``conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from s3server import free_port

from memostore.errors import MemostoreError
from memostore.transport import (
    DirectoryTransport,
    InvalidRemoteName,
    MemoryTransport,
    NotFoundOnRemote,
    RemoteError,
    RemoteUnreachable,
    Transport,
    open_transport,
    validate_name,
)

MiB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["memory", "directory", pytest.param("s3", marks=pytest.mark.s3)])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Transport:
    if request.param == "memory":
        t: Transport = MemoryTransport()
    elif request.param == "directory":
        t = DirectoryTransport(tmp_path / "remote")
    else:
        url = request.getfixturevalue("s3_bucket")
        # 5 MiB parts (the S3 minimum) so the 20 MB tests go multipart.
        t = open_transport(url, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    yield t
    t.close()


def _payload(size: int) -> bytes:
    # Distinct per position so a misplaced part cannot pass as correct.
    block = os.urandom(64 * 1024)
    return (block * (size // len(block) + 1))[:size]


def _run_together(n: int, work) -> list:
    """Run work(i) in n threads released at once; return their results by index."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


BAD_NAMES = [
    "",
    "/etc/passwd",
    "../outside",
    "a/../../b",
    "a/./b",
    "a//b",
    "a/b/",
    "a\\b",
    "..\\x",
    "refs/.hidden",
    "refs/main.lock",
    "refs/main.lock.stale-1234",
    "nul\x00byte",
    "new\nline",
]


class TestTransportContract:
    def test_put_get_round_trip(self, transport: Transport) -> None:
        transport.put_bytes("refs/heads/main", b"a" * 64 + b"\n")
        assert transport.get_bytes("refs/heads/main") == b"a" * 64 + b"\n"
        transport.put_bytes("refs/heads/main", b"new")  # replaces
        assert transport.get_bytes("refs/heads/main") == b"new"
        transport.put_bytes("empty", b"")
        assert transport.get_bytes("empty") == b""
        assert transport.stat("empty") == 0
        assert transport.stat("refs/heads/main") == 3

    def test_missing_names(self, transport: Transport, tmp_path: Path) -> None:
        with pytest.raises(NotFoundOnRemote) as info:
            transport.get_bytes("objects/00/missing")
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, MemostoreError)
        assert transport.stat("objects/00/missing") is None
        dest = tmp_path / "dl" / "file"
        with pytest.raises(NotFoundOnRemote):
            transport.get_file("objects/00/missing", dest)
        assert not dest.exists()
        transport.delete("objects/00/missing")  # idempotent
        assert list(transport.list("objects/")) == []

    def test_a_directory_is_not_a_name(self, transport: Transport) -> None:
        transport.put_bytes("objects/ab/cd", b"x")
        assert transport.stat("objects/ab") is None
        with pytest.raises(NotFoundOnRemote):
            transport.get_bytes("objects/ab")
        transport.delete("objects/ab")
        assert transport.get_bytes("objects/ab/cd") == b"x"

    def test_big_file_round_trip(self, transport: Transport, tmp_path: Path) -> None:
        data = _payload(20 * MiB + 123)
        src = tmp_path / "big.bin"
        src.write_bytes(data)
        transport.put_file("objects/aa/big", src)
        assert transport.stat("objects/aa/big") == len(data)
        dest = tmp_path / "out" / "big.bin"
        transport.get_file("objects/aa/big", dest)
        assert dest.read_bytes() == data
        # get_file replaces an existing destination and leaves no temporaries.
        transport.put_bytes("small", b"small")
        transport.get_file("small", dest)
        assert dest.read_bytes() == b"small"
        assert sorted(p.name for p in dest.parent.iterdir()) == ["big.bin"]

    def test_big_add_if_new(self, transport: Transport, tmp_path: Path) -> None:
        data = _payload(20 * MiB + 7)
        src = tmp_path / "big.bin"
        src.write_bytes(data)
        assert transport.add_if_new("objects/bb/big", src) is True
        assert transport.add_if_new("objects/bb/big", src) is False
        assert transport.get_bytes("objects/bb/big") == data

    def test_a_missing_local_file_is_the_callers_error(
        self, transport: Transport, tmp_path: Path
    ) -> None:
        for call in (
            lambda: transport.put_file("a", tmp_path / "missing"),
            lambda: transport.add_if_new("a", tmp_path / "missing"),
        ):
            with pytest.raises(FileNotFoundError) as info:
                call()
            assert not isinstance(info.value, RemoteError)
        assert transport.stat("a") is None

    def test_add_if_new(self, transport: Transport, tmp_path: Path) -> None:
        assert transport.add_if_new("objects/ab/cdef", b"first") is True
        assert transport.add_if_new("objects/ab/cdef", b"second") is False
        assert transport.get_bytes("objects/ab/cdef") == b"first"
        src = tmp_path / "f"
        src.write_bytes(b"from a file")
        assert transport.add_if_new("objects/ab/file", src) is True
        assert transport.add_if_new("objects/ab/file", b"other") is False
        assert transport.get_bytes("objects/ab/file") == b"from a file"
        assert transport.add_if_new("objects/ab/empty", b"") is True
        assert transport.stat("objects/ab/empty") == 0
        with pytest.raises(TypeError):
            transport.add_if_new("objects/ab/str", "not bytes")  # type: ignore[arg-type]

    def test_concurrent_add_if_new_has_one_winner(self, transport: Transport) -> None:
        for round_ in range(5):
            name = f"objects/cc/{round_}"
            results = _run_together(6, lambda i, n=name: transport.add_if_new(n, b"%d" % i))
            assert results.count(True) == 1
            assert transport.get_bytes(name) == b"%d" % results.index(True)

    def test_stat_list_delete(self, transport: Transport) -> None:
        names = {
            "objects/ab/0001",
            "objects/ab/0002",
            "objects/abc/0003",
            "objects/cd/0004",
            "refs/evals/f/k1",
            "refs/runs/r1",
            "top",
        }
        for name in names:
            transport.put_bytes(name, name.encode())
        assert set(transport.list()) == names
        assert set(transport.list("")) == names
        assert set(transport.list("refs/")) == {"refs/evals/f/k1", "refs/runs/r1"}
        assert set(transport.list("refs")) == {"refs/evals/f/k1", "refs/runs/r1"}
        # A plain string prefix, as in S3: "objects/ab" also matches "objects/abc/".
        assert set(transport.list("objects/ab")) == {
            "objects/ab/0001",
            "objects/ab/0002",
            "objects/abc/0003",
        }
        assert set(transport.list("objects/ab/")) == {"objects/ab/0001", "objects/ab/0002"}
        assert set(transport.list("objects/ab/000")) == {"objects/ab/0001", "objects/ab/0002"}
        assert list(transport.list("nothing/")) == []
        for name in names:
            assert transport.stat(name) == len(name)
        transport.delete("objects/ab/0001")
        transport.delete("objects/ab/0001")
        assert transport.stat("objects/ab/0001") is None
        assert set(transport.list("objects/ab/")) == {"objects/ab/0002"}

    def test_set_if_equals(self, transport: Transport) -> None:
        ref = "refs/evals/train/key"
        assert transport.set_if_equals(ref, b"x", b"y") is False  # absent, old given
        assert transport.stat(ref) is None
        assert transport.set_if_equals(ref, None, b"one") is True
        assert transport.set_if_equals(ref, None, b"two") is False  # exists now
        assert transport.set_if_equals(ref, b"wrong", b"two") is False
        assert transport.get_bytes(ref) == b"one"
        assert transport.set_if_equals(ref, b"one", b"two") is True
        assert transport.get_bytes(ref) == b"two"
        assert transport.set_if_equals(ref, b"two", b"two") is True  # no-op swap
        transport.delete(ref)
        assert transport.set_if_equals(ref, b"two", b"three") is False
        assert transport.set_if_equals(ref, None, b"again") is True
        assert transport.get_bytes(ref) == b"again"
        assert list(transport.list("refs/")) == [ref]  # no lock or temp files show

    def test_delete_if_equals(self, transport: Transport) -> None:
        ref = "refs/evals/train/key"
        assert transport.delete_if_equals(ref, b"one") is False  # absent
        transport.put_bytes(ref, b"one")
        assert transport.delete_if_equals(ref, b"two") is False  # another value: kept
        assert transport.get_bytes(ref) == b"one"
        assert transport.delete_if_equals(ref, b"one") is True
        assert transport.stat(ref) is None
        assert transport.delete_if_equals(ref, b"one") is False
        assert list(transport.list("refs/")) == []  # no lock or temp files show

    def test_delete_if_equals_against_concurrent_swaps(self, transport: Transport) -> None:
        # Each round, deleters of the old value race writers of new values: the
        # deletion wins only where no swap landed first, and a swap that reports
        # success is never undone by a deletion that read the old value.
        ref = "refs/contended"
        for round_ in range(6):
            old = b"old-%d" % round_
            transport.put_bytes(ref, old)
            results = _run_together(
                6,
                lambda i, old=old, r=round_: (
                    transport.delete_if_equals(ref, old)
                    if i % 2
                    else transport.set_if_equals(ref, old, b"new-%d-%d" % (r, i))
                ),
            )
            assert results.count(True) == 1, results
            winner = results.index(True)
            if winner % 2:
                assert transport.stat(ref) is None
            else:
                assert transport.get_bytes(ref) == b"new-%d-%d" % (round_, winner)

    def test_concurrent_set_if_equals_has_one_winner_per_round(self, transport: Transport) -> None:
        ref = "refs/contended"
        current: bytes | None = None
        for round_ in range(8):
            results = _run_together(
                6,
                lambda i, old=current, r=round_: transport.set_if_equals(
                    ref, old, b"%d-%d" % (r, i)
                ),
            )
            assert results.count(True) == 1, results
            current = b"%d-%d" % (round_, results.index(True))
            assert transport.get_bytes(ref) == current

    def test_invalid_names_are_refused(self, transport: Transport, tmp_path: Path) -> None:
        src = tmp_path / "f"
        src.write_bytes(b"x")
        for bad in BAD_NAMES:
            calls = [
                lambda b=bad: transport.put_bytes(b, b"x"),
                lambda b=bad: transport.put_file(b, src),
                lambda b=bad: transport.add_if_new(b, b"x"),
                lambda b=bad: transport.get_bytes(b),
                lambda b=bad: transport.get_file(b, tmp_path / "out"),
                lambda b=bad: transport.stat(b),
                lambda b=bad: transport.delete(b),
                lambda b=bad: transport.set_if_equals(b, None, b"x"),
                lambda b=bad: transport.delete_if_equals(b, b"x"),
            ]
            for call in calls:
                with pytest.raises(InvalidRemoteName) as info:
                    call()
                assert isinstance(info.value, ValueError), bad
            if bad and not bad.endswith("/"):
                with pytest.raises(InvalidRemoteName):
                    list(transport.list(bad))
        assert not (tmp_path / "out").exists()
        assert list(transport.list()) == []


# -- names and URLs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "good", ["a", "objects/ab/" + "c" * 62, "refs/evals/mod.f/key", "x.y-z_1", "a/b.lockx"]
)
def test_valid_names(good: str) -> None:
    assert validate_name(good) == good


def test_open_transport_directory_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = open_transport(str(tmp_path / "r"))
    assert isinstance(t, DirectoryTransport) and t.root == tmp_path / "r"
    assert t.url == (tmp_path / "r").as_uri()
    spaced = tmp_path / "with space"
    t2 = open_transport(spaced.as_uri())
    assert isinstance(t2, DirectoryTransport) and t2.root == spaced
    assert open_transport(f"file://localhost{tmp_path}").root == tmp_path  # type: ignore[attr-defined]
    monkeypatch.chdir(tmp_path)
    assert open_transport("rel/dir").root == tmp_path / "rel" / "dir"  # type: ignore[attr-defined]
    # A URL round-trips through its own .url.
    t2.put_bytes("a", b"1")
    assert open_transport(t2.url).get_bytes("a") == b"1"


@pytest.mark.parametrize(
    "url, message",
    [
        ("", "empty remote URL"),
        ("gs://bucket/x", "unsupported remote URL"),
        ("http://example.com/x", "unsupported remote URL"),
        ("s3://", "names no bucket"),
        ("file://otherhost/x", "mount the share"),
        ("s3://bucket/x?endpoint=y", "query"),
    ],
)
def test_open_transport_refuses(url: str, message: str) -> None:
    with pytest.raises(RemoteError, match=message):
        open_transport(url)


def test_memory_urls_share_by_name() -> None:
    a = open_transport("memory://test-share")
    a.put_bytes("k", b"v")
    assert open_transport("memory://test-share").get_bytes("k") == b"v"
    assert open_transport("memory://test-other").stat("k") is None


# -- directory transport -------------------------------------------------------------


def _hidden_files(root: Path) -> list[str]:
    return [
        os.path.join(d, f)
        for d, _, files in os.walk(root)
        for f in files
        if f.startswith(".") or ".lock" in f
    ]


def test_directory_readers_never_see_partial_content(tmp_path: Path) -> None:
    t = DirectoryTransport(tmp_path / "remote")
    a, b = b"a" * (3 * MiB), b"b" * (5 * MiB)
    fa, fb = tmp_path / "a", tmp_path / "b"
    fa.write_bytes(a)
    fb.write_bytes(b)
    t.put_bytes("ref", a)
    stop = time.monotonic() + 1.5
    seen: set[int] = set()
    bad: list[int] = []

    def write() -> None:
        i = 0
        while time.monotonic() < stop:
            if i % 2:
                t.put_bytes("ref", b if i % 4 == 1 else a)
            else:
                t.put_file("ref", fb if i % 4 == 0 else fa)
            i += 1

    def read() -> None:
        while time.monotonic() < stop:
            data = t.get_bytes("ref")
            seen.add(len(data))
            if data not in (a, b):
                bad.append(len(data))

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad, f"partial reads of sizes {bad[:5]}"
    assert seen == {len(a), len(b)}
    assert _hidden_files(tmp_path / "remote") == []


_CAS_WORKER = textwrap.dedent(
    """
    import sys
    from memostore.transport import DirectoryTransport

    t = DirectoryTransport(sys.argv[1])
    done = 0
    while done < int(sys.argv[2]):
        try:
            old = t.get_bytes("refs/counter")
        except KeyError:
            old = None
        value = int(old) if old is not None else 0
        if t.set_if_equals("refs/counter", old, b"%d" % (value + 1)):
            done += 1
    """
)


def test_directory_cas_from_several_processes_loses_no_update(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    procs, each = 4, 100
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    running = [
        subprocess.Popen([sys.executable, "-c", _CAS_WORKER, str(root), str(each)], env=env)
        for _ in range(procs)
    ]
    for p in running:
        assert p.wait(timeout=60) == 0
    t = DirectoryTransport(root)
    assert t.get_bytes("refs/counter") == b"%d" % (procs * each)
    assert _hidden_files(root) == []


def test_directory_breaks_a_lock_left_by_a_dead_process(tmp_path: Path) -> None:
    import json
    import socket

    t = DirectoryTransport(tmp_path / "remote")
    t.put_bytes("refs/x", b"old")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / "remote" / "refs" / "x.lock"
    holder = {"pid": dead.pid, "host": socket.gethostname(), "time": time.time()}
    lock.write_text(json.dumps(holder) + "\n")
    assert t.set_if_equals("refs/x", b"old", b"new") is True
    assert t.get_bytes("refs/x") == b"new"
    assert not lock.exists()


def test_directory_live_lock_times_out_with_a_fix(tmp_path: Path) -> None:
    import json

    t = DirectoryTransport(tmp_path / "remote", lock_timeout=0.3)
    t.put_bytes("refs/x", b"old")
    lock = tmp_path / "remote" / "refs" / "x.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "time": time.time()}) + "\n")
    start = time.monotonic()
    with pytest.raises(RemoteError, match="remove the lock file"):
        t.set_if_equals("refs/x", b"old", b"new")
    assert time.monotonic() - start < 5
    assert t.get_bytes("refs/x") == b"old"


def test_directory_list_skips_internal_files(tmp_path: Path) -> None:
    t = DirectoryTransport(tmp_path)
    t.put_bytes("refs/a", b"1")
    (tmp_path / "refs" / "a.lock").write_bytes(b"")
    (tmp_path / "refs" / ".a.0123.tmp").write_bytes(b"")
    (tmp_path / "refs" / "a.lock.stale-0123").write_bytes(b"")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "f").write_bytes(b"")
    assert list(t.list()) == ["refs/a"]


def test_directory_without_create_refuses_a_missing_root(tmp_path: Path) -> None:
    t = DirectoryTransport(tmp_path / "not-mounted", create=False)
    with pytest.raises(RemoteUnreachable, match="mount it or create it"):
        t.put_bytes("a", b"x")
    with pytest.raises(RemoteUnreachable):
        list(t.list())
    assert not (tmp_path / "not-mounted").exists()
    assert isinstance(RemoteUnreachable("x"), ConnectionError)


def test_directory_add_if_new_does_not_touch_an_existing_file(tmp_path: Path) -> None:
    t = DirectoryTransport(tmp_path)
    t.add_if_new("objects/ab/cd", b"first")
    before = os.stat(tmp_path / "objects" / "ab" / "cd")
    assert t.add_if_new("objects/ab/cd", b"first") is False
    after = os.stat(tmp_path / "objects" / "ab" / "cd")
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


# -- S3 transport --------------------------------------------------------------------


def test_s3_unreachable_endpoint_fails_fast() -> None:
    pytest.importorskip("boto3")
    from memostore.transport import S3Transport

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    t = S3Transport(
        "bucket",
        "p",
        endpoint_url=endpoint,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
    )
    for call in (
        lambda: t.get_bytes("a"),
        lambda: t.put_bytes("a", b"x"),
        lambda: t.stat("a"),
        lambda: list(t.list()),
        lambda: t.set_if_equals("a", None, b"x"),
    ):
        start = time.monotonic()
        with pytest.raises(RemoteUnreachable, match="AWS_ENDPOINT_URL") as info:
            call()
        assert time.monotonic() - start < 10
        assert isinstance(info.value, ConnectionError)
        assert endpoint in str(info.value)


def test_s3_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from memostore.transport import S3Transport

    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(RemoteError, match=r"pip install '\.\[s3\]'"):
        S3Transport("bucket")


@pytest.mark.s3
def test_s3_endpoint_comes_from_the_environment(s3_bucket: str, s3_server: str) -> None:
    t = open_transport(s3_bucket)  # the fixture set AWS_ENDPOINT_URL
    assert t.endpoint_url == s3_server  # type: ignore[attr-defined]
    assert t.url == s3_bucket
    t.put_bytes("a", b"1")
    assert t.get_bytes("a") == b"1"


@pytest.mark.s3
def test_s3_prefixes_are_separate(s3_bucket: str) -> None:
    bucket = s3_bucket.split("/")[2]
    one, two = open_transport(f"s3://{bucket}/one"), open_transport(f"s3://{bucket}/two")
    whole = open_transport(f"s3://{bucket}")
    one.put_bytes("refs/a", b"1")
    assert two.stat("refs/a") is None
    assert list(two.list()) == []
    assert list(whole.list()) == ["one/refs/a"]


@pytest.mark.s3
def test_s3_list_skips_keys_no_transport_writes(s3_bucket: str) -> None:
    t = open_transport(s3_bucket)
    client = t._client  # type: ignore[attr-defined]
    for key in ("store/folder/", "store/a//b", "store/../x", "store/ok"):
        client.put_object(Bucket=t.bucket, Key=key, Body=b"")  # type: ignore[attr-defined]
    assert list(t.list()) == ["ok"]


@pytest.mark.s3
def test_s3_missing_bucket_names_the_fix(s3_server: str) -> None:
    t = open_transport("s3://no-such-bucket-here/p", endpoint_url=s3_server)
    with pytest.raises(RemoteError, match="does not exist"):
        t.put_bytes("a", b"x")


@pytest.mark.s3
def test_s3_multipart_add_is_conditional_at_completion(s3_bucket: str, tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    t = open_transport(s3_bucket, multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    src = tmp_path / "big"
    src.write_bytes(_payload(11 * MiB))
    t.put_bytes("objects/ab/cd", b"already here")
    # Past the HEAD check (as when a racer lands first): the completion itself refuses.
    with pytest.raises(ClientError) as info:
        t._upload_if_absent("store/objects/ab/cd", src)  # type: ignore[attr-defined]
    assert info.value.response["Error"]["Code"] in ("PreconditionFailed", "412")
    assert t.get_bytes("objects/ab/cd") == b"already here"
    uploads = t._client.list_multipart_uploads(Bucket=t.bucket)  # type: ignore[attr-defined]
    assert not uploads.get("Uploads")  # the failed upload was aborted


@pytest.mark.s3
def test_s3_without_conditional_writes(s3_bucket: str) -> None:
    t = open_transport(s3_bucket, conditional_writes=False)
    assert t.add_if_new("objects/ab/cd", b"1") is True
    assert t.add_if_new("objects/ab/cd", b"2") is False
    assert t.set_if_equals("refs/r", None, b"a") is True
    assert t.set_if_equals("refs/r", b"b", b"c") is False
    assert t.set_if_equals("refs/r", b"a", b"c") is True
    assert t.get_bytes("refs/r") == b"c"
    assert t.delete_if_equals("refs/r", b"a") is False
    assert t.delete_if_equals("refs/r", b"c") is True
    assert t.stat("refs/r") is None


def test_directory_links_immutable_files_on_the_same_file_system(tmp_path: Path) -> None:
    src = tmp_path / "object"
    src.write_bytes(b"content")
    linking = DirectoryTransport(tmp_path / "linked")
    assert linking.add_if_new("objects/ab/cd", src, link=True) is True
    assert os.path.samefile(src, tmp_path / "linked" / "objects" / "ab" / "cd")
    assert linking.add_if_new("objects/ab/cd", src, link=True) is False
    # Without link=True (a file that may change), or with hardlinks off: a copy.
    assert linking.add_if_new("objects/ab/ef", src) is True
    copying = DirectoryTransport(tmp_path / "copied", hardlinks=False)
    assert copying.add_if_new("objects/ab/cd", src, link=True) is True
    for copy in (tmp_path / "linked/objects/ab/ef", tmp_path / "copied/objects/ab/cd"):
        assert not os.path.samefile(src, copy) and copy.read_bytes() == b"content"


def test_directory_copies_where_it_cannot_link(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs a second file system (/dev/shm) to link across")
    src = tmp_path / "object"
    src.write_bytes(b"x" * 100_000)
    root = Path(tempfile.mkdtemp(dir=shm))
    try:
        t = DirectoryTransport(root)
        assert t.add_if_new("objects/ab/cd", src, link=True) is True  # EXDEV: copied
        copy = root / "objects" / "ab" / "cd"
        assert copy.read_bytes() == src.read_bytes() and not os.path.samefile(src, copy)
    finally:
        shutil.rmtree(root)
