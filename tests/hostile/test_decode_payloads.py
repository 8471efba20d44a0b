"""Code stored by value (pickled) is loaded only from this machine or a trusted remote."""

from __future__ import annotations

import subprocess
import textwrap
import threading

import pytest

from memostore import MemostoreWarning, Store
from memostore.odb.objects import digest_bytes
from memostore.remote import add_remote, pull, push

from .labkit import MEMOSTORE, Lab, code, hostile_pickle, lab, plant, warnings_in

__all__ = ["lab"]  # the fixture, imported

DIGEST = "d" * 64  # whatever the attacker likes: the name resolves to nothing


def _plant_payload(lab: Lab) -> None:
    """A by-value class whose name resolves to nothing; its payload runs a command."""
    lab.run(lab.attacker_store)
    gadget = code("__main__", "build.<locals>.Gadget", digest=DIGEST, byvalue=True)
    plant(
        lab.attacker_store,
        [1, [{"$": "object", "cls": gadget, "args": []}]],
        blobs={"payload": hostile_pickle(lab.marker)},
        payloads={DIGEST: "payload"},
    )
    push(Store(lab.attacker_store), str(lab.remote))


def test_a_payload_pulled_from_an_untrusted_remote_is_never_unpickled(lab: Lab) -> None:
    _plant_payload(lab)
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "remote team" in line and "`memostore remote trust team`" in line


def test_a_payload_auto_fetched_on_a_miss_is_never_unpickled(lab: Lab) -> None:
    _plant_payload(lab)
    add_remote(Store(lab.victim_store), "team", str(lab.remote), auto_fetch=True)
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "`memostore remote trust team`" in line
    # The origin of what was fetched is recorded: a pull would not have changed it.
    assert (lab.victim_store / "origins" / "sources").is_dir()


TEAMMATE = """
import sys

from memostore import memo


def make_point_class():
    class Point:
        def __init__(self, x):
            self.x = x

        def __repr__(self):
            return f"Point({self.x})"

    return Point


Point = make_point_class()


@memo
def compute(n):
    print("COMPUTED")
    return [Point(n), n + 1]


if __name__ == "__main__":
    print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
"""


def _share_a_local_class(lab: Lab) -> None:
    """A teammate computes a result holding a class made inside a function, and pushes it."""
    lab.script.write_text(textwrap.dedent(TEAMMATE))
    first = lab.run(lab.attacker_store)
    assert "COMPUTED" in first.stdout
    push(Store(lab.attacker_store), str(lab.remote))


def test_a_trusted_remote_restores_classes_stored_by_value(lab: Lab) -> None:
    _share_a_local_class(lab)
    added = lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote), "--trusted")
    assert "trusted" in added.stdout
    assert "trusted" in lab.cli(lab.victim_store, "remote", "list").stdout
    lab.cli(lab.victim_store, "pull", "team")
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" not in proc.stdout and "RESULT [Point(3), 4]" in proc.stdout
    assert not warnings_in(proc.stderr)


def test_trust_applies_to_objects_pulled_before_and_can_be_withdrawn(lab: Lab) -> None:
    _share_a_local_class(lab)
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    lab.cli(lab.victim_store, "remote", "trust", "team")
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" not in proc.stdout and "RESULT [Point(3), 4]" in proc.stdout

    lab.cli(lab.victim_store, "remote", "trust", "team", "--off")
    assert "trusted" not in lab.cli(lab.victim_store, "remote", "list").stdout
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" in proc.stdout
    (line,) = warnings_in(proc.stderr)
    assert "make_point_class.<locals>.Point" in line and "memostore remote trust team" in line


def test_objects_pushed_on_from_an_untrusted_remote_keep_their_origin(lab: Lab) -> None:
    """Pulled from A (untrusted), pushed to B: trusting B does not trust what came from A."""
    _plant_payload(lab)
    middle = lab.store("middle-store")
    second_remote = lab.root / "remote-b"
    pull(Store(middle), str(lab.remote))
    push(Store(middle), str(second_remote))
    add_remote(Store(lab.victim_store), "b", str(second_remote), trusted=True)
    pull(Store(lab.victim_store), "b")
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert str(lab.remote) in line and "--trusted" in line  # names A, how to trust it


def test_a_pull_records_origins_before_any_object_arrives(lab: Lab) -> None:
    """A pull that fails half-way and is run again still knows where everything came from."""
    lab.run(lab.attacker_store)
    gadget = code("__main__", "build.<locals>.Gadget", digest=DIGEST, byvalue=True)
    plant(
        lab.attacker_store,
        [{"$": "object", "cls": gadget, "args": []}],
        blobs={"payload": hostile_pickle(lab.marker), "other": b"x" * 1000},
        payloads={DIGEST: "payload"},
    )
    push(Store(lab.attacker_store), str(lab.remote))
    other = lab.remote / "objects" / _id_of(b"x" * 1000)[:2] / _id_of(b"x" * 1000)[2:]
    good = other.read_bytes()
    other.chmod(0o644)
    other.write_bytes(b"y" * 1000)  # damaged: the first pull stores the payload, skips the ref
    with pytest.warns(MemostoreWarning, match="skipped 1 ref"):
        first = pull(Store(lab.victim_store), str(lab.remote))
    assert first.skipped and not first.refs_updated
    assert Store(lab.victim_store).objects.contains(_id_of(hostile_pickle(lab.marker)))
    other.write_bytes(good)
    report = pull(Store(lab.victim_store), str(lab.remote))  # skips what is there already
    assert report.refs_updated
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "memostore remote add NAME" in line and "--trusted" in line


def _id_of(data: bytes) -> str:
    return digest_bytes(data)


def test_concurrent_pulls_record_the_same_origins_without_conflict(lab: Lab) -> None:
    _plant_payload(lab)
    Store(lab.victim_store)  # created first: this test is about the records, not the store
    errors: list[BaseException] = []

    def one_pull() -> None:
        try:
            pull(Store(lab.victim_store), str(lab.remote))
        except BaseException as exc:  # collected: a thread must not swallow a failure
            errors.append(exc)

    threads = [threading.Thread(target=one_pull) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    store = Store(lab.victim_store)
    journals = (lab.victim_store / "origins").glob("*/*.ids")
    recorded = {line for path in journals for line in path.read_text().split()}
    assert recorded == set(store.objects.iter_ids())
    assert not [p for p in (lab.victim_store / "origins").rglob(".*")]  # no temp file left
    lab.victim_meets_attack()


def test_trusting_an_unknown_remote_is_a_one_line_error(lab: Lab) -> None:
    lab.run(lab.victim_store)
    proc = subprocess.run(
        [str(MEMOSTORE), "--store", str(lab.victim_store), "remote", "trust", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "no remote named 'nope'" in proc.stderr and "Traceback" not in proc.stderr


DATASETS = """
import sys

import torch
from torch.utils.data import Dataset, random_split

from memostore import memo


def squares_class():
    class Squares(Dataset):
        def __init__(self, n):
            self.x = torch.arange(n, dtype=torch.float32)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i] ** 2

    return Squares


@memo
def splits(n):
    print("COMPUTED")
    parts = random_split(squares_class()(n), [0.75, 0.25], torch.Generator().manual_seed(0))
    return parts


if __name__ == "__main__":
    train, val = splits(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
    print("RESULT", len(train), len(val), [float(train[i]) for i in range(len(train))])
"""


def test_a_trusted_remote_restores_random_splits_of_a_dynamic_dataset(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(DATASETS))
    first = lab.run(lab.attacker_store)
    assert "COMPUTED" in first.stdout
    push(Store(lab.attacker_store), str(lab.remote))
    add_remote(Store(lab.victim_store), "team", str(lab.remote), trusted=True)
    pull(Store(lab.victim_store), "team")
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" not in proc.stdout, proc.stderr
    assert proc.stdout == first.stdout.replace("COMPUTED\n", "")
