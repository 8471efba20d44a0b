"""Eviction ranks by local facts: a pulled evaluation is as recent as its arrival here.

An evaluation's ``started`` is whatever its writer recorded. Records dated in
the year 3000, pulled from a remote, must not outrank the user's own results
in ``gc --keep-last`` (nor stay "young" forever): a pulled evaluation counts as
created when it arrived here, from this store's own origin journals.
"""

from __future__ import annotations

import json

from memostore import Store
from memostore.odb.objects import Links
from memostore.records.evaluation import evaluation_doc
from memostore.remote import push

from .labkit import Lab, lab
from .remotekit import remote_url

__all__ = ["lab", "remote_url"]  # the fixtures, imported

YEAR_3000 = 32503680000.0


def _date_in_the_future(store_path: object) -> set[str]:
    """Rewrite every evaluation of the attacker's store as started in the year 3000."""
    store = Store(store_path)
    dated = set()
    for ref, evaluation_id in list(store.refs.iter("evals/")):
        body = dict(store.evaluation(evaluation_id).body)
        body["started"] = YEAR_3000
        doc = evaluation_doc(body, Links())
        store.objects.add_doc(doc)
        store.refs.set(ref, doc.id)
        dated.add(doc.id)
    return dated


def test_pulled_records_dated_in_the_future_do_not_outrank_the_users_own(
    lab: Lab, remote_url: str
) -> None:
    for n in ("10", "11"):
        lab.run(lab.attacker_store, n)
    pulled = _date_in_the_future(lab.attacker_store)
    push(Store(lab.attacker_store), remote_url)
    lab.cli(lab.victim_store, "remote", "add", "team", remote_url)
    lab.cli(lab.victim_store, "pull", "team")
    for n in ("1", "2"):  # the user's own results, computed after the pull
        lab.run(lab.victim_store, n)
    store = Store(lab.victim_store)
    own = {i for _, i in store.refs.iter("evals/")} - pulled
    assert len(own) == 2
    report = json.loads(
        lab.cli(lab.victim_store, "gc", "--keep-last", "2", "--grace", "0", "--json").stdout
    )
    evicted = {e["id"] for e in report["eviction"]["evicted"]}
    assert evicted == pulled
    assert {i for _, i in Store(lab.victim_store).refs.iter("evals/")} == own


def test_pulled_records_dated_in_the_future_are_not_the_newest_in_listings(lab: Lab) -> None:
    lab.run(lab.attacker_store, "10")
    pulled = _date_in_the_future(lab.attacker_store)
    push(Store(lab.attacker_store), str(lab.remote))
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    lab.run(lab.victim_store, "1")  # the user's own result, computed after the pull
    (own,) = {i for _, i in Store(lab.victim_store).refs.iter("evals/")} - pulled
    # `show FUNCTION` names the function's newest evaluation, and `log` lists it first.
    shown = json.loads(lab.cli(lab.victim_store, "show", "compute", "--json").stdout)
    assert shown["id"] == own
    listed = json.loads(lab.cli(lab.victim_store, "log", "--json").stdout)
    assert listed[0]["id"] == own
    assert all(e["started"] < YEAR_3000 for e in listed)
