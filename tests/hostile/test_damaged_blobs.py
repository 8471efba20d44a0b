"""One flipped byte in a mapped tensor blob never reaches a hit's return value.

A large tensor is restored by memory-mapping its blob: a loose 12 MB file, or a
4 MiB member of a pack. Whatever the store's history — written by this process
or another, copied with ``cp -r`` or ``cp -a``, edited in place with its
timestamps put back (``touch -r``), or replaced by another file under the same
name — a byte flipped in the tensor's data makes the call recompute: it returns
the right values with exactly one warning, moves the damaged file to
``quarantine/`` and leaves the store repaired (the next call hits, silently).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import run_script, write_script  # noqa: E402

from memostore import Store, memo  # noqa: E402
from memostore.odb.verified import fine_grained_ctimes, hashed_bytes  # noqa: E402

LAYOUTS = ("loose", "packed")


def fresh_writes_recorded(root: Path) -> bool:
    """Whether what the store wrote a moment ago is in its record (fine-grained ctimes;
    elsewhere a stamp under two seconds old is not trusted, so it is hashed again)."""
    return fine_grained_ctimes(root / "tmp")


def reference(layout: str) -> dict[str, torch.Tensor]:
    """The value the memoised function returns: one 12 MB tensor, or three of 4 MiB."""
    gen = torch.Generator().manual_seed(0)
    if layout == "loose":
        return {"w": torch.randn(3_000_000, generator=gen)}  # over 8 MiB: a loose blob
    return {f"w{i}": torch.randn(1 << 20, generator=gen) for i in range(3)}  # one pack


def target(root: Path, layout: str) -> tuple[Path, int]:
    """The file holding the value's first large tensor, and a byte inside its data."""
    objects = Store(root).objects
    sizes = {i: objects.size_of(i) for i in objects.iter_ids()}
    if layout == "loose":
        (blob,) = [i for i, n in sizes.items() if n > 8 << 20]
        assert objects.pack_location(blob) is None
        return objects.path_of(blob), sizes[blob] // 2
    packed = sorted(i for i, n in sizes.items() if 4 << 20 <= n <= 8 << 20)
    assert len(packed) == 3
    loc = objects.pack_location(packed[0])
    assert loc is not None
    return Path(loc.pack.path), loc.offset + loc.length // 2


def flip(path: Path, at: int) -> None:
    """Flip every bit of the byte at *at*, in place (same inode), as an editor would."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def flip_keeping_times(path: Path, at: int) -> None:
    """Flip in place, then put the file's times back (``touch -r``): only ctime moves."""
    st = os.stat(path)
    flip(path, at)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_ino == st.st_ino


def replace_with_damaged_copy(path: Path, at: int) -> None:
    """Put another file, one byte different, same mode and times, under the same name."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    other = path.with_name(path.name + ".new")
    other.write_bytes(bytes(data))
    os.chmod(other, 0o444)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)
    assert os.stat(path).st_ino != st.st_ino


def copy_store(how: str) -> Callable[[Path, Path], None]:
    def copy(src: Path, dst: Path) -> None:
        subprocess.run(["cp", how, str(src), str(dst)], check=True)

    return copy


def call_recording(fn: Callable[[], dict[str, torch.Tensor]]) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn()
    return value, [str(w.message) for w in caught]


def same(value: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    equal = value.keys() == expected.keys()
    return equal and all(torch.equal(value[k], expected[k]) for k in expected)


CASES = {
    # name: (copy the store first with, damage)
    "written-here": (None, flip),
    "cp-r": (copy_store("-r"), flip_keeping_times),
    "cp-a": (copy_store("-a"), flip_keeping_times),
    "edited-in-place": (None, flip_keeping_times),
    "replaced": (None, replace_with_damaged_copy),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_flipped_byte_makes_the_hit_recompute(
    case: str, layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, damage = CASES[case]
    runs: list[str] = []

    @memo
    def weights(layout: str) -> dict[str, torch.Tensor]:
        runs.append(layout)
        return reference(layout)

    expected = reference(layout)
    written = tmp_path / "store"
    monkeypatch.setenv("MEMOSTORE_DIR", str(written))
    weights(layout)
    assert same(weights(layout), expected) and len(runs) == 1, "a hit before any damage"
    root = written
    if copy is not None:
        root = tmp_path / "copy"
        copy(written, root)
        monkeypatch.setenv("MEMOSTORE_DIR", str(root))
    path, at = target(root, layout)
    damage(path, at)

    value, messages = call_recording(lambda: weights(layout))
    assert same(value, expected), "wrong values returned"
    assert len(runs) == 2, "the damaged hit recomputed"
    assert len(messages) == 1 and "corrupt" in messages[0] and "recomputing" in messages[0]
    assert list((root / "quarantine").iterdir()), "the damaged file is kept aside"

    before = hashed_bytes()
    value, messages = call_recording(lambda: weights(layout))
    assert same(value, expected) and messages == [] and len(runs) == 2, "repaired"
    if fresh_writes_recorded(root):
        assert hashed_bytes() == before, "what the recompute wrote is in the record"


SCRIPT = """\
import sys, warnings
import torch
from memostore import memo
from memostore.odb.verified import hashed_bytes


def reference(layout):
    gen = torch.Generator().manual_seed(0)
    if layout == "loose":
        return {"w": torch.randn(3_000_000, generator=gen)}
    return {f"w{i}": torch.randn(1 << 20, generator=gen) for i in range(3)}


@memo
def weights(layout):
    print("RUN", layout)
    return reference(layout)


for layout in sys.argv[1:]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = hashed_bytes()
        value = weights(layout)
        hashed = hashed_bytes() - before
    expected = reference(layout)
    right = value.keys() == expected.keys()
    right = right and all(torch.equal(value[k], expected[k]) for k in expected)
    print("RESULT", layout, right, len(caught), hashed)
    for w in caught:
        print("WARNING", w.message)
"""


def results(stdout: str) -> dict[str, tuple[bool, bool, int, int]]:
    """layout -> (ran, right values, warnings, bytes hashed) from the script's output."""
    ran = {line.split()[1] for line in stdout.splitlines() if line.startswith("RUN ")}
    out = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            _, layout, right, warned, hashed = line.split()
            out[layout] = (layout in ran, right == "True", int(warned), int(hashed))
    return out


def test_a_store_written_by_another_process(store_dir: Path) -> None:
    script = write_script(store_dir.parent, "weights.py", SCRIPT)
    first = results(run_script(script, *LAYOUTS).stdout)
    assert first == {layout: (True, True, 0, 0) for layout in LAYOUTS}
    clean = results(run_script(script, *LAYOUTS).stdout)
    assert all(found[:3] == (False, True, 0) for found in clean.values()) and len(clean) == 2
    if fresh_writes_recorded(store_dir):
        # The writer's record is on disk: a hit of an unchanged store hashes nothing.
        assert [found[3] for found in clean.values()] == [0, 0]
    for layout in LAYOUTS:
        flip(*target(store_dir, layout))
    damaged = run_script(script, *LAYOUTS)
    found = results(damaged.stdout)
    for layout in LAYOUTS:
        ran, right, warned, _ = found[layout]
        assert right and ran and warned == 1, damaged.stdout
    assert damaged.stdout.count("corrupt") == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_copied_store_is_hashed_once_then_trusted(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    @memo
    def weights(layout: str) -> dict[str, torch.Tensor]:
        runs.append(layout)
        return reference(layout)

    monkeypatch.setenv("MEMOSTORE_DIR", str(tmp_path / "store"))
    weights(layout)
    copied = tmp_path / "copy"
    shutil.copytree(tmp_path / "store", copied)  # the record travels, its stamps do not match
    monkeypatch.setenv("MEMOSTORE_DIR", str(copied))
    mapped = sum(t.nbytes for t in reference(layout).values())
    before = hashed_bytes()
    assert same(weights(layout), reference(layout)) and len(runs) == 1
    hashed = hashed_bytes() - before
    assert mapped <= hashed < mapped + 4096, "every mapped byte proven on first use"
    before = hashed_bytes()
    assert same(weights(layout), reference(layout))
    if fresh_writes_recorded(copied):  # else the copy's new ctimes are too young to trust
        assert hashed_bytes() == before, "then recorded"
