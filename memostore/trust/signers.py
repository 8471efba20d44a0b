"""Who may claim results in a store: its allowed signers, and the check a hit makes.

A hit serves an evaluation when this store wrote it (no origin record: it
originated here, signed or not, see :mod:`.origins`) or when a key of the
store's allowed signers signed its id (:mod:`.signing`). The store's own
signer, the key this user signs with, is always allowed. So an evaluation
pulled or fetched from a remote is a miss unless someone trusted computed it;
one written here before signing existed stays served here, while a pulled
unsigned one is a miss.

The allowed signers are the file ``allowed_signers`` at the store's root, in
git's ``gpg.ssh.allowedSignersFile`` format: one ``principal ssh-ed25519
AAAA...`` a line, ``#`` comments. ``memostore trust add/list/rm`` edit it.

The verdict on an evaluation that can be served is kept per process (its
signature is verified once); only whether its signer is still allowed is
looked up again, from the file, re-read when it changes. A refusal is not
kept: a miss costs a computation anyway, and a signature that arrives later
is then seen at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemostoreError
from .origins import origins_of
from .signing import BadKey, PublicKey, parse_public_key, parse_signature, signing_key

if TYPE_CHECKING:
    from ..odb.store import Store

ALLOWED_SIGNERS = "allowed_signers"
OWN_PRINCIPAL = "you"
_lock = threading.Lock()
# (store root or id of a memory store, evaluation id) -> the verdict
_verdicts: dict[tuple[Any, str], Verdict] = {}
_VERDICTS_MAX = 1 << 16
# allowed_signers path -> (stat stamp, {key blob: principal})
_allowed_cache: dict[Path, tuple[Any, dict[str, str]]] = {}
_memory_allowed: dict[int, dict[str, str]] = {}


@dataclass(frozen=True)
class Verdict:
    """What is known of an evaluation's signers, for a hit and for display.

    Attributes:
        local: this store wrote it (it has no origin record).
        signer: the key whose signature verifies (the first that does), or None.
        bad: a signature that does not verify was found (and none that does).
        sources: where a pulled one came from (for messages).
    """

    local: bool
    signer: PublicKey | None
    bad: PublicKey | None
    sources: tuple[str, ...] = ()


def _store_key(store: Store) -> Any:
    return store.root if store.root is not None else id(store.objects)


def verdict(store: Store, evaluation_id: str) -> Verdict:
    """The verified facts about *evaluation_id*'s origin and signature (cached)."""
    key = (_store_key(store), evaluation_id)
    found = _verdicts.get(key)
    if found is not None:
        return found
    sources = origins_of(store.objects, evaluation_id)
    signer = bad = None
    for line in store.signatures.lines(evaluation_id):
        signature = parse_signature(line)
        if signature is None:
            continue
        if signature.public.verifies(signature.signature, evaluation_id):
            signer = signature.public
            break
        bad = bad or signature.public
    found = Verdict(
        not sources, signer, None if signer else bad, tuple(sorted(s.url for s in sources))
    )
    if found.local or found.signer is not None:
        # Only what can serve a hit is kept: a signature a later pull brings, in
        # another process, is seen at this process's next call.
        with _lock:
            if len(_verdicts) >= _VERDICTS_MAX:
                _verdicts.clear()
            _verdicts[key] = found
    return found


def forget_verdict(store: Store, evaluation_id: str) -> None:
    """Drop the cached verdict (its signatures changed: a pull brought one)."""
    with _lock:
        _verdicts.pop((_store_key(store), evaluation_id), None)


def refusal(store: Store, evaluation_id: str) -> str | None:
    """Why a hit must not serve *evaluation_id*, or None when it may."""
    found = verdict(store, evaluation_id)
    if found.local:
        return None
    if found.signer is not None:
        if principal(store, found.signer) is not None:
            return None
        who = f"computed by {found.signer.fingerprint}"
    elif found.bad is not None:
        return (
            f"its signature by {found.bad.fingerprint} does not match it (the evaluation was "
            "changed, or the signature copied from another one); not served"
        )
    else:
        where = f" from {', '.join(found.sources)}" if found.sources else ""
        who = f"it came{where} unsigned"
    return (
        f"{who}, not a signer you trust: memostore trust add NAME KEY, with KEY its author's "
        "public key (ssh-ed25519 AAAA...)"
    )


def principal(store: Store, key: PublicKey) -> str | None:
    """The name *key* is allowed under in *store*; None when it is not allowed."""
    name = allowed(store).get(key.blob)
    if name is not None:
        return name
    with contextlib.suppress(BadKey):
        own = signing_key(create=False)
        if own is not None and own.public == key:
            return OWN_PRINCIPAL
    return None


def signer_info(store: Store, evaluation_id: str) -> dict[str, Any] | None:
    """Who signed an evaluation, for ``log``/``show``/the dashboard; None when unsigned.

    ``{"fingerprint": "SHA256:...", "principal": NAME or None, "verified": bool}``:
    *verified* False means a signature is there but does not match the evaluation.
    """
    try:
        found = verdict(store, evaluation_id)
    except Exception:
        return None
    key = found.signer or found.bad
    if key is None:
        return None
    name = principal(store, key) if found.signer is not None else None
    return {"fingerprint": key.fingerprint, "principal": name, "verified": found.bad is None}


# -- signing ----------------------------------------------------------------------------------
def sign(store: Store, evaluation_id: str) -> bool:
    """Sign *evaluation_id* with this user's key; returns whether a signature was added.

    Raises:
        BadKey: no key can be found or made (the message names the fix).
    """
    key = signing_key()
    assert key is not None
    line = key.sign_line(evaluation_id)
    added = store.signatures.add(evaluation_id, [line])
    if added:
        forget_verdict(store, evaluation_id)
    return added


def add_received(store: Store, evaluation_id: str, lines: list[bytes]) -> None:
    """Store those of *lines* (from a remote) that are signature lines at all.

    They are verified when a hit needs them (:func:`verdict`); one that does not
    verify is kept so that the miss can say so rather than "unsigned".
    """
    parsed = [line for line in lines if parse_signature(line) is not None]
    if parsed and store.signatures.add(evaluation_id, parsed):
        forget_verdict(store, evaluation_id)


# -- the allowed signers file -------------------------------------------------------------------
def _path(store: Store) -> Path | None:
    return store.root / ALLOWED_SIGNERS if store.root is not None else None


def _stamp(path: Path) -> Any:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)


def allowed(store: Store) -> dict[str, str]:
    """Key blob -> principal of every allowed signer (the file, cached until it changes)."""
    path = _path(store)
    if path is None:
        return _memory_allowed.get(id(store.objects), {})
    stamp = _stamp(path)
    cached = _allowed_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    entries = dict(_entries(path)) if stamp is not None else {}
    by_key = {key.blob: name for name, key in entries.items()}
    with _lock:
        _allowed_cache[path] = (stamp, by_key)
    return by_key


def _entries(path: Path) -> list[tuple[str, PublicKey]]:
    """(principal, key) of each usable line; lines of other key types are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MemostoreError(f"cannot read {path} ({exc.strerror or exc})") from None
    out = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#") or "ssh-ed25519" not in words[1:]:
            continue
        at = words.index("ssh-ed25519", 1)  # options may stand between name and key
        with contextlib.suppress(BadKey):
            out.append((words[0], parse_public_key(" ".join(words[at : at + 2]))))
    return out


def list_signers(store: Store) -> list[tuple[str, PublicKey]]:
    """(principal, key) of every allowed signer, as the file lists them."""
    path = _path(store)
    if path is None:
        return [(n, PublicKey(b)) for b, n in _memory_allowed.get(id(store.objects), {}).items()]
    return _entries(path) if path.exists() else []


def add_signer(store: Store, name: str, key: PublicKey) -> None:
    """Allow *key* under *name* (replacing what *name* named before).

    Raises:
        MemostoreError: *name* is not one word.
    """
    if not name or any(c.isspace() for c in name) or name.startswith("#") or "," in name:
        raise MemostoreError(
            f"a signer's name is one word without commas (an email or a login), not {name!r}"
        )
    _write(store, [*((n, k) for n, k in list_signers(store) if n != name), (name, key)])


def remove_signer(store: Store, name: str) -> None:
    """Stop allowing *name*.

    Raises:
        MemostoreError: no signer has that name.
    """
    signers = list_signers(store)
    if not any(n == name for n, _ in signers):
        known = ", ".join(sorted({n for n, _ in signers})) or "none"
        raise MemostoreError(
            f"no allowed signer named {name!r} (allowed: {known}); see memostore trust list"
        )
    _write(store, [(n, k) for n, k in signers if n != name])


def _write(store: Store, signers: list[tuple[str, PublicKey]]) -> None:
    path = _path(store)
    if path is None:
        _memory_allowed[id(store.objects)] = {k.blob: n for n, k in signers}
        return
    text = "".join(f"{name} {key.line}\n" for name, key in signers)
    tmp = path.with_name(f".{ALLOWED_SIGNERS}.{os.getpid()}.tmp")
    tmp.write_text("# memostore: whose signed evaluations this store serves\n" + text)
    os.replace(tmp, path)
