"""A remote in S3-compatible object storage (``s3://bucket/prefix``).

What is atomic, and why:

- S3 makes every PUT (and every completed multipart upload) visible whole, so
  ``put_bytes``/``put_file`` are atomic by the service's own guarantee.
- ``add_if_new`` is a conditional write, ``If-None-Match: *``: the service
  refuses it (412) when the key exists. Big files go through a multipart
  upload whose *completion* carries the condition, so the parts are sent in
  parallel and only the final step is conditional.
- ``set_if_equals`` reads the ref and its ETag, compares the content, then
  writes with ``If-Match: <etag>`` (``If-None-Match: *`` when the ref must be
  absent). A write that lost a race gets 412 and the call returns False.

AWS S3 has honoured both conditions since late 2024, as do MinIO, Ceph RGW
and Cloudflare R2 in current versions. ``moto_server`` (the tests' server)
accepts the headers but checks them outside any lock, so under concurrent
writers it can let two conditional writes through. For a server that rejects
the headers, pass ``conditional_writes=False``: ``add_if_new`` then checks with
HEAD before it writes (two racers may both report True, harmless for
immutable objects) and ``set_if_equals`` is no longer safe against concurrent
writers.

boto3 is imported when a transport is created, not when this module is, so the
rest of memostore works without the ``s3`` extra.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import install_hint
from .base import (
    Listed,
    NotFoundOnRemote,
    RemoteError,
    RemoteObjectTooLarge,
    RemoteUnreachable,
    Transport,
    as_bytes_or_path,
    is_valid_name,
    local_file,
    temp_name,
    validate_name,
    validate_prefix,
)

MiB = 1024 * 1024
_MAX_PARTS = 10_000
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
_DENIED_CODES = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
}
# 409: another conditional write to the same key is in flight; try again.
_CONFLICT_CODES = {"ConditionalRequestConflict", "409", "OperationAborted"}
_PRECONDITION_CODES = {"PreconditionFailed", "412"}
_ENDPOINT_FIX = (
    "set AWS_ENDPOINT_URL or `memostore remote add NAME s3://bucket/prefix --endpoint URL`"
)


def _import_boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise RemoteError(
            f"s3:// remotes need boto3, in the s3 extra: {install_hint('s3')}"
        ) from exc
    return boto3


def endpoint_from_env() -> str | None:
    """The S3 endpoint named by the standard AWS variables, if any."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


class S3Transport(Transport):
    """A remote kept as objects under ``s3://bucket/prefix/``.

    Args:
        bucket: the bucket (it must exist).
        prefix: key prefix inside the bucket ("" for the bucket's root).
        endpoint_url: S3-compatible endpoint (MinIO, Ceph, R2, ...); default
            ``$AWS_ENDPOINT_URL_S3``, then ``$AWS_ENDPOINT_URL``, then AWS.
        region_name: the bucket's region; default from the AWS config chain.
        profile_name: an AWS profile; credentials otherwise come from the
            standard chain (environment, ``~/.aws``, instance role).
        conditional_writes: use ``If-None-Match``/``If-Match`` (see module doc).
        multipart_threshold: files at least this big are uploaded and
            downloaded in parts.
        multipart_chunksize: part size.
        max_concurrency: parallel part transfers per file.
        connect_timeout: seconds to wait for a TCP connection.
        read_timeout: seconds to wait for a response once connected.
        max_attempts: total attempts per request (retries on throttling and
            connection errors); with the defaults a refused connection fails at
            once and a silent endpoint within about 10 s.
        **client_kwargs: passed to ``boto3.client("s3", ...)`` (e.g.
            ``aws_access_key_id``, ``config`` merged over ours).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        profile_name: str | None = None,
        conditional_writes: bool = True,
        multipart_threshold: int = 16 * MiB,
        multipart_chunksize: int = 16 * MiB,
        max_concurrency: int = 8,
        connect_timeout: float = 2.0,
        read_timeout: float = 30.0,
        max_attempts: int = 3,
        **client_kwargs: Any,
    ) -> None:
        if not bucket or "/" in bucket:
            raise RemoteError(f"invalid S3 bucket name {bucket!r}; use s3://bucket/prefix")
        prefix = prefix.strip("/")
        if prefix:
            validate_prefix(prefix)
        self.bucket = bucket
        self.prefix = prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url or endpoint_from_env()
        self.conditional_writes = conditional_writes
        self.multipart_threshold = multipart_threshold
        self.multipart_chunksize = multipart_chunksize
        self.max_concurrency = max_concurrency

        boto3 = _import_boto3()
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            max_pool_connections=max(10, 2 * max_concurrency),
            # Self-hosted endpoints rarely have wildcard DNS for bucket subdomains.
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        user_config = client_kwargs.pop("config", None)
        if user_config is not None:
            config = config.merge(user_config)  # the caller's settings win
        session = boto3.session.Session(profile_name=profile_name)
        self._client = session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=region_name,
            config=config,
            **client_kwargs,
        )
        self.transfer_config = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            use_threads=True,
        )

    # -- helpers -------------------------------------------------------------------
    def _key(self, name: str) -> str:
        validate_name(name)
        return f"{self.prefix}/{name}" if self.prefix else name

    def _where(self) -> str:
        return f"{self.url} (endpoint {self.endpoint_url or 'AWS default'})"

    def _translate(self, exc: BaseException, action: str, name: str) -> RemoteError:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
            exc = exc.__context__  # boto3 wraps the ClientError in a plain message
        if getattr(exc, "last_exception", None) is not None:
            exc = exc.last_exception  # type: ignore[attr-defined]  # retries exhausted
        where = f"{action} {name} on {self._where()}"
        if isinstance(
            exc,
            (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError),
        ):
            return RemoteUnreachable(
                f"cannot reach the S3 endpoint while {where}: {exc}; check the network, "
                f"or {_ENDPOINT_FIX}"
            )
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return RemoteError(
                f"no usable AWS credentials for {self.url}: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run `aws configure`"
            )
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _NOT_FOUND_CODES:
                return NotFoundOnRemote(name, self.url)
            if code == "NoSuchBucket":
                return RemoteError(
                    f"bucket {self.bucket!r} does not exist at {self._where()}; create it "
                    f"(aws s3 mb s3://{self.bucket}) or fix the remote URL"
                )
            if code in _DENIED_CODES:
                return RemoteError(
                    f"access denied while {where} ({code}); check the AWS credentials "
                    "(AWS_PROFILE, AWS_ACCESS_KEY_ID) and the bucket policy"
                )
            return RemoteError(f"S3 error while {where}: {exc}")
        return RemoteError(f"S3 error while {where}: {exc}")

    @contextlib.contextmanager
    def _errors(self, action: str, name: str) -> Iterator[None]:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer import exceptions as transfer_errors

        try:
            yield
        except (
            BotoCoreError,
            ClientError,
            Boto3Error,
            transfer_errors.RetriesExceededError,
            transfer_errors.S3UploadFailedError,
            transfer_errors.S3DownloadFailedError,
        ) as exc:
            raise self._translate(exc, action, name) from exc

    @staticmethod
    def _code(exc: BaseException) -> str:
        response = getattr(exc, "response", None) or {}
        return str(response.get("Error", {}).get("Code", ""))

    def _is_client_error(self, exc: BaseException, codes: set[str]) -> bool:
        from botocore.exceptions import ClientError

        return isinstance(exc, ClientError) and self._code(exc) in codes

    # -- the contract ----------------------------------------------------------------
    def put_bytes(self, name: str, data: bytes) -> None:
        key = self._key(name)
        with self._errors("writing", name):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))

    def put_file(self, name: str, path: Path) -> None:
        key = self._key(name)
        src = local_file(path)
        with self._errors("uploading", name):
            self._client.upload_file(os.fspath(src), self.bucket, key, Config=self.transfer_config)

    def add_if_new(self, name: str, data: bytes | Path, *, link: bool = False) -> bool:
        key = self._key(name)
        data = as_bytes_or_path(data)
        with self._errors("adding", name):
            # Skip the upload when the object is there already.
            skip_check = isinstance(data, bytes) and self.conditional_writes
            if not skip_check and self._head(key) is not None:
                return False
            if not self.conditional_writes:
                if isinstance(data, Path):
                    self.put_file(name, data)
                else:
                    self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
                return True
            for attempt in range(8):
                try:
                    if isinstance(data, bytes):
                        self._client.put_object(
                            Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*"
                        )
                    else:
                        self._upload_if_absent(key, data)
                    return True
                except Exception as exc:
                    if self._is_client_error(exc, _PRECONDITION_CODES):
                        return False
                    if not self._is_client_error(exc, _CONFLICT_CODES):
                        raise
                # A concurrent conditional write is in flight; once it lands, we lose.
                time.sleep(0.05 * (attempt + 1))
                if self._head(key) is not None:
                    return False
            raise RemoteError(f"adding {name} on {self._where()} kept conflicting; try again")

    def _upload_if_absent(self, key: str, path: Path) -> None:
        """Upload *path* to *key* with ``If-None-Match: *`` (multipart when big)."""
        size = path.stat().st_size
        if size < self.multipart_threshold:
            with open(path, "rb") as f:
                self._client.put_object(Bucket=self.bucket, Key=key, Body=f, IfNoneMatch="*")
            return
        chunk = max(self.multipart_chunksize, -(-size // _MAX_PARTS))
        offsets = range(0, size, chunk)
        upload = self._client.create_multipart_upload(
            Bucket=self.bucket, Key=key, ChecksumAlgorithm="CRC32"
        )
        upload_id = upload["UploadId"]

        def send(number: int, offset: int) -> dict[str, Any]:
            with open(path, "rb") as f:
                f.seek(offset)
                body = f.read(chunk)
            response = self._client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm="CRC32",
            )
            part = {"PartNumber": number, "ETag": response["ETag"]}
            if "ChecksumCRC32" in response:
                part["ChecksumCRC32"] = response["ChecksumCRC32"]
            return part

        try:
            with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                parts = list(pool.map(send, range(1, len(offsets) + 1), offsets))
            # Only this last step is conditional: the object appears whole, or not at all.
            self._client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if self._is_client_error(exc, _NOT_FOUND_CODES):
                return None
            raise

    def get_bytes(self, name: str) -> bytes:
        key = self._key(name)
        with self._errors("reading", name):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            with contextlib.closing(response["Body"]) as body:
                return body.read()

    def get_bytes_at_most(self, name: str, limit: int) -> bytes:
        key = self._key(name)
        with self._errors("reading", name):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            with contextlib.closing(response["Body"]) as body:
                size = int(response.get("ContentLength") or 0)
                if size > limit:
                    raise RemoteObjectTooLarge(name, self.url, size, limit)
                data = body.read(limit + 1)
        if len(data) > limit:
            raise RemoteObjectTooLarge(name, self.url, len(data), limit)
        return data

    def get_file(self, name: str, dest: Path) -> None:
        key = self._key(name)
        dest = Path(dest)
        with self._errors("downloading", name):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(temp_name(dest.name))
            try:
                self._client.download_file(
                    self.bucket, key, os.fspath(tmp), Config=self.transfer_config
                )
                os.replace(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def stat(self, name: str) -> int | None:
        key = self._key(name)
        with self._errors("inspecting", name):
            head = self._head(key)
        return None if head is None else int(head["ContentLength"])

    def list(self, prefix: str = "") -> Iterator[str]:
        validate_prefix(prefix)
        return self._list(prefix)

    def _list(self, prefix: str) -> Iterator[str]:
        for name, _ in self._listed(prefix):
            yield name

    def scan(self, prefix: str = "") -> Iterator[Listed]:
        validate_prefix(prefix)
        for name, item in self._listed(prefix):
            modified = item.get("LastModified")
            when = modified.timestamp() if modified is not None else None
            yield Listed(name, int(item.get("Size", 0)), when)

    def _listed(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(name, listing entry) of each key under *prefix* a transport could have written."""
        base = f"{self.prefix}/" if self.prefix else ""
        with self._errors("listing", prefix or "/"):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix):
                for item in page.get("Contents", ()):
                    name = item["Key"][len(base) :]
                    # Skip keys no transport could have written ("dir/" markers, "a//b").
                    if is_valid_name(name):
                        yield name, item

    def delete(self, name: str) -> None:
        key = self._key(name)
        with self._errors("deleting", name):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def delete_if_equals(self, name: str, old: bytes) -> bool:
        def delete(key: str, condition: dict[str, str]) -> None:
            self._client.delete_object(Bucket=self.bucket, Key=key, **condition)

        return self._if_equals(name, old, "deleting", delete)

    def set_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        new = bytes(new)

        def put(key: str, condition: dict[str, str]) -> None:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=new, **condition)

        return self._if_equals(name, old, "updating", put)

    def _if_equals(
        self,
        name: str,
        old: bytes | None,
        action: str,
        change: Callable[[str, dict[str, str]], None],
    ) -> bool:
        """Read *name*; if its content is *old*, ``change(key, condition)`` it, where
        *condition* makes the request apply only to the version read (``If-Match``
        its ETag; ``If-None-Match: *`` when it was absent). True if it applied."""
        key = self._key(name)
        with self._errors(action, name):
            for attempt in range(8):
                try:
                    response = self._client.get_object(Bucket=self.bucket, Key=key)
                except Exception as exc:
                    if not self._is_client_error(exc, _NOT_FOUND_CODES):
                        raise
                    current, etag = None, None
                else:
                    with contextlib.closing(response["Body"]) as body:
                        # Only as much as comparing with *old* needs: a planted file
                        # of any size is read no further than that.
                        size = int(response.get("ContentLength") or 0)
                        want = 0 if old is None else len(old)
                        current = body.read(want + 1) if size <= want else b"\0" * (want + 1)
                        etag = response["ETag"]
                if current != old:
                    return False
                if not self.conditional_writes:
                    change(key, {})
                    return True
                try:
                    change(key, {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"})
                    return True
                except Exception as exc:
                    # 412: changed since we read it. 404 on If-Match: deleted since.
                    if self._is_client_error(exc, _PRECONDITION_CODES | _NOT_FOUND_CODES):
                        return False
                    if not self._is_client_error(exc, _CONFLICT_CODES):
                        raise
                # 409: a concurrent conditional request is in flight; read again.
                time.sleep(0.02 * (attempt + 1))
            raise RemoteError(f"{action} {name} on {self._where()} kept conflicting; try again")

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()  # drops pooled connections; idempotent
