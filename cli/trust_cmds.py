"""``memostore trust add/list/rm``: whose signed evaluations this store serves."""

from __future__ import annotations

from pathlib import Path

import click

from memostore.errors import MemostoreError

from .output import Output
from .state import State, pass_state

# A .pub file is one line; anything much larger is not one, and is never read whole.
_PUB_MAX_BYTES = 64 << 10


def register(group: click.Group) -> None:
    group.add_command(trust_group)


@click.group("trust")
def trust_group() -> None:
    """Manage the signers whose evaluations a hit may serve.

    An evaluation pulled from a remote is served only when a key listed here
    (or your own signing key) signed it; the list is the store's
    allowed_signers file, in git's format.
    """


def _key_text(words: tuple[str, ...]) -> str:
    """KEY as given: the words of an 'ssh-ed25519 AAAA...' line, or a .pub file's path."""
    path = Path(words[0]).expanduser()
    if len(words) == 1 and path.is_file():
        with open(path, "rb") as f:
            return f.read(_PUB_MAX_BYTES).decode("utf-8", errors="replace")
    if len(words) == 1 and not words[0].startswith("ssh-"):
        raise MemostoreError(
            f"{words[0]!r} is neither a public key nor a file; give the signer's "
            "'ssh-ed25519 AAAA...' line (quoted) or the path of their .pub file"
        )
    return " ".join(words)


@trust_group.command("add")
@click.argument("name")
@click.argument("key", nargs=-1, required=True)
@pass_state
def trust_add(state: State, name: str, key: tuple[str, ...]) -> None:
    """Serve evaluations signed by KEY, shown as NAME.

    \b
    memostore trust add alice 'ssh-ed25519 AAAAC3Nza... alice@lab'
    memostore trust add alice ~/alice_signing_key.pub
    """
    from memostore.trust.signers import add_signer
    from memostore.trust.signing import parse_public_key

    public = parse_public_key(_key_text(key))
    add_signer(state.store, name, public)
    Output().line(f"trusting {name}: {public.fingerprint}")


@trust_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the signers as JSON.")
@pass_state
def trust_list(state: State, as_json: bool) -> None:
    """The allowed signers, and your own signing key (always trusted)."""
    from memostore.trust.signers import OWN_PRINCIPAL, list_signers
    from memostore.trust.signing import signing_key

    rows = [
        {"name": name, "key": key.line, "fingerprint": key.fingerprint, "own": False}
        for name, key in list_signers(state.store)
    ]
    own = signing_key(create=False)
    if own is not None:
        rows.append(
            {
                "name": OWN_PRINCIPAL,
                "key": own.public.line,
                "fingerprint": own.public.fingerprint,
                "own": True,
                "path": str(own.path),
            }
        )
    out = Output()
    if as_json:
        out.json(rows)
        return
    for row in rows:
        note = f"  (your signing key, {row['path']})" if row["own"] else ""
        out.line(f"{row['name']}  {row['fingerprint']}  {row['key']}{note}")
    if own is None:
        out.line("(you have no signing key yet: one is made when you first store a result)")


@trust_group.command("rm")
@click.argument("name")
@pass_state
def trust_rm(state: State, name: str) -> None:
    """Stop serving evaluations signed by NAME's key (those computed here stay served)."""
    from memostore.trust.signers import remove_signer

    remove_signer(state.store, name)
    Output().line(f"no longer trusting {name}")
