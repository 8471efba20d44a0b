"""A pulled metric chunk inflates to at most what its declared count needs.

Metric chunks are zlib-compressed columns. A 1 MiB chunk that inflates to a
gigabyte, pulled from a remote, must not take a gigabyte of the reader: a
numeric column inflates to ``8 * count`` bytes at most, and past that the
chunk is malformed.
"""

from __future__ import annotations

import json
import struct
import textwrap
import zlib

from memostore import Store
from memostore.metrics.columns import MAGIC
from memostore.odb.objects import KIND_LOGS, Doc, Links, canonical_json
from memostore.records.evaluation import evaluation_doc
from memostore.remote import push

from .labkit import VICTIM, Lab, lab
from .remotekit import cli_with_peak, remote_url

__all__ = ["lab", "remote_url"]  # the fixtures, imported

LOGGING_VICTIM = VICTIM.replace("from memostore import memo", "from memostore import log, memo")
LOGGING_VICTIM = LOGGING_VICTIM.replace(
    '    print("COMPUTED")\n',
    '    print("COMPUTED")\n'
    "    for step in range(10):\n"
    '        log({"loss": 1.0 / (step + 1)}, step=step)\n',
)


def _bomb() -> bytes:
    """A gigabyte of zeros, compressed (about 1 MiB), built without holding the gigabyte."""
    packer = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(1024)) + packer.flush()


def _chunk(bomb: bytes) -> bytes:
    columns = [
        {"name": name, "type": kind, "count": 10, "encoding": "shuffle-zlib", "size": len(bomb)}
        for name, kind in (("steps", "i8"), ("values", "f8"))
    ]
    head = canonical_json({"columns": columns})
    return MAGIC + struct.pack("<I", len(head)) + head + bomb + bomb


def _plant_bomb(lab: Lab) -> str:
    """The attacker's evaluation, its loss chunks swapped for the bomb; returns its id."""
    store = Store(lab.attacker_store)
    ((ref, evaluation_id),) = store.refs.iter("evals/")
    body = dict(store.evaluation(evaluation_id).body)
    logs = json.loads(json.dumps(store.objects.get_doc(body["logs"]).body))
    chunk = store.objects.add_bytes(_chunk(_bomb()))
    blobs = {chunk}
    for entry in logs["tags"].values():
        for part in entry["chunks"]:
            part["data"] = chunk
            blobs.add(part["walls"])
    logs_doc = Doc(KIND_LOGS, logs, Links(blobs=blobs))
    store.objects.add_doc(logs_doc)
    body["logs"] = logs_doc.id
    doc = evaluation_doc(body, Links())
    store.objects.add_doc(doc)
    store.refs.set(ref, doc.id)
    return doc.id


def test_a_zlib_bomb_in_a_pulled_chunk_takes_no_gigabyte(lab: Lab, remote_url: str) -> None:
    lab.script.write_text(textwrap.dedent(LOGGING_VICTIM))
    lab.run(lab.attacker_store)
    planted = _plant_bomb(lab)
    push(Store(lab.attacker_store), remote_url)
    lab.cli(lab.victim_store, "remote", "add", "team", remote_url)
    lab.cli(lab.victim_store, "pull", "team")
    proc, peak_mb = cli_with_peak(lab, lab.victim_store, "plot", planted, "--tag", "loss")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert peak_mb < 350, f"plot held {peak_mb} MB"
