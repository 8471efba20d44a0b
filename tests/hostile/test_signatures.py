"""Signed evaluations: a pulled result is served only when an allowed signer computed it.

Three people, each with a store and a key of their own (``MEMOSTORE_CONFIG_DIR``
points at each one's config directory, where the key is made on first use):
alice computes and pushes, bob (the victim) pulls and calls, mallory can
write the remote. All in this process: the memoised function below has the
same call key for each of them. On a directory remote and on S3.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from memostore_cli.main import cli

import memostore
from memostore import Store, memo
from memostore.inspect.miss_check import why_miss
from memostore.odb.fsck import fsck
from memostore.odb.signatures import signature_name
from memostore.remote import add_remote, pull, push
from memostore.remote.fetch import reset_state
from memostore.transport.url import open_transport
from memostore.trust.signing import SigningKey, signing_key

from .labkit import plant


@memo
def triple(n: int) -> list[int]:
    print("COMPUTED", n)
    return [n, n * 3]


@dataclass
class Person:
    name: str
    config: Path
    store_path: Path
    monkeypatch: pytest.MonkeyPatch

    def act(self) -> Person:
        """Make this person the one whose key signs and whose store ``@memo`` uses."""
        self.monkeypatch.setenv("MEMOSTORE_CONFIG_DIR", str(self.config))
        self.monkeypatch.setenv("MEMOSTORE_DIR", str(self.store_path))
        return self

    @property
    def store(self) -> Store:
        return Store(self.store_path)

    def _key(self) -> SigningKey:
        """This person's key (made on first use), leaving whoever acts now acting."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MEMOSTORE_CONFIG_DIR", str(self.config))
            key = signing_key()
        assert key is not None
        return key

    @property
    def public_line(self) -> str:
        return self._key().public.line

    @property
    def fingerprint(self) -> str:
        return self._key().public.fingerprint


@pytest.fixture
def people(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Person]]:
    reset_state()
    memostore.set_verbose(True)
    yield {
        name: Person(name, tmp_path / f"{name}-config", tmp_path / f"{name}-store", monkeypatch)
        for name in ("alice", "bob", "mallory")
    }
    memostore.set_verbose(False)


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.s3)])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        return str(request.getfixturevalue("s3_bucket"))
    return str(tmp_path / "remote")


def _call(person: Person, capfd: pytest.CaptureFixture[str]) -> tuple[list[int], str, str]:
    """``triple(3)`` as *person*: (result, stdout, stderr with the warnings appended)."""
    person.act()
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = triple(3)
    out, err = capfd.readouterr()
    said = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result, out, "\n".join([err, *said])


def _alice_pushes(alice: Person, remote: str, capfd: pytest.CaptureFixture[str]) -> str:
    result, out, _ = _call(alice, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    push(alice.store, remote)
    ((_, evaluation_id),) = list(alice.store.refs.iter("evals/"))
    return evaluation_id


def _bob_pulls(bob: Person, remote: str) -> Store:
    bob.act()
    store = bob.store
    add_remote(store, "team", remote)
    pull(store, "team")
    return store


def _miss_line(err: str) -> str:
    (line,) = [line for line in err.splitlines() if ": miss " in line]
    return line


def _intact(store: Store, evaluation_id: str) -> None:
    """What the pull brought is still there, and the store checks clean."""
    assert store.objects.contains(evaluation_id)
    assert not fsck(store).problems


def test_a_teammates_results_hit_after_trust_add(
    people: dict[str, Person], remote: str, capfd: pytest.CaptureFixture[str]
) -> None:
    alice, bob = people["alice"], people["bob"]
    pushed = _alice_pushes(alice, remote, capfd)
    with open_transport(remote) as transport:  # push signed it, and sent the signature
        assert transport.get_bytes(signature_name(pushed)).startswith(b"ssh-ed25519 ")
    store = _bob_pulls(bob, remote)
    assert store.signatures.lines(pushed)
    runner = CliRunner()
    added = runner.invoke(
        cli, ["--store", str(bob.store_path), "trust", "add", "alice", *alice.public_line.split()]
    )
    assert added.exit_code == 0, added.output
    assert alice.fingerprint in added.output
    result, out, err = _call(bob, capfd)
    assert result == [3, 9]
    assert "COMPUTED" not in out, err
    assert ": hit " in err
    shown = runner.invoke(cli, ["--store", str(bob.store_path), "show", pushed[:12], "--json"])
    assert '"principal": "alice"' in shown.output and alice.fingerprint in shown.output
    listed = runner.invoke(cli, ["--store", str(bob.store_path), "log"])
    assert "by alice" in listed.output
    # Trust withdrawn: the next call in this same process misses (the file is re-read).
    removed = runner.invoke(cli, ["--store", str(bob.store_path), "trust", "rm", "alice"])
    assert removed.exit_code == 0, removed.output
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    assert f"computed by {alice.fingerprint}, not a signer you trust" in _miss_line(err)


def test_an_unknown_signer_misses_with_the_reason(
    people: dict[str, Person], remote: str, capfd: pytest.CaptureFixture[str]
) -> None:
    alice, bob = people["alice"], people["bob"]
    pushed = _alice_pushes(alice, remote, capfd)
    store = _bob_pulls(bob, remote)
    assert triple.lookup(3) is None  # nor does its result leave through lookup()
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    line = _miss_line(err)
    assert f"computed by {alice.fingerprint}, not a signer you trust: memostore trust add" in line
    assert "MemostoreWarning" in err and alice.fingerprint in err
    explained = why_miss(store, pushed)  # `memostore diff REV`: would a call hit?
    assert explained["verdict"] == "miss"
    assert any(f"computed by {alice.fingerprint}" in r for r in explained["reasons"])
    _intact(store, pushed)
    shown = CliRunner().invoke(cli, ["--store", str(bob.store_path), "show", pushed[:12]])
    assert f"{alice.fingerprint} (not trusted)" in shown.output, shown.output


def test_unsigned_pulled_results_miss(
    people: dict[str, Person], remote: str, capfd: pytest.CaptureFixture[str]
) -> None:
    alice, bob = people["alice"], people["bob"]
    pushed = _alice_pushes(alice, remote, capfd)
    with open_transport(remote) as transport:  # as a remote written before signing existed
        transport.delete(signature_name(pushed))
    store = _bob_pulls(bob, remote)
    CliRunner().invoke(
        cli, ["--store", str(bob.store_path), "trust", "add", "alice", alice.public_line]
    )
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    line = _miss_line(err)
    assert "unsigned, not a signer you trust" in line
    _intact(store, pushed)


@pytest.mark.parametrize("signature", ["copied", "mallory"])
def test_a_forged_evaluation_misses_even_from_a_trusted_signer(
    people: dict[str, Person],
    remote: str,
    capfd: pytest.CaptureFixture[str],
    signature: str,
) -> None:
    """Mallory rewrites alice's record on the remote: copying alice's signature onto it
    does not verify, and mallory's own signature is not one bob trusts."""
    alice, bob, mallory = people["alice"], people["bob"], people["mallory"]
    genuine = _alice_pushes(alice, remote, capfd)
    mallory.act()
    pull(mallory.store, remote)
    forged = plant(mallory.store_path, 999)  # signed with mallory's key
    push(mallory.store, remote, force=True)
    with open_transport(remote) as transport:
        if signature == "copied":
            alice_line = transport.get_bytes(signature_name(genuine))
            transport.delete(signature_name(forged))
            transport.put_bytes(signature_name(forged), alice_line)
    store = _bob_pulls(bob, remote)
    CliRunner().invoke(
        cli, ["--store", str(bob.store_path), "trust", "add", "alice", alice.public_line]
    )
    assert store.refs.read(next(n for n, _ in store.refs.iter("evals/"))) == forged
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    line = _miss_line(err)
    if signature == "copied":
        assert f"signature by {alice.fingerprint} does not match" in line
    else:
        assert f"computed by {mallory.fingerprint}, not a signer you trust" in line
    _intact(store, forged)


def test_auto_fetch_serves_only_allowed_signers(
    people: dict[str, Person], remote: str, capfd: pytest.CaptureFixture[str]
) -> None:
    alice, bob = people["alice"], people["bob"]
    _alice_pushes(alice, remote, capfd)
    bob.act()
    add_remote(bob.store, "team", remote, auto_fetch=True)
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" in out
    assert "not a signer you trust" in _miss_line(err)
    # A fresh store that trusts alice first: the fetched result is served.
    bob.store_path = bob.store_path.with_name("bob-store-2")
    bob.act()
    add_remote(bob.store, "team", remote, auto_fetch=True)
    reset_state()
    CliRunner().invoke(
        cli, ["--store", str(bob.store_path), "trust", "add", "alice", alice.public_line]
    )
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" not in out, err


def test_a_signature_pulled_later_makes_a_pulled_result_serve(
    people: dict[str, Person], remote: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A remote whose signature file went missing, then came back: a second pull of the
    same ref brings it, and the same process now serves the result."""
    alice, bob = people["alice"], people["bob"]
    pushed = _alice_pushes(alice, remote, capfd)
    with open_transport(remote) as transport:
        signature = transport.get_bytes(signature_name(pushed))
        transport.delete(signature_name(pushed))
    store = _bob_pulls(bob, remote)
    CliRunner().invoke(
        cli, ["--store", str(bob.store_path), "trust", "add", "alice", alice.public_line]
    )
    assert "unsigned" in str(why_miss(store, pushed)["reasons"])
    with open_transport(remote) as transport:
        transport.put_bytes(signature_name(pushed), signature)
    report = pull(store, "team")
    assert report.refs_unchanged == 1 and store.signatures.lines(pushed)
    result, out, err = _call(bob, capfd)
    assert result == [3, 9] and "COMPUTED" not in out, err
