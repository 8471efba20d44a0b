"""gc and the links cache (``index/links``): which entries it trusts, and its compaction."""

from __future__ import annotations

from pathlib import Path

from memostore.lifecycle.maintenance import fsck, gc
from memostore.lifecycle.usage import compute_usage
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.odb.store import Store


def _graph(root: Path) -> tuple[Store, dict[str, str]]:
    """A ref to document A, which links documents B and C; D is linked by nothing."""
    store = Store(root)
    b = Doc(KIND_VALUE, {"node": "b"}, Links())
    c = Doc(KIND_VALUE, {"node": "c"}, Links())
    a = Doc(KIND_VALUE, {"node": ["b", "c"]}, Links(docs={b.id, c.id}))
    d = Doc(KIND_VALUE, {"node": "d"}, Links())
    for doc in (a, b, c, d):
        store.objects.add_doc(doc)
    store.refs.set("evals/f/a", a.id)
    return store, {"a": a.id, "b": b.id, "c": c.id, "d": d.id}


def _cache(store: Store) -> Path:
    assert store.root is not None
    return store.root / "index" / "links"


def _write_lines(store: Store, *lines: str) -> None:
    path = _cache(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def _cached_ids(store: Store) -> set[str]:
    return {line.split(" ", 1)[0] for line in _cache(store).read_text().splitlines()}


def test_an_entry_without_the_document_mark_is_not_trusted(tmp_path: Path) -> None:
    store, ids = _graph(tmp_path / "store")
    # "Links nothing", but never checked as a document (no final "d"): gc reads A.
    _write_lines(store, f"{ids['a']} - - -")
    report = gc(store, grace_s=0)
    assert report.deleted == [ids["d"]]
    assert all(store.objects.contains(ids[k]) for k in "abc")


def test_an_entry_naming_an_object_the_store_lacks_falls_back_to_the_document(
    tmp_path: Path,
) -> None:
    store, ids = _graph(tmp_path / "store")
    absent = "e" * 64  # well-formed, marked as checked, but no such object
    _write_lines(store, f"{ids['a']} - {absent} - d")
    report = gc(store, grace_s=0)
    assert report.deleted == [ids["d"]]
    assert all(store.objects.contains(ids[k]) for k in "abc")


def test_gc_drops_the_entries_of_what_it_deleted(tmp_path: Path) -> None:
    store, ids = _graph(tmp_path / "store")
    compute_usage(store)  # what `du` does: every object gets its entry
    assert {ids["a"], ids["b"], ids["c"]} <= _cached_ids(store)
    _write_lines(store, *_cache(store).read_text().splitlines(), f"{ids['d']} - - - d")
    report = gc(store, grace_s=0)
    assert report.deleted == [ids["d"]]
    assert _cached_ids(store) == {ids["a"], ids["b"], ids["c"]}
    assert report.links_entries == 3
    # A second gc trusts the compacted cache and frees nothing more.
    assert gc(store, grace_s=0).deleted == []


def test_a_forged_entry_is_trusted_and_fsck_names_what_it_cost(tmp_path: Path) -> None:
    """The cache is a file of the store, as trusted as the objects next to it.

    A well-formed entry, marked as checked, whose ids all exist is taken as the
    document's links: a hand-written line that leaves out B frees B, as deleting
    B's file would have. fsck, which never reads the cache, names the damage.
    """
    store, ids = _graph(tmp_path / "store")
    _write_lines(store, f"{ids['a']} - {ids['c']} - d")
    report = gc(store, grace_s=0)
    assert sorted(report.deleted) == sorted([ids["b"], ids["d"]])
    problems = fsck(store).problems
    assert any(ids["b"] in str(p) for p in problems), problems
