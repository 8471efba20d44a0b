"""Pytest fixtures for tests against a real S3-API server on 127.0.0.1.

Import them into ``tests/conftest.py``::

    from conftest_s3 import s3_bucket, s3_server  # noqa: F401

Tests that use them should be marked ``@pytest.mark.s3``; they are skipped
when moto or boto3 is not installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from s3server import DUMMY_AWS_ENV, MotoServer, moto_available


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a ``moto_server`` started for this test session.

    Dummy AWS credentials and region are put into the environment for the
    whole session (and restored afterwards), so boto3 never reads a real
    account's settings.
    """
    if not moto_available():
        pytest.skip("moto[server] and boto3 are needed: pip install '.[dev]' in the clone")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in DUMMY_AWS_ENV.items():
            mp.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(key, raising=False)
        server = MotoServer()
        endpoint = server.start()
        try:
            yield endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, empty bucket; yields its URL ``s3://BUCKET/store``.

    ``AWS_ENDPOINT_URL`` points at the test server for the test's duration, so
    ``open_transport(url)`` (and ``memostore push``) reach it unaided.
    """
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    try:
        yield f"s3://{bucket}/store"
    finally:
        # moto keeps objects in memory: empty and drop the bucket.
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", ()):
                client.delete_object(Bucket=bucket, Key=item["Key"])
        client.delete_bucket(Bucket=bucket)
        client.close()
