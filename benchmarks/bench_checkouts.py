"""The cost of serving a restored snapshot: copy vs reflink vs link-and-verify.

A restored :class:`memostore.Snapshot` (and each table of a restored Hugging
Face dataset) is served from files under the store's ``checkouts/``. Three
designs keep an edit of those files from reaching the store or the next hit:

- **copy** (what memostore does where blocks cannot be shared): each file is
  copied from its object once (``copy_file_range``), hashed once, and every
  later restore compares the files' stat signatures with the manifest;
- **reflink** (what memostore does where the file system shares blocks:
  Btrfs, XFS, ...): the same, but the copy is a clone, instant and free of
  disk space until either side is written;
- **link-and-verify** (the design not taken): each file is a hard link to its
  object, so the link costs nothing, but an edit of it *is* an edit of the
  stored object: the only defence is hashing every byte on every restore
  (and the stored value is lost when it fails).

Prints, for a snapshot of ``--mib`` MiB laid out as one file and as many small
files, the median seconds of the first restore (laying out) and of a later
one (checking), and the disk space the checkout takes. Run from the
repository root, once per file system to compare::

    python benchmarks/bench_checkouts.py --dir /tmp              # ext4: copy
    python benchmarks/bench_checkouts.py --dir /mnt/xfs          # XFS: reflink

The page cache holds the objects (they were just written): these are warm
figures, the ones of a restore that follows the computation or a pull.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from _common import result  # noqa: E402

from memostore import Store, snapshot  # noqa: E402
from memostore.odb.filecopy import copy_fd  # noqa: E402
from memostore.odb.objects import new_hasher  # noqa: E402
from memostore.values.decoding import Decoder  # noqa: E402
from memostore.values.encoding import Encoder, StoreSink  # noqa: E402

MiB = 1024 * 1024
_CHUNK = 16 * MiB


def make_tree(root: Path, files: int, total: int) -> None:
    root.mkdir(parents=True)
    size = total // files
    block = os.urandom(MiB)
    for i in range(files):
        with open(root / f"part-{i:05d}.bin", "wb") as f:
            f.write(i.to_bytes(8, "little"))
            written = 8
            while written < size:
                n = min(len(block), size - written)
                f.write(block[:n])
                written += n


def timed(setup: Callable[[], object], run: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def used_bytes(path: Path) -> int:
    subprocess.run(["sync"], check=False)
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def hash_file(path: Path) -> str:
    size = path.stat().st_size
    hasher = new_hasher(size)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def reflinks_here(directory: Path) -> bool:
    a, b = directory / ".probe-a", directory / ".probe-b"
    a.write_bytes(b"x" * 4096)
    try:
        with open(a, "rb") as src, open(b, "wb") as dst:
            return copy_fd(src.fileno(), dst.fileno(), 4096) == "reflink"
    finally:
        a.unlink()
        b.unlink(missing_ok=True)


def bench_layout(work: Path, label: str, files: int, total: int, runs: int) -> None:
    src = work / f"src-{files}"
    make_tree(src, files, total)
    store = Store(work / f"store-{files}")
    value = Encoder(StoreSink(store.objects), cache=None, lineage=None).encode_value(snapshot(src))
    checkouts = work / f"store-{files}" / "checkouts"
    mode = "reflink" if reflinks_here(work) else "copy"

    def clear() -> None:
        shutil.rmtree(checkouts, ignore_errors=True)

    def restore() -> None:
        Decoder(store.objects).decode_value(value)

    first = timed(clear, restore, runs)
    clear()
    before = used_bytes(work)
    restore()
    space = used_bytes(work) - before
    later = timed(lambda: None, restore, runs * 3)

    # The design not taken: hard links to the objects, every byte hashed on each restore.
    objects = [store.objects.blob_path(e.blob) for e in snapshot(src).entries]
    linked = work / f"linked-{files}"

    def link_clear() -> None:
        shutil.rmtree(linked, ignore_errors=True)
        linked.mkdir()

    def link_first() -> None:
        for i, obj in enumerate(objects):
            os.link(obj, linked / f"{i}")
            hash_file(linked / f"{i}")

    def link_later() -> None:
        for i in range(len(objects)):
            hash_file(linked / f"{i}")

    link_one = timed(link_clear, link_first, runs)
    link_each = timed(lambda: None, link_later, runs * 3)

    print(f"{label}, {total / MiB:.0f} MiB in {files} file(s), on {work} ({mode}):")
    print(f"  {mode:<16} first restore {first:7.3f} s   later restores {later * 1e3:8.2f} ms"
          f"   checkout takes {space / MiB:7.1f} MiB")  # fmt: skip
    print(f"  link-and-verify  first restore {link_one:7.3f} s   later restores "
          f"{link_each * 1e3:8.2f} ms   checkout takes     0.0 MiB")  # fmt: skip
    slug = f"checkouts.{mode}_{files}_files"
    result(
        f"{slug}.first",
        f"first restore of a {total / MiB:.0f} MiB snapshot ({files} files, {mode})",
        ours=first,
        baseline=link_one,
        baseline_name="hard link + hash",
        kind="info",
        note="lays the files out: copy (or clone), hash, fsync",
    )
    result(
        f"{slug}.later",
        f"later restore of a {total / MiB:.0f} MiB snapshot ({files} files, {mode})",
        ours=later * 1e3,
        baseline=link_each * 1e3,
        baseline_name="hash every byte",
        unit="ms",
        kind="info",
        note="stat of every file against the manifest",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--small-files", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-checkouts-", dir=args.dir))
    try:
        total = args.mib * MiB
        bench_layout(work, "one file", 1, total, args.runs)
        bench_layout(work, "many files", args.small_files, total, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
