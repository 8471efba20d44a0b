"""gc forgets where the objects it deletes came from, and nothing else."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from memostore import Store
from memostore.remote import push
from memostore.trust.origins import ORIGINS_DIR, forget, parse_journal

from .labkit import Lab, lab, warnings_in
from .test_decode_payloads import TEAMMATE

__all__ = ["lab"]  # the fixture, imported


def _recorded(store: Path) -> set[str]:
    """Every id the store's origin journals list."""
    out: set[str] = set()
    for journal in (store / ORIGINS_DIR).glob("*/*.ids"):
        out.update(parse_journal(journal.read_bytes()))
    return out


def _pull_a_local_class(lab: Lab) -> set[str]:
    """A teammate's result holding a class stored by value, pulled from an untrusted remote."""
    lab.script.write_text(textwrap.dedent(TEAMMATE))
    lab.run(lab.attacker_store)
    push(Store(lab.attacker_store), str(lab.remote))
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    pulled = _recorded(lab.victim_store)
    assert pulled and pulled <= set(Store(lab.victim_store).objects.iter_ids())
    return pulled


def _drop_every_ref(store_path: Path) -> None:
    store = Store(store_path)
    for name, target in list(store.refs.iter("")):
        assert store.refs.delete_if_equals(name, target)


def test_gc_drops_the_records_of_what_it_deleted(lab: Lab) -> None:
    pulled = _pull_a_local_class(lab)
    _drop_every_ref(lab.victim_store)
    lab.cli(lab.victim_store, "gc", "--grace", "0")
    assert not set(Store(lab.victim_store).objects.iter_ids()) & pulled
    assert _recorded(lab.victim_store) == set()
    assert not list((lab.victim_store / ORIGINS_DIR).glob("*/*.ids"))  # no empty journals

    # The same call computed here writes the same payload: this store's own, so it loads.
    first = lab.run(lab.victim_store)
    assert "COMPUTED" in first.stdout and not warnings_in(first.stderr)
    assert set(Store(lab.victim_store).objects.iter_ids()) & pulled  # the same ids again
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout and "RESULT [Point(3), 4]" in again.stdout
    assert not warnings_in(again.stderr)


def test_gc_keeps_the_records_of_pulled_objects_it_keeps(lab: Lab) -> None:
    pulled = _pull_a_local_class(lab)
    lab.cli(lab.victim_store, "gc", "--grace", "0")  # every pulled object is reachable
    assert _recorded(lab.victim_store) == pulled
    proc = lab.run(lab.victim_store)
    assert "COMPUTED" in proc.stdout  # still the untrusted remote's: refused
    (line,) = warnings_in(proc.stderr)
    assert "memostore remote trust team" in line


def test_only_old_journals_lose_ids_and_only_of_absent_objects(lab: Lab) -> None:
    pulled = _pull_a_local_class(lab)
    store = Store(lab.victim_store)
    now = time.time()
    # Present (a pull or a call wrote them again after gc deleted them): kept.
    assert forget(store, pulled, older_than=now + 60) == 0
    assert _recorded(lab.victim_store) == pulled
    for object_id in pulled:
        store.objects.delete(object_id)
    # A journal younger than the grace period may be a running pull's: kept.
    assert forget(store, pulled, older_than=now - 3600) == 0
    assert _recorded(lab.victim_store) == pulled
    assert forget(store, pulled, older_than=now + 60) == 1
    assert _recorded(lab.victim_store) == set()
