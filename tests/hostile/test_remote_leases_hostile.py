"""A lease planted in an auto-fetch remote neither holds a call forever nor breaks it.

Machines sharing only a remote coordinate a miss through ``leases/`` in it; its
writer can put any record there. Nothing in it is trusted for time or liveness:
a record naming this very host and pid 1 (always alive), with a heartbeat a day
in the future and a day's expiry, holds a caller no longer than the caller's
own lease expiry; a record that is no record is judged by its age alone; and
none of them crashes the call or turns single-flight off for the other calls.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time

import pytest

from memostore import Store
from memostore.odb import lockfile
from memostore.odb.store import FORMAT_LINE
from memostore.remote import add_remote
from memostore.remote.leases import lease_name
from memostore.transport import open_transport

from .labkit import VICTIM, Lab, lab, warnings_in
from .remotekit import remote_url

__all__ = ["lab", "remote_url"]  # the fixtures, imported

# The victim with a short lease expiry of its own (the bound a planted record may hold it).
LEASE_VICTIM = VICTIM.replace(
    "from memostore import memo\n",
    "import time\n\nimport memostore.odb.leases\nfrom memostore import memo\n\n"
    "memostore.odb.leases.EXPIRES_S = 2.0\n",
).replace(
    'print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))',
    "started = time.monotonic()\n"
    '    print("RESULT", compute(int(sys.argv[1]) if len(sys.argv) > 1 else 3))\n'
    '    print("WAITED", round(time.monotonic() - started, 1))',
)

FUTURE = time.time() + 86400
RECORDS = {
    "this host, pid 1, a day ahead": json.dumps(
        {
            "host": lockfile.HOST,
            "pid": 1,
            "id": "planted",
            "started": FUTURE,
            "heartbeat": FUTURE,
            "heartbeat_s": 86400,
            "expires_s": 86400,
        }
    ).encode(),
    "values no clock can hold": (
        b'{"host": "\\u001b[2Jhost", "pid": 1e999, "id": [1], "started": -1e308, '
        b'"heartbeat": 1e400, "expires_s": "forever", "process_started": ' + b"9" * 4000 + b"}"
    ),
    "deep nesting": b"[" * 60000,
    "larger than any record": b"{" + b" " * (2 << 20) + b"}",
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_planted_lease_holds_a_call_no_longer_than_its_own_expiry(
    lab: Lab, remote_url: str, name: str
) -> None:
    lab.script.write_text(textwrap.dedent(LEASE_VICTIM))
    lab.run(lab.attacker_store)  # the call's real key, from a store of the attacker's
    ((ref, _),) = Store(lab.attacker_store).refs.iter("evals/")
    with open_transport(remote_url) as transport:
        transport.put_bytes("FORMAT", FORMAT_LINE.encode())
        transport.put_bytes(lease_name(ref), RECORDS[name])
    add_remote(Store(lab.victim_store), "team", remote_url, auto_fetch=True)
    proc = lab.victim_meets_attack()
    waited = float(proc.stdout.split("WAITED")[1].split()[0])
    assert waited < 20, proc.stderr
    assert "Traceback" not in proc.stderr
    # Single-flight through the remote stays on for every other call.
    assert not [w for w in warnings_in(proc.stderr) if "refused a single-flight" in w]
    assert len(warnings_in(proc.stderr)) <= 1, proc.stderr


# The victim with a short bound on waiting for a lease in a remote it does not trust.
BOUNDED_VICTIM = LEASE_VICTIM.replace(
    "memostore.odb.leases.EXPIRES_S = 2.0\n",
    "memostore.odb.leases.EXPIRES_S = 2.0\n"
    "import memostore.remote.leases\n\nmemostore.remote.leases.UNTRUSTED_WAIT_S = 4.0\n",
)


def test_a_lease_rewritten_for_ever_holds_a_call_only_as_long_as_the_untrusted_bound(
    lab: Lab,
) -> None:
    lab.script.write_text(textwrap.dedent(BOUNDED_VICTIM))
    lab.run(lab.attacker_store)
    ((ref, _),) = Store(lab.attacker_store).refs.iter("evals/")
    stop = threading.Event()

    def attacker(transport) -> None:
        # A live-looking holder on another machine: the record changes every 0.2 s.
        beat = 0
        while not stop.is_set():
            beat += 1
            record = {
                "host": "elsewhere",
                "pid": 4242,
                "id": "planted",
                "started": time.time(),
                "heartbeat": time.time(),
                "heartbeat_s": 0.2,
                "expires_s": 1.0,
                "n": beat,
            }
            transport.put_bytes(lease_name(ref), json.dumps(record).encode())
            stop.wait(0.2)

    with open_transport(str(lab.remote)) as transport:
        transport.put_bytes("FORMAT", FORMAT_LINE.encode())
        beating = threading.Thread(target=attacker, args=(transport,), daemon=True)
        beating.start()
        try:
            add_remote(Store(lab.victim_store), "team", str(lab.remote), auto_fetch=True)
            proc = lab.victim_meets_attack()
        finally:
            stop.set()
            beating.join()
    waited = float(proc.stdout.split("WAITED")[1].split()[0])
    assert 3 < waited < 30, proc.stderr
    assert "does not trust" in proc.stderr and "memostore remote trust team" in proc.stderr


def test_no_bytes_make_a_lease_record_raise_or_claim_the_future() -> None:
    import random

    from memostore.remote.lease_records import is_stale, parse_record

    rng = random.Random(27)
    samples = [bytes(rng.randrange(256) for _ in range(rng.randrange(64))) for _ in range(300)]
    samples += [json.dumps(v).encode() for v in ([], 1, "x", None, {"pid": True}, {"pid": -5})]
    samples += list(RECORDS.values())
    for raw in samples:
        record = parse_record(raw)
        assert is_stale(record, unchanged_for=3600.0)  # an hour unchanged: stale, always
    planted = parse_record(RECORDS["this host, pid 1, a day ahead"])
    assert planted is not None and planted.pid == 1
    assert not is_stale(planted, unchanged_for=0.0)  # just seen: a live holder could renew it
