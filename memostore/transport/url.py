"""Remote URLs: parse one and open the transport it names.

Accepted forms:

- ``/abs/path``, ``relative/path``, ``~/path``: a directory;
- ``file:///abs/path`` (or ``file://localhost/abs/path``): a directory;
- ``s3://bucket`` or ``s3://bucket/prefix``: S3-compatible object storage;
- ``memory://NAME``: a process-local in-memory remote (for tests).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from .base import RemoteError, Transport

_SUPPORTED = "use a directory path, file:///path or s3://bucket/prefix"


def open_transport(url: str, **options: Any) -> Transport:
    """Open the transport for *url*; no network or file access happens yet.

    Args:
        url: the remote's URL (see the module doc for the forms).
        **options: passed to the transport's constructor, e.g.
            ``endpoint_url=...`` for S3 or ``create=False`` for a directory.

    Raises:
        RemoteError: the URL is malformed or names an unsupported scheme.

    Example:
        >>> open_transport("s3://lab-artifacts/memostore", endpoint_url="http://minio:9000")
    """
    if not isinstance(url, str) or not url.strip():
        raise RemoteError(f"empty remote URL; {_SUPPORTED}")
    url = url.strip()
    scheme, sep, _ = url.partition("://")
    if not sep or (len(scheme) == 1 and scheme.isalpha()):
        # No scheme (a Windows drive letter counts as none): a directory path.
        from .directory import DirectoryTransport

        return DirectoryTransport(url, **options)

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        raise RemoteError(
            f"remote URL {url!r} has a query or fragment; pass options separately "
            "(e.g. `memostore remote add NAME URL --endpoint URL`)"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise RemoteError(
                f"file URL {url!r} names host {parts.netloc!r}; mount the share and use "
                "file:///mount/point"
            )
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise RemoteError(f"file URL {url!r} needs an absolute path: file:///abs/path")
        from .directory import DirectoryTransport

        return DirectoryTransport(path, **options)
    if scheme == "s3":
        bucket = parts.netloc
        if not bucket:
            raise RemoteError(f"S3 URL {url!r} names no bucket; use s3://bucket/prefix")
        from .s3 import S3Transport

        return S3Transport(bucket, unquote(parts.path).strip("/"), **options)
    if scheme == "memory":
        from .memory import MemoryTransport

        if options:
            raise RemoteError(f"memory remotes take no options, got {sorted(options)}")
        return MemoryTransport.named(parts.netloc + parts.path)
    raise RemoteError(f"unsupported remote URL {url!r}; {_SUPPORTED}")
