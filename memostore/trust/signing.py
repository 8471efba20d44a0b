"""Ed25519 keys and evaluation signatures, in the formats OpenSSH and git use.

The key a process signs with is found as git's ``gpg.format=ssh`` finds one,
first that exists:

1. ``$MEMOSTORE_SIGNING_KEY``: an OpenSSH ed25519 private key file;
2. ``signing_key`` in the user's memostore config directory
   (``$MEMOSTORE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/memostore``, else
   ``~/.config/memostore``);
3. ``~/.ssh/id_ed25519``, when it is an ed25519 key without a passphrase;
4. else a new key is made as in 2 (mode 0600, with its ``.pub`` beside it), so
   that memoising needs no set-up.

A signature line is ``ssh-ed25519 <public key, base64> <signature, base64>``: the
ed25519 signature of ``SIGNED_PREFIX + evaluation id``. The id pins the
arguments, the code digest, the result and the effects, so the signature
covers them all. The primitives are PyCA ``cryptography``'s. A public key is
shown by its fingerprint as ``ssh-keygen -l`` prints it (``SHA256:...``).
``cryptography`` is imported on first use: a process that only hits its own
results never loads it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MemostoreError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

ENV_SIGNING_KEY = "MEMOSTORE_SIGNING_KEY"
ENV_CONFIG_DIR = "MEMOSTORE_CONFIG_DIR"
KEY_TYPE = "ssh-ed25519"
KEY_FILE = "signing_key"
SIGNED_PREFIX = b"memostore-evaluation-signature-v1\n"
_lock = threading.Lock()
# key file path -> (its mtime, the key): a process loads its key once.
_keys: dict[Path, tuple[int, SigningKey]] = {}


class BadKey(MemostoreError):
    """A key given by the user cannot be used (the message names the fix)."""


def config_dir() -> Path:
    """The user's memostore config directory (where a made key lives)."""
    env = os.environ.get(ENV_CONFIG_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else _home() / ".config"
    return base / "memostore"


def _home() -> Path:
    try:
        return Path.home()
    except RuntimeError:  # no $HOME and no password entry (some containers)
        raise BadKey(
            f"cannot find your home directory; set {ENV_CONFIG_DIR} to a directory for "
            f"your signing key, or {ENV_SIGNING_KEY} to an ed25519 key"
        ) from None


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key: its OpenSSH base64 blob and fingerprint."""

    blob: str  # the base64 after "ssh-ed25519" in a .pub file

    @property
    def line(self) -> str:
        return f"{KEY_TYPE} {self.blob}"

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")

    def verifies(self, signature: bytes, evaluation_id: str) -> bool:
        from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            key = serialization.load_ssh_public_key(self.line.encode("ascii"))
        except (ValueError, UnsupportedAlgorithm):
            return False
        if not isinstance(key, Ed25519PublicKey):
            return False
        try:
            key.verify(signature, SIGNED_PREFIX + evaluation_id.encode("ascii"))
        except InvalidSignature:
            return False
        return True


def _public_of(key: Ed25519PrivateKey | Ed25519PublicKey) -> PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return PublicKey(line.decode("ascii").split()[1])


@dataclass(frozen=True)
class SigningKey:
    """The private key this process signs with, and where it came from."""

    private: Ed25519PrivateKey
    public: PublicKey
    path: Path

    def sign_line(self, evaluation_id: str) -> bytes:
        """The signature line of *evaluation_id* (see the module's docstring)."""
        signature = self.private.sign(SIGNED_PREFIX + evaluation_id.encode("ascii"))
        encoded = base64.b64encode(signature).decode("ascii")
        return f"{self.public.line} {encoded}".encode("ascii")


@dataclass(frozen=True)
class Signature:
    """One parsed signature line (not yet verified)."""

    public: PublicKey
    signature: bytes


def parse_signature(line: bytes) -> Signature | None:
    """The signature a line holds, or None when it is not one."""
    words = line.decode("ascii", errors="replace").split()
    if len(words) != 3 or words[0] != KEY_TYPE:
        return None
    try:
        public = _public_of(_load_public(words[1]))
        signature = base64.b64decode(words[2], validate=True)
    except (BadKey, binascii.Error, ValueError):
        return None
    return Signature(public, signature) if len(signature) == 64 else None


def _load_public(blob: str) -> Ed25519PublicKey:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_ssh_public_key(f"{KEY_TYPE} {blob}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
        raise BadKey("not a valid ssh-ed25519 public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadKey("not an ed25519 key")
    return key


def parse_public_key(text: str) -> PublicKey:
    """The key of an ``ssh-ed25519 AAAA... [comment]`` line (a .pub file's content).

    Raises:
        BadKey: it is not one; the message names what is expected.
    """
    words = text.strip().split()
    if len(words) < 2 or words[0] != KEY_TYPE:
        kind = words[0] if words else "nothing"
        raise BadKey(
            f"expected an ed25519 public key ('ssh-ed25519 AAAA...', as in ~/.ssh/id_ed25519.pub"
            f" or ~/.config/memostore/{KEY_FILE}.pub), got {kind[:40]!r}"
        )
    try:
        return _public_of(_load_public(words[1]))
    except BadKey as exc:
        raise BadKey(
            f"{exc}: copy the whole 'ssh-ed25519 AAAA...' line of the signer's .pub file"
        ) from None


# -- the key this process signs with ----------------------------------------------------------
def _load_private(path: Path, *, required: bool) -> SigningKey | None:
    """The ed25519 key at *path*; None (or BadKey when *required*) when unusable."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        st = path.stat()
        cached = _keys.get(path)
        if cached is not None and cached[0] == st.st_mtime_ns:
            return cached[1]
        data = path.read_bytes()
    except OSError as exc:
        if required:
            raise BadKey(f"cannot read the signing key {path} ({exc.strerror or exc})") from None
        return None
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        if required:
            raise BadKey(
                f"{path} is not an OpenSSH private key without a passphrase ({exc}); "
                f"unset {ENV_SIGNING_KEY} or name such an ed25519 key"
            ) from None
        return None
    if not isinstance(key, Ed25519PrivateKey):
        if required:
            raise BadKey(f"{path} is not an ed25519 key; make one with ssh-keygen -t ed25519")
        return None
    found = SigningKey(key, _public_of(key), path)
    with _lock:
        _keys[path] = (st.st_mtime_ns, found)
    return found


def signing_key(*, create: bool = True) -> SigningKey | None:
    """The key this user signs with, found (or made) as the module's docstring says.

    Returns None only without *create* when no key exists yet.

    Raises:
        BadKey: ``$MEMOSTORE_SIGNING_KEY`` names an unusable key, or none can be made.
    """
    named = os.environ.get(ENV_SIGNING_KEY)
    if named:
        return _load_private(Path(named).expanduser(), required=True)
    own = config_dir() / KEY_FILE
    found = _load_private(own, required=False) if own.exists() else None
    if found is None and not own.exists():
        found = _load_private(_home() / ".ssh" / "id_ed25519", required=False)
    if found is not None or not create:
        return found
    return _make_key(own)


def _make_key(path: Path) -> SigningKey:
    """Make a key at *path* (and ``path.pub``); the first of racing processes wins."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = _public_of(key)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # never replaces a key another process made meanwhile
    except OSError as exc:
        raise BadKey(
            f"cannot make a signing key at {path} ({exc.strerror or exc}); set "
            f"{ENV_CONFIG_DIR} to a writable directory or {ENV_SIGNING_KEY} to an ed25519 key"
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    found = _load_private(path, required=True)
    assert found is not None
    if found.public == public:
        pub = path.with_name(path.name + ".pub")
        with contextlib.suppress(OSError):
            pub.write_text(f"{public.line} memostore\n")
    return found
