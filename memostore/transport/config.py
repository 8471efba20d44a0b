"""Named remotes, kept in the store's ``config.json`` (never credentials).

The config holds, per remote, only where it is and how to treat it::

    {"remotes": {"origin": {"url": "s3://lab/ms", "endpoint": "http://minio:9000",
                            "auto_fetch": true, "trusted": true}}}

``trusted`` says that code stored by value (pickled) in objects pulled from
that remote may be loaded (``memostore/trust/origins.py``); without it, values
from the remote restore through the decoding allowlist only.

Credentials always come from the standard chains (AWS environment variables,
profiles, instance roles; file permissions for directories), so a store can be
copied or shared without leaking a secret. URLs that embed a user name or a
password are refused.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import MemostoreError
from ..odb.lockfile import LockFile

if TYPE_CHECKING:
    from ..odb.store import Store
    from .base import Transport

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DEFAULT_REMOTE = "origin"


class RemoteNotFound(MemostoreError, KeyError):
    """No remote of that name is configured."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "remote not found"


@dataclass(frozen=True)
class RemoteConfig:
    """One configured remote.

    Attributes:
        name: the remote's name in this store (``origin``).
        url: a directory path, ``file://`` URL or ``s3://bucket/prefix``.
        endpoint: the S3 endpoint URL, when not from ``AWS_ENDPOINT_URL``.
        auto_fetch: whether a memoised call that misses locally looks here.
        hardlinks: for a directory on the store's file system, whether a push
            hard-links object files instead of copying them.
        trusted: whether code stored by value in objects pulled from here may be
            loaded (unpickled); off, those values restore through the allowlist only.
    """

    name: str
    url: str
    endpoint: str | None = None
    auto_fetch: bool = False
    hardlinks: bool = True
    trusted: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"url": self.url, "auto_fetch": self.auto_fetch}
        if self.endpoint:
            data["endpoint"] = self.endpoint
        if not self.hardlinks:
            data["hardlinks"] = False
        if self.trusted:
            data["trusted"] = True
        return data

    @classmethod
    def from_json(cls, name: str, data: Any) -> RemoteConfig:
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise MemostoreError(
                f"remote {name!r} in config.json has no url; fix it with "
                f"`memostore remote remove {name}` and `memostore remote add {name} URL`"
            )
        endpoint = data.get("endpoint")
        return cls(
            name=name,
            url=data["url"],
            endpoint=endpoint if isinstance(endpoint, str) and endpoint else None,
            auto_fetch=bool(data.get("auto_fetch", False)),
            hardlinks=data.get("hardlinks", True) is not False,
            # Only a literal true trusts: a damaged or odd value must not.
            trusted=data.get("trusted", False) is True,
        )

    @property
    def is_directory(self) -> bool:
        return "://" not in self.url or self.url.startswith("file://")


def check_remote_name(name: str) -> str:
    """Return *name* if it can name a remote, else raise MemostoreError."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise MemostoreError(
            f"invalid remote name {name!r}: use letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit), e.g. origin"
        )
    return name


def looks_like_url(text: str) -> bool:
    """True when *text* is a remote URL or path rather than a remote's name."""
    return "://" in text or "/" in text or text.startswith("~") or text in (".", "..")


def normalise_url(url: str) -> str:
    """The form of *url* kept in the config: absolute for directories, no secrets.

    Raises:
        MemostoreError: the URL embeds credentials or cannot name a remote.
    """
    url = url.strip()
    if not url:
        raise MemostoreError(
            "empty remote URL; use a directory path, file:///path or s3://bucket/prefix"
        )
    if "://" not in url:
        # A relative path would mean something else from every working directory.
        return os.path.abspath(os.path.expanduser(url))
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise MemostoreError(
            "remote URLs must not contain credentials; remove the user/password part and "
            "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE instead"
        )
    return url.rstrip("/") if parts.scheme == "s3" else url


def normalise_endpoint(endpoint: str | None) -> str | None:
    """Check an S3 endpoint URL (``http(s)://host[:port]``); None stays None."""
    if endpoint is None or not endpoint.strip():
        return None
    endpoint = endpoint.strip().rstrip("/")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MemostoreError(
            f"invalid endpoint {endpoint!r}: give the S3 service's URL, e.g. http://minio:9000"
        )
    if parts.username is not None or parts.password is not None:
        raise MemostoreError(
            "endpoint URLs must not contain credentials; use AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE instead"
        )
    return endpoint


# -- reading and writing the config -------------------------------------------------------
def list_remotes(store: Store) -> list[RemoteConfig]:
    """Every configured remote, in name order."""
    section = store.read_config().get("remotes")
    section = {} if section is None else section
    _check_section(store, section)
    return [RemoteConfig.from_json(name, section[name]) for name in sorted(section)]


def _check_section(store: Store, section: Any) -> None:
    if not isinstance(section, dict):
        where = store.config_path or "config.json"
        raise MemostoreError(f"{where}: 'remotes' must be a JSON object; fix or remove it")


def _update(store: Store, change: Any) -> None:
    """Read-modify-write the config under a lock, so concurrent edits are not lost."""
    path = store.config_path
    if path is None:
        config = store.read_config()
        change(config)
        store.write_config(config)
        return
    with LockFile(path):
        config = store.read_config()
        change(config)
        store.write_config(config)


def add_remote(
    store: Store,
    name: str,
    url: str,
    *,
    endpoint: str | None = None,
    auto_fetch: bool = False,
    hardlinks: bool = True,
    trusted: bool = False,
    replace: bool = False,
) -> RemoteConfig:
    """Configure a remote (no network access).

    Args:
        store: the store whose config to change.
        name: the remote's name.
        url: directory path, ``file:///path`` or ``s3://bucket/prefix``.
        endpoint: S3 endpoint, for services other than AWS.
        auto_fetch: look up local misses on this remote.
        hardlinks: let a push hard-link object files into a directory remote on
            the store's file system (False: always copy them).
        trusted: let code stored by value in objects pulled from this remote be
            loaded (see :func:`set_remote_trust`).
        replace: overwrite a remote of the same name.

    Raises:
        MemostoreError: bad name or URL, or the name is taken (without *replace*).
    """
    remote = RemoteConfig(
        check_remote_name(name),
        normalise_url(url),
        normalise_endpoint(endpoint),
        auto_fetch,
        hardlinks,
        trusted,
    )
    if remote.endpoint and not remote.url.startswith("s3://"):
        raise MemostoreError(f"--endpoint applies to s3:// remotes only, not {remote.url}")
    if not remote.hardlinks and not remote.is_directory:
        raise MemostoreError(f"--no-hardlinks applies to directory remotes only, not {remote.url}")
    from ..errors import RemoteError

    try:
        # Parses the URL; creates no connection and touches no file.
        open_remote(remote, "push").close()
    except RemoteError as exc:
        raise MemostoreError(str(exc)) from exc

    def change(config: dict[str, Any]) -> None:
        section = config.setdefault("remotes", {})
        _check_section(store, section)
        if name in section and not replace:
            raise MemostoreError(
                f"remote {name!r} exists already ({section[name].get('url')}); remove it first "
                f"(memostore remote remove {name}) or choose another name"
            )
        section[name] = remote.to_json()

    _update(store, change)
    return remote


def remove_remote(store: Store, name: str) -> None:
    """Forget a remote (its files are left alone)."""

    def change(config: dict[str, Any]) -> None:
        section = config.get("remotes")
        _check_section(store, {} if section is None else section)
        if not section or name not in section:
            raise RemoteNotFound(_not_found_message(store, name))
        del section[name]

    _update(store, change)


def set_remote_trust(store: Store, name: str, trusted: bool = True) -> RemoteConfig:
    """Mark a configured remote trusted (or not): whether its pickled code may be loaded.

    Objects pulled from a remote are recorded as its own (``origins/``, see
    ``docs/format.md``); code stored by value (cloudpickle) in them runs when
    it is loaded, so it is loaded only while their remote is trusted. Trust
    everyone who can write to the remote, or leave it off: values then
    restore through the decoding allowlist alone. Takes effect at once, also
    for objects pulled before.

    Raises:
        RemoteNotFound: no remote of that name.
    """
    updated: list[RemoteConfig] = []

    def change(config: dict[str, Any]) -> None:
        section = config.get("remotes") or {}
        _check_section(store, section)
        if name not in section:
            raise RemoteNotFound(_not_found_message(store, name))
        remote = dataclasses.replace(RemoteConfig.from_json(name, section[name]), trusted=trusted)
        section[name] = {**section[name], **remote.to_json()}
        if not trusted:
            section[name].pop("trusted", None)
        updated.append(remote)

    _update(store, change)
    return updated[0]


def _not_found_message(store: Store, name: str) -> str:
    names = [r.name for r in list_remotes(store)]
    known = f"configured: {', '.join(names)}" if names else "none is configured"
    return f"no remote named {name!r} ({known}); add one with `memostore remote add {name} URL`"


def get_remote(store: Store, name: str | None = None) -> RemoteConfig:
    """The remote called *name*; with None, the only one, or else ``origin``.

    A *name* that is a URL or a path gives an unnamed, ad-hoc remote.
    """
    if name is not None and looks_like_url(name):
        return RemoteConfig(name="", url=normalise_url(name))
    remotes = {r.name: r for r in list_remotes(store)}
    if name is None:
        if len(remotes) == 1:
            return next(iter(remotes.values()))
        if DEFAULT_REMOTE in remotes:
            return remotes[DEFAULT_REMOTE]
        if not remotes:
            raise RemoteNotFound(
                "no remote is configured; add one with `memostore remote add origin URL`"
            )
        raise RemoteNotFound(
            f"several remotes are configured ({', '.join(sorted(remotes))}) and none is "
            "called origin; name the one to use"
        )
    if name not in remotes:
        raise RemoteNotFound(_not_found_message(store, name))
    return remotes[name]


# -- opening ---------------------------------------------------------------------------------
# Auto-fetch runs inside a user's call: it must give up quickly on a dead endpoint.
_FETCH_S3_OPTIONS = {"connect_timeout": 1.0, "read_timeout": 10.0, "max_attempts": 2}


def _options(remote: RemoteConfig, purpose: str) -> dict[str, Any]:
    if remote.url.startswith("s3://"):
        options: dict[str, Any] = {}
        if remote.endpoint:
            options["endpoint_url"] = remote.endpoint
        if purpose == "fetch":
            options.update(_FETCH_S3_OPTIONS)
        return options
    if remote.is_directory:
        # Only a push may create the directory: a pull or a lookup from a path
        # that is gone (an unmounted share) must say so, not see an empty remote.
        return {"create": purpose == "push", "hardlinks": remote.hardlinks}
    return {}


def open_remote(remote: RemoteConfig, purpose: str = "pull") -> Transport:
    """The transport for *remote*; *purpose* is ``push``, ``pull`` or ``fetch``."""
    from .url import open_transport

    return open_transport(remote.url, **_options(remote, purpose))
