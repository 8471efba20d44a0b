"""Shared fixtures: temporary stores and running scripts in fresh processes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_s3 import s3_bucket, s3_server  # noqa: F401  (real S3-API server fixtures)

REPO = Path(__file__).resolve().parent.parent

# The seed of the generated round trips (test_roundtrip_properties.py): set it to replay
# a run; drawn here, before any worker starts, so that every worker uses the same one.
os.environ.setdefault("MEMOSTORE_PROPERTY_SEED", str(random.SystemRandom().randrange(2**32)))


def pytest_report_header(config: pytest.Config) -> str:
    return f"generated round trips: MEMOSTORE_PROPERTY_SEED={os.environ['MEMOSTORE_PROPERTY_SEED']}"


@pytest.fixture(scope="session", autouse=True)
def signing_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A config directory of the test session: its signing key, never the user's own.

    Set in ``os.environ`` so that the scripts tests run sign with the same key
    (a store trusts its own signer); a test that plays a teammate points
    ``MEMOSTORE_CONFIG_DIR`` elsewhere.
    """
    path = tmp_path_factory.mktemp("config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEMOSTORE_CONFIG_DIR", str(path))
        patch.delenv("MEMOSTORE_SIGNING_KEY", raising=False)
        yield path


@pytest.fixture
def store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store directory, made the default store through $MEMOSTORE_DIR."""
    path = tmp_path / "store"
    monkeypatch.setenv("MEMOSTORE_DIR", str(path))
    return path


def run_script(
    path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run a Python script in a fresh interpreter (memoisation across processes)."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=str(cwd or path.parent),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{path.name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def write_script(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path
