"""``@memo(files=...)``: path arguments keyed by the content of the files they name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.main import cli

from memostore import MemostoreError, memo

SCRIPT = """
import sys
from memostore import memo

@memo(files=("path",))
def size(path, scale=1):
    print("RUN", flush=True)
    with open(path, "rb") as f:
        return len(f.read()) * scale

print("RESULT", size(sys.argv[1]))
"""


def _tree(root: Path) -> Path:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    (root / "sub" / "deeper" / "c.txt").write_text("gamma")
    return root


def test_second_process_hits_and_an_edit_misses(tmp_path: Path, store_dir: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 1000)
    script = write_script(tmp_path, "size.py", SCRIPT)

    first = run_script(script, str(data))
    second = run_script(script, str(data))
    assert "RUN" in first.stdout and "RESULT 1000" in first.stdout
    assert "RUN" not in second.stdout and "RESULT 1000" in second.stdout

    data.write_bytes(b"y" * 1000)  # same size, same name, new content
    third = run_script(script, str(data))
    assert "RUN" in third.stdout


def test_same_bytes_under_another_path_hit(tmp_path: Path, store_dir: Path) -> None:
    calls: list[str] = []

    @memo(files=("path",))
    def read(path: str | os.PathLike[str]) -> bytes:
        calls.append(os.fspath(path))
        return Path(path).read_bytes()

    one, two = tmp_path / "one.bin", tmp_path / "elsewhere" / "two.bin"
    two.parent.mkdir()
    one.write_bytes(b"payload")
    two.write_bytes(b"payload")
    assert read(str(one)) == b"payload"
    assert read(two) == b"payload"  # a Path to the same bytes: a hit
    assert calls == [str(one)]
    (tmp_path / "three.bin").write_bytes(b"other")
    assert read(tmp_path / "three.bin") == b"other"
    assert len(calls) == 2


def test_the_body_gets_the_argument_it_was_given(tmp_path: Path, store_dir: Path) -> None:
    seen: list[object] = []

    @memo(files=("paths",))
    def first(paths: list[Path]) -> int:
        seen.append(paths)
        return len(paths)

    given = [tmp_path / "a", tmp_path / "b"]
    for p in given:
        p.write_text(p.name)
    assert first(given) == 2
    assert seen[0] is given


def test_a_list_is_keyed_by_each_content_in_order(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("paths",))
    def join(paths: list[str] | tuple[str, ...] | None) -> str:
        return "".join(Path(p).read_text() for p in paths or ())

    a, b, c = (tmp_path / n for n in "abc")
    a.write_text("1")
    b.write_text("2")
    c.write_text("1")
    assert join.key([str(a), str(b)]) == join.key([str(c), str(b)])
    assert join.key([str(a), str(b)]) != join.key([str(b), str(a)])
    assert join.key([str(a), str(b)]) != join.key((str(a), str(b)))  # a list is not a tuple
    assert join(None) == ""


def test_a_changed_file_misses_even_with_the_same_size_and_mtime(
    tmp_path: Path, store_dir: Path
) -> None:
    @memo(files=("path",))
    def read(path: Path) -> bytes:
        return path.read_bytes()

    data = tmp_path / "data.bin"
    data.write_bytes(b"a" * 4096)
    old = os.stat(data)
    assert read(data) == b"a" * 4096
    data.write_bytes(b"b" * 4096)
    os.utime(data, ns=(old.st_atime_ns, old.st_mtime_ns))  # hide the write from mtime
    assert read(data) == b"b" * 4096


def _bytes_read() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_a_recently_modified_file_is_rehashed_until_its_timestamps_are_old(
    tmp_path: Path, store_dir: Path
) -> None:
    """git's racy rule: a stat taken within the timestamp tick of a write proves nothing."""
    from memostore.values.file_digests import RACY_WINDOW_NS

    @memo(files=("path",))
    def read(path: Path) -> int:
        return len(path.read_bytes())

    size = 256 << 10
    data = tmp_path / "fresh.bin"
    data.write_bytes(os.urandom(size))

    def bytes_read_by_key() -> int:
        before = _bytes_read()
        read.key(data)
        return _bytes_read() - before

    # Just written: its digest is not trusted, so every key reads the file again.
    assert bytes_read_by_key() >= size
    assert bytes_read_by_key() >= size
    time.sleep(RACY_WINDOW_NS / 1e9 + 0.2)
    assert bytes_read_by_key() >= size  # hashed once more, now old enough to keep
    assert bytes_read_by_key() < size  # the stat proves it unchanged: not read
    data.write_bytes(os.urandom(size))  # a new write makes it fresh again
    assert bytes_read_by_key() >= size


def test_directory_trees(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("root",))
    def count(root: str) -> int:
        return sum(len(files) for _, _, files in os.walk(root))

    tree = _tree(tmp_path / "tree")
    key = count.key(str(tree))
    copy = tmp_path / "copy_with_another_name"
    shutil.copytree(tree, copy)
    assert count.key(str(copy)) == key  # names below the root count, the root's does not

    (copy / "sub" / "deeper" / "c.txt").write_text("GAMMA")
    assert count.key(str(copy)) != key
    (copy / "sub" / "deeper" / "c.txt").write_text("gamma")
    assert count.key(str(copy)) == key

    (copy / "empty").mkdir()
    assert count.key(str(copy)) != key  # empty directories are part of the tree
    (copy / "empty").rmdir()
    (copy / "a.txt").rename(copy / "a2.txt")
    assert count.key(str(copy)) != key
    (copy / "a2.txt").rename(copy / "a.txt")
    (copy / "a.txt").chmod(0o755)
    assert count.key(str(copy)) != key  # the executable bit is content too
    (copy / "a.txt").chmod(0o644)
    assert count.key(str(copy)) == key
    assert count.key(str(tree / "a.txt")) != key  # a file is not a directory


def test_symbolic_links_are_followed(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("root",))
    def count(root: str) -> int:
        return 0

    plain = _tree(tmp_path / "plain")
    linked = tmp_path / "linked"
    shutil.copytree(plain, linked)
    elsewhere = tmp_path / "store_of_files"
    elsewhere.mkdir()
    (linked / "a.txt").rename(elsewhere / "a.txt")
    (linked / "a.txt").symlink_to(elsewhere / "a.txt")
    shutil.move(str(linked / "sub"), str(elsewhere / "sub"))
    (linked / "sub").symlink_to(elsewhere / "sub", target_is_directory=True)
    assert count.key(str(linked)) == count.key(str(plain))
    link_to_root = tmp_path / "link_to_plain"
    link_to_root.symlink_to(plain, target_is_directory=True)
    assert count.key(str(link_to_root)) == count.key(str(plain))


def test_what_cannot_be_keyed_is_refused_with_the_fix(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("root",))
    def count(root: str) -> int:
        return 0

    dangling = _tree(tmp_path / "dangling")
    (dangling / "gone").symlink_to(tmp_path / "nothing-here")
    with pytest.raises(MemostoreError, match=r"'root'.*symbolic link to nothing.*remove it"):
        count.key(str(dangling))

    loop = _tree(tmp_path / "loop")
    (loop / "sub" / "up").symlink_to(loop, target_is_directory=True)
    with pytest.raises(MemostoreError, match=r"links back to a directory above it"):
        count.key(str(loop))

    fifo_tree = _tree(tmp_path / "fifo")
    os.mkfifo(fifo_tree / "pipe")
    with pytest.raises(MemostoreError, match=r"pipe.*only regular files and directories"):
        count.key(str(fifo_tree))
    with pytest.raises(MemostoreError, match=r"named pipe"):
        count.key(str(fifo_tree / "pipe"))


def test_a_missing_path_names_the_parameter_and_the_path(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("path",))
    def read(path: str) -> bytes:
        raise AssertionError("not called")

    missing = str(tmp_path / "no-such-file")
    with pytest.raises(MemostoreError, match=r"'path'.*no-such-file.*does not exist") as info:
        read(missing)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(MemostoreError, match=r"'path'.*passed a int.*str or os.PathLike"):
        read(3)


def test_declared_names_must_be_parameters() -> None:
    def f(path: str, n: int) -> None: ...

    with pytest.raises(MemostoreError, match=r"\['pth'\].*does not take.*\['path', 'n'\]"):
        memo(files=("pth",))(f)
    with pytest.raises(MemostoreError, match=r"both files= and ignore="):
        memo(files=("path",), ignore=("path",))(f)
    assert memo(files="path")(f).key is not None  # one name as a plain string


def test_show_and_log_still_show_the_path(tmp_path: Path, store_dir: Path) -> None:
    @memo(files=("path",))
    def read(path: str) -> int:
        return len(Path(path).read_bytes())

    data = tmp_path / "named-data.bin"
    data.write_bytes(b"z" * 2048)
    assert read(str(data)) == 2048
    runner = CliRunner()
    shown = runner.invoke(cli, ["--store", str(store_dir), "show", "read", "--json"])
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.output)
    # Summaries are one line of at most 80 characters: a long path is cut at the end.
    assert repr(str(data)).startswith(record["args_summary"]["path"].rstrip("…"))
    assert record["args"]["path"]["type"] == "file"
    assert record["args"]["path"]["bytes"] == 2048
    listed = runner.invoke(cli, ["--store", str(store_dir), "log", "--json"])
    assert json.loads(listed.output)[0]["args"]["path"] == str(data)


def test_a_tree_keyed_in_a_fresh_process_matches(tmp_path: Path, store_dir: Path) -> None:
    tree = _tree(tmp_path / "tree")
    code = (
        "import sys\nfrom memostore import memo\n"
        "@memo(files=('root',))\ndef f(root):\n    return 0\n"
        "print(f.key(sys.argv[1]))\n"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code, str(tree)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(keys) == 1
