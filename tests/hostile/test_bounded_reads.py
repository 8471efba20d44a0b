"""Every read of a remote's small files is bounded: a planted huge file is never read whole.

Refs, lease records, origin descriptors and journals have size caps checked
before their bytes are read. A 512 MiB sparse ref (no disk space for the
attacker, half a gigabyte of memory for a reader that reads it whole) is
skipped with a warning; an origin journal past its cap fails the pull with one
line (ignoring it would drop the claims it makes); the pull's memory stays
small throughout.
"""

from __future__ import annotations

from memostore import Store
from memostore.remote import push
from memostore.transport import open_transport

from .labkit import Lab, lab
from .remotekit import cli_with_peak, remote_url, sparse

__all__ = ["lab", "remote_url"]  # the fixtures, imported

HUGE = 512 << 20
KEY = "ab" * 16  # an origin source key (32 hex digits)


def _published(lab: Lab, url: str) -> str:
    """The attacker's genuine evaluation, pushed; returns its ref's function part."""
    lab.run(lab.attacker_store)
    push(Store(lab.attacker_store), url)
    ((ref, _),) = Store(lab.attacker_store).refs.iter("evals/")
    return ref.split("/")[1]


def test_huge_refs_leases_and_descriptors_are_never_read_whole(lab: Lab, remote_url: str) -> None:
    function = _published(lab, remote_url)
    names = {
        f"refs/evals/{function}/{'e' * 64}": "ref",
        f"leases/{function}/{'e' * 64}": "lease",
        f"origins/sources/{KEY}.json": "descriptor",
    }
    if remote_url.startswith("s3://"):
        # moto keeps objects in memory: big enough to pass every cap, no more.
        with open_transport(remote_url) as transport:
            for name in names:
                transport.put_bytes(name, b"0" * (1 << 20))
            transport.put_bytes(f"origins/{KEY}/0-1-x.ids", b"f" * 64 + b"\n")
    else:
        for name in names:
            sparse(lab.remote / name, HUGE)
        journal = lab.remote / "origins" / KEY / "0-1-x.ids"
        journal.parent.mkdir(parents=True)
        journal.write_text("f" * 64 + "\n")
    lab.cli(lab.victim_store, "remote", "add", "team", remote_url)
    proc, peak_mb = cli_with_peak(lab, lab.victim_store, "pull", "team")
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 ref" in proc.stderr and "never read" in proc.stderr
    assert peak_mb < 350, f"pull held {peak_mb} MB"
    # What the remote genuinely held arrived: a plain hit.
    again = lab.run(lab.victim_store)
    assert "COMPUTED" not in again.stdout


def test_an_origin_journal_past_its_cap_fails_the_pull_in_one_line(lab: Lab) -> None:
    _published(lab, str(lab.remote))
    (lab.remote / "origins" / "sources").mkdir(parents=True, exist_ok=True)
    source = '{"endpoint":null,"name":"","url":"file:///elsewhere"}'
    from memostore.trust.origins import Source

    key = Source("file:///elsewhere").key
    (lab.remote / "origins" / "sources" / f"{key}.json").write_text(source)
    sparse(lab.remote / "origins" / key / "00000000000000000001-1-x.ids", HUGE)
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    proc, peak_mb = cli_with_peak(lab, lab.victim_store, "pull", "team")
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("PEAK_RSS")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "was not read" in errors[0]
    assert peak_mb < 350, f"pull held {peak_mb} MB"
    assert not list(Store(lab.victim_store).refs.iter("evals/"))
