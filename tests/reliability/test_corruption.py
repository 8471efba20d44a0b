"""Corruption: damage a random object or ref file; it is found, and only its call pays.

Each fault flips a byte (all its bits), truncates, or deletes one random file
of a store holding twenty evaluations: an object (evaluation record, result
document or blob, arguments document or blob, code document) or a ref. Then:

* fsck reports it (naming the damaged object or ref);
* reading it through the store detects it (a corrupt object is moved to
  quarantine, as every reader does);
* every call returns the right value: the calls whose stored result depended on
  the damage warn and recompute, the ones whose arguments or code document was
  damaged write it back on their hit, and every other call hits without a word
  and keeps its evaluation;
* afterwards fsck is clean again.

A deleted ref is the one fault fsck cannot see: a store where a ref is missing
is a store where that call was never made. Its call is a plain miss and
recomputes. The figure counts those faults apart.

Count: ``MEMOSTORE_RELIABILITY_FAULTS`` (default 200).
"""

from __future__ import annotations

import os
import random
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memostore import MemostoreWarning, Store, ignore_global, memo
from memostore.errors import MemostoreError
from memostore.odb.objects import Doc, is_doc_bytes
from memostore.records.evaluation import eval_ref_name

from .faultkit import cli, cli_works, env_int, figure, fsck_problems, gc_store, seeded_rng

KEYS = 20
TABLES = [np.arange(500 * (i + 1), dtype=np.int64) for i in range(3)]


class Runs:
    """Which keys ran their body; an ignored global, so that it stays out of the keys."""

    def __init__(self) -> None:
        self.keys: list[int] = []


RUNS = ignore_global(Runs())


def expected(key: int) -> dict[str, Any]:
    return {
        "key": key,
        "array": np.arange(100 + key, dtype=np.float64) * key,
        "parts": [{"i": i, "text": "x" * i} for i in range(key % 4)],
    }


def compute(key: int, table: np.ndarray) -> dict[str, Any]:
    RUNS.keys.append(key)
    return expected(key)


def _same(value: dict[str, Any], key: int) -> bool:
    want = expected(key)
    return (
        value["key"] == key
        and value["parts"] == want["parts"]
        and np.array_equal(value["array"], want["array"])
    )


class Harness:
    """A store of KEYS evaluations, and what each of them reaches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fn = memo(store=Store(root))(compute)
        self.refs = {
            key: eval_ref_name(self.fn.symbol, self.fn.key(key, TABLES[key % 3]))
            for key in range(KEYS)
        }
        for key in range(KEYS):
            self.fn(key, TABLES[key % 3])

    def fresh(self) -> Any:
        """The function bound to a freshly opened store: no cached document, no cached id."""
        return memo(store=Store(self.root))(compute)

    def reach(self) -> dict[int, set[str]]:
        """key -> the ids its ref reaches (its evaluation and everything linked below)."""
        store = Store(self.root)
        out = {}
        for key, name in self.refs.items():
            top = store.refs.read(name)
            seen: set[str] = set()
            stack = [top] if top else []
            while stack:
                object_id = stack.pop()
                if object_id in seen:
                    continue
                seen.add(object_id)
                data = store.objects.get_bytes(object_id)
                if is_doc_bytes(data):
                    links = Doc.parse(data, object_id).links
                    stack.extend(links.docs)
                    seen.update(links.blobs)
            out[key] = seen
        return out

    def files(self) -> tuple[list[Path], list[Path]]:
        objects = sorted(p for p in (self.root / "objects").rglob("*") if p.is_file())
        refs = [self.root / "refs" / name for name in self.refs.values()]
        return objects, refs


def _damage(path: Path, fault: str, rng: random.Random, is_ref: bool) -> None:
    data = path.read_bytes()
    os.chmod(path, 0o644)
    if fault == "flip":
        at = rng.randrange(len(data))
        path.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
    elif fault == "truncate":
        # A ref's trailing newline is not content: cut at least one digit of its id.
        keep = rng.randrange(len(data.rstrip(b"\n")) if is_ref else len(data))
        path.write_bytes(data[:keep])
    else:
        path.unlink()


def _read_detects(root: Path, path: Path, is_ref: bool, ref_name: str) -> bool:
    """Read the damaged file through a fresh store, as any reader would: is it noticed?"""
    store = Store(root)
    if is_ref:
        try:
            target = store.refs.read(ref_name)
        except MemostoreError:
            return True
        return target is None or not store.objects.contains(target)
    object_id = path.parent.name + path.name
    try:
        store.objects.get_bytes(object_id)
    except MemostoreError:
        return True
    return False


@pytest.mark.slow
def test_random_faults_are_detected_and_repaired(tmp_path: Path) -> None:
    rng = seeded_rng("corruption")
    faults = env_int("MEMOSTORE_RELIABILITY_FAULTS", 200)
    harness = Harness(tmp_path / "store")
    tally: Counter[str] = Counter()
    use_cli = cli_works()
    for n in range(faults):
        reach = harness.reach()
        objects, refs = harness.files()
        before = {key: Store(harness.root).refs.read(name) for key, name in harness.refs.items()}
        is_ref = rng.random() < 0.25
        path = rng.choice(refs if is_ref else objects)
        fault = rng.choice(("flip", "truncate", "delete"))
        target = path.parent.name + path.name
        if is_ref:
            key_of_ref = next(k for k, n in harness.refs.items() if path.match(f"*/refs/{n}"))
            affected = {key_of_ref}
            mention = f"{path.parent.name}/{path.name}"
        else:
            affected = {k for k, ids in reach.items() if target in ids}
            mention = target
            assert affected, f"object {target} is garbage: nothing needs it"
        _damage(path, fault, rng, is_ref)
        kind = f"{'ref' if is_ref else 'object'} {fault}"
        tally[kind] += 1

        problems = fsck_problems(harness.root)
        if is_ref and fault == "delete":
            tally["deleted refs (invisible to fsck)"] += 1
        else:
            assert any(mention in p for p in problems), f"fsck missed {kind} of {mention}"
            tally["found by fsck"] += 1
            if use_cli and n % 20 == 0:
                # Now and then the command itself: exit status 1, the damage named.
                proc = cli(harness.root, "fsck")
                assert proc.returncode == 1 and mention in proc.stdout + proc.stderr, proc.stdout
                tally["memostore fsck runs"] += 1
        ref_name = harness.refs[key_of_ref] if is_ref else ""
        assert _read_detects(harness.root, path, is_ref, ref_name), f"a read missed {kind}"
        tally["found on read"] += 1

        fn = harness.fresh()
        recomputed = False
        for key in range(KEYS):
            RUNS.keys.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = fn(key, TABLES[key % 3])
            assert _same(value, key), f"wrong value for key {key} after {kind}"
            noticed = [w for w in caught if issubclass(w.category, MemostoreWarning)]
            if key not in affected:
                assert not RUNS.keys and not noticed, f"key {key} was affected by {kind}"
                assert Store(harness.root).refs.read(harness.refs[key]) == before[key]
            recomputed = recomputed or bool(RUNS.keys)
        tally["repaired by recomputing" if recomputed else "repaired on a hit"] += 1
        problems = fsck_problems(harness.root)
        assert not problems, f"not repaired after {kind} of {mention}: {problems[:3]}"
        # Recomputing left the damaged evaluation's record unreferenced: free it, so
        # that every object the next fault may hit is one some call needs.
        gc_store(harness.root, grace_s=0.0)
    detected_fsck = tally["found by fsck"]
    invisible = tally["deleted refs (invisible to fsck)"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(tally.items()) if k.startswith(("obj", "ref")))
    figure(
        f"corruption: {faults} random faults ({kinds}): "
        f"{tally['found on read']}/{faults} detected on read, {detected_fsck}/{faults - invisible} "
        f"detected by fsck ({tally['memostore fsck runs']} of them checked with `memostore fsck` "
        f"too; plus {invisible} deleted refs, which no check can tell from calls "
        f"never made: each was a plain miss); {tally['repaired by recomputing']} repaired by "
        f"recomputing the affected call, {tally['repaired on a hit']} (damaged arguments or "
        f"code documents) written back by the next hit; every unaffected call hit, silent and "
        f"untouched; fsck clean after each repair"
    )
