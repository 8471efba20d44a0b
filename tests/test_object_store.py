"""One contract for every object database (disk and its in-memory twin)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from memostore.errors import CorruptObject, ObjectNotFound
from memostore.odb.object_store import BaseObjectStore, DiskObjectStore, MemoryObjectStore
from memostore.odb.objects import KIND_TREE, Doc, Links, digest_bytes


@pytest.fixture(params=["disk", "memory"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> BaseObjectStore:
    if request.param == "disk":
        return DiskObjectStore(tmp_path / "store")
    return MemoryObjectStore()


def tamper(objects: BaseObjectStore, object_id: str, data: bytes) -> None:
    if isinstance(objects, DiskObjectStore):
        path = objects.path_of(object_id)
        os.chmod(path, stat.S_IWUSR | stat.S_IRUSR)
        path.write_bytes(data)
    else:
        assert isinstance(objects, MemoryObjectStore)
        objects.tamper(object_id, data)


class TestObjectStoreContract:
    def test_add_and_get_round_trip(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"hello")
        assert object_id == digest_bytes(b"hello")
        assert objects.contains(object_id)
        assert objects.get_bytes(object_id) == b"hello"
        assert objects.size_of(object_id) == 5

    def test_add_is_idempotent(self, objects: BaseObjectStore) -> None:
        assert objects.add_bytes(b"x") == objects.add_bytes(b"x")
        assert list(objects.iter_ids()) == [digest_bytes(b"x")]

    def test_empty_blob(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"")
        assert objects.get_bytes(object_id) == b""

    def test_chunks_stream_into_one_object(self, objects: BaseObjectStore) -> None:
        chunks = [b"a" * 1000, memoryview(b"b" * 5000), bytearray(b"c")]
        object_id = objects.add_chunks(chunks, 6001)
        assert objects.get_bytes(object_id) == b"a" * 1000 + b"b" * 5000 + b"c"

    def test_expected_id_mismatch_stores_nothing(self, objects: BaseObjectStore) -> None:
        wrong = digest_bytes(b"other")
        with pytest.raises(CorruptObject) as info:
            objects.add_chunks([b"data"], 4, expected_id=wrong)
        assert info.value.expected == wrong
        assert info.value.actual == digest_bytes(b"data")
        assert not objects.contains(wrong)
        assert not objects.contains(digest_bytes(b"data"))

    def test_missing_object(self, objects: BaseObjectStore) -> None:
        missing = digest_bytes(b"never stored")
        assert not objects.contains(missing)
        with pytest.raises(ObjectNotFound):
            objects.get_bytes(missing)
        with pytest.raises(KeyError):  # the built-in a caller would catch
            objects.get_bytes(missing)

    def test_tampered_object_raises_corruption_with_digests(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"precious")
        tamper(objects, object_id, b"precioUs")
        with pytest.raises(CorruptObject) as info:
            objects.get_bytes(object_id)
        assert info.value.expected == object_id
        assert info.value.actual == digest_bytes(b"precioUs")
        # The damaged copy is moved aside, so writing the object again repairs it.
        assert not objects.contains(object_id)
        assert objects.add_bytes(b"precious") == object_id
        assert objects.get_bytes(object_id) == b"precious"

    def test_verify_reports_damage(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"abc")
        assert objects.verify(object_id) is None
        tamper(objects, object_id, b"abd")
        assert "mismatch" in (objects.verify(object_id) or "")

    def test_documents_round_trip_and_cache(self, objects: BaseObjectStore) -> None:
        blob = objects.add_bytes(b"payload")
        doc = Doc(KIND_TREE, {"entries": [["a", blob]]}, Links(blobs={blob}))
        doc_id = objects.add_doc(doc)
        again = objects.get_doc(doc_id)
        assert again.kind == KIND_TREE
        assert again.body == {"entries": [["a", blob]]}
        assert again.links.blobs == {blob}
        assert again.id == doc_id

    def test_delete(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"gone")
        objects.delete(object_id)
        assert not objects.contains(object_id)
        objects.delete(object_id)  # idempotent

    def test_get_bytearray_is_writable_copy(self, objects: BaseObjectStore) -> None:
        object_id = objects.add_bytes(b"12345")
        buf = objects.get_bytearray(object_id)
        buf[0] = ord("9")
        assert objects.get_bytes(object_id) == b"12345"


def test_disk_objects_are_read_only_and_fanned_out(tmp_path: Path) -> None:
    objects = DiskObjectStore(tmp_path)
    object_id = objects.add_bytes(b"data")
    path = objects.path_of(object_id)
    assert path.parent.name == object_id[:2]
    assert path.name == object_id[2:]
    assert not os.stat(path).st_mode & stat.S_IWUSR
    assert list((tmp_path / "tmp").iterdir()) == []


def test_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    objects = DiskObjectStore(tmp_path)

    def chunks():
        yield b"partial"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        objects.add_chunks(chunks(), 100)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert list(objects.iter_ids()) == []
