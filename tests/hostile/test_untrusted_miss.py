"""A hit refused by the allowlist is a quiet miss: one warning with the fix, an honest reason."""

from __future__ import annotations

import textwrap

from memostore import Store
from memostore.remote import push

from .labkit import VICTIM, Lab, code, hostile_pickle, lab, plant, warnings_in

__all__ = ["lab"]  # the fixture, imported

# The victim's own script, saying why each call hits or misses.
VERBOSE_VICTIM = VICTIM.replace(
    "from memostore import memo\n",
    "import memostore\nfrom memostore import memo\n\nmemostore.set_verbose(True)\n",
)

LIBRARY = """
import ipaddress

import memostore
from memostore import memo

memostore.set_verbose(True)


@memo
def address(n):
    print("COMPUTED")
    return [ipaddress.IPv4Address(n)]


if __name__ == "__main__":
    print("RESULT", address(1), address(1), address(1))
"""


def _miss_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": miss " in line]


def test_a_library_callable_outside_the_allowlist_is_an_untrusted_miss(lab: Lab) -> None:
    lab.script.write_text(textwrap.dedent(LIBRARY))
    proc = lab.run(lab.victim_store)
    assert proc.stdout.count("COMPUTED") == 3  # each later call meets the value and computes
    (line,) = warnings_in(proc.stderr)
    assert "ipaddress:IPv4Address" in line
    assert 'memostore.add_safe_globals(["ipaddress:IPv4Address"])' in line
    first, *refused = _miss_lines(proc.stderr)
    assert "untrusted" not in first  # nothing was stored yet
    assert len(refused) == 2, proc.stderr
    for reason in refused:
        assert "untrusted" in reason and "ipaddress:IPv4Address" in reason, reason
        assert "memostore.add_safe_globals" in reason
        assert "changed" not in reason, reason


def test_a_payload_from_an_untrusted_remote_is_an_untrusted_miss(lab: Lab) -> None:
    lab.script.write_text(VERBOSE_VICTIM)
    lab.run(lab.attacker_store)
    digest = "d" * 64
    gadget = code("__main__", "build.<locals>.Gadget", digest=digest, byvalue=True)
    plant(
        lab.attacker_store,
        [1, [{"$": "object", "cls": gadget, "args": []}]],
        blobs={"payload": hostile_pickle(lab.marker)},
        payloads={digest: "payload"},
    )
    push(Store(lab.attacker_store), str(lab.remote))
    lab.cli(lab.victim_store, "remote", "add", "team", str(lab.remote))
    lab.cli(lab.victim_store, "pull", "team")
    proc = lab.victim_meets_attack()
    (line,) = warnings_in(proc.stderr)
    assert "build.<locals>.Gadget" in line and "`memostore remote trust team`" in line
    (reason,) = _miss_lines(proc.stderr)
    assert "untrusted" in reason and "build.<locals>.Gadget" in reason, reason
    assert "memostore remote trust team" in reason
    assert "changed" not in reason, reason
