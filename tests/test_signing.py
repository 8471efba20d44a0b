"""Signing keys, the signatures a store keeps, and ``memostore trust add/list/rm``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from memostore_cli.main import cli

from memostore import MemostoreWarning, Store, memo
from memostore.lifecycle.maintenance import gc
from memostore.lifecycle.remote_gc import gc_remote
from memostore.odb.fsck import fsck
from memostore.odb.signatures import signature_name
from memostore.remote import push
from memostore.transport.url import open_transport
from memostore.trust import signers
from memostore.trust.signing import BadKey, parse_signature, signing_key


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@memo
def square(n: int) -> int:
    print("COMPUTED", n)
    return n * n


def _cli(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(store), *args])


def _openssh_key(path: Path) -> str:
    """An ed25519 key without a passphrase at *path*; returns its public line."""
    key = Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    path.write_bytes(private)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def _key_with_passphrase(path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )


# -- keys --------------------------------------------------------------------------------------
def test_an_ssh_key_is_reused_else_one_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMOSTORE_CONFIG_DIR", str(tmp_path / "config"))
    ssh = tmp_path / "home" / ".ssh" / "id_ed25519"
    _key_with_passphrase(ssh)  # cannot sign unattended: skipped
    made = signing_key()
    assert made is not None and made.path == tmp_path / "config" / "signing_key"
    assert (made.path.stat().st_mode & 0o777) == 0o600
    pub = made.path.with_name("signing_key.pub").read_text()
    assert pub.startswith(made.public.line)
    assert signing_key() == made  # found again, not made again

    monkeypatch.setenv("MEMOSTORE_CONFIG_DIR", str(tmp_path / "config2"))
    line = _openssh_key(ssh)
    reused = signing_key()
    assert reused is not None and reused.path == ssh and reused.public.line == line
    assert not (tmp_path / "config2").exists()


def test_a_named_key_that_cannot_be_used_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_dir: Path
) -> None:
    bad = tmp_path / "not_a_key"
    bad.write_text("hello")
    monkeypatch.setenv("MEMOSTORE_SIGNING_KEY", str(bad))
    with pytest.raises(BadKey, match="MEMOSTORE_SIGNING_KEY"):
        signing_key()
    # A call still returns its result, stored unsigned, with one warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert square(4) == 16
        assert square(5) == 25
    said = [str(w.message) for w in caught if issubclass(w.category, MemostoreWarning)]
    assert len([m for m in said if "stored unsigned" in m]) == 1, said
    assert not list(Store(store_dir).signatures.ids())
    assert square(4) == 16  # served: it originated here


# -- signatures in a store ---------------------------------------------------------------------
def test_push_signs_what_this_store_made_unsigned(
    tmp_path: Path, store_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    square(6)
    store = Store(store_dir)
    ((_, evaluation_id),) = list(store.refs.iter("evals/"))
    (line,) = store.signatures.lines(evaluation_id)
    key = signing_key()
    assert key is not None and line.startswith(key.public.line.encode())
    # As recorded before signing existed: still served here, and push signs it.
    store.signatures.remove(evaluation_id)
    capfd.readouterr()
    assert square(6) == 36 and "COMPUTED" not in capfd.readouterr().out
    push(store, str(tmp_path / "remote"))
    with open_transport(str(tmp_path / "remote")) as transport:
        sent = transport.get_bytes(signature_name(evaluation_id)).strip()
    signature = parse_signature(sent)
    assert signature is not None and signature.public == key.public
    assert signature.public.verifies(signature.signature, evaluation_id)
    assert not signature.public.verifies(signature.signature, "0" * 64)
    assert store.signatures.lines(evaluation_id) == [sent]


def test_gc_keeps_the_signatures_of_kept_evaluations_only(store_dir: Path) -> None:
    square(7)
    square(8)
    store = Store(store_dir)
    refs = dict(store.refs.iter("evals/"))
    assert sorted(store.signatures.ids()) == sorted(refs.values())
    gone_ref, gone = sorted(refs.items())[0]
    assert store.refs.delete_if_equals(gone_ref, gone)
    gc(store, grace_s=0)
    assert not store.objects.contains(gone)
    assert sorted(store.signatures.ids()) == sorted(v for k, v in refs.items() if k != gone_ref)
    assert not fsck(store).problems


def test_gc_of_a_remote_drops_the_signatures_of_what_it_deleted(
    tmp_path: Path, store_dir: Path
) -> None:
    square(9)
    square(10)
    store = Store(store_dir)
    remote = str(tmp_path / "remote")
    push(store, remote)
    refs = dict(store.refs.iter("evals/"))
    gone_ref, gone = sorted(refs.items())[0]
    with open_transport(remote) as transport:
        assert transport.delete_if_equals("refs/" + gone_ref, (gone + "\n").encode())
        gc_remote(store, transport, grace_s=0)
        left = {name.split("/")[1] for name in transport.list("sigs/")}
    assert left == {v for k, v in refs.items() if k != gone_ref}


# -- memostore trust ---------------------------------------------------------------------------
def test_trust_add_list_rm(tmp_path: Path, store_dir: Path) -> None:
    square(2)
    public = _openssh_key(tmp_path / "carol")
    pub_file = tmp_path / "carol.pub"
    pub_file.write_text(public + " carol@lab\n")
    added = _cli(store_dir, "trust", "add", "carol", str(pub_file))
    assert added.exit_code == 0, added.output
    assert _cli(store_dir, "trust", "add", "dave", *public.split()).exit_code == 0
    listed = _cli(store_dir, "trust", "list", "--json")
    rows = json.loads(listed.output)
    assert [(r["name"], r["key"], r["own"]) for r in rows[:2]] == [
        ("carol", public, False),
        ("dave", public, False),
    ]
    own = signing_key()
    assert own is not None and rows[2]["own"] and rows[2]["key"] == own.public.line
    assert rows[0]["fingerprint"].startswith("SHA256:")
    allowed = (store_dir / "allowed_signers").read_text()
    assert f"carol {public}" in allowed  # git's allowed_signers format
    removed = _cli(store_dir, "trust", "rm", "carol")
    assert removed.exit_code == 0
    assert "carol" not in _cli(store_dir, "trust", "list").output
    assert [n for n, _ in signers.list_signers(Store(store_dir))] == ["dave"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("bob", "ssh-ed25519", "AAAAnot-base64"), "copy the whole 'ssh-ed25519 AAAA...' line"),
        (("bob", "ssh-rsa", "AAAAB3NzaC1yc2E"), "expected an ed25519 public key"),
        (("bob", "/nonexistent/bob.pub"), "the path of their .pub file"),
        (("bob smith", "KEY"), None),  # the key is checked first
    ],
)
def test_trust_add_refuses_bad_input_with_the_fix(
    store_dir: Path, args: tuple[str, ...], says: str | None
) -> None:
    square(2)
    result = _cli(store_dir, "trust", "add", *args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    if says:
        assert says in result.output
    assert not (store_dir / "allowed_signers").exists()


def test_trust_add_refuses_a_name_of_two_words(tmp_path: Path, store_dir: Path) -> None:
    square(2)
    public = _openssh_key(tmp_path / "k")
    result = _cli(store_dir, "trust", "add", "bob smith", public)
    assert result.exit_code == 1 and "one word" in result.output
    result = _cli(store_dir, "trust", "rm", "nobody")
    assert result.exit_code == 1 and "memostore trust list" in result.output
