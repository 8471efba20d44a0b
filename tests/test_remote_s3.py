"""push, pull and auto-fetch against a real S3-API server (moto_server on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_script
from test_remote import Project, cli

from memostore import Store
from memostore.remote import add_remote, pull, push
from memostore.remote.fetch import reset_state
from memostore.transport import open_transport

pytestmark = pytest.mark.s3


@pytest.fixture
def project(tmp_path: Path) -> Project:
    reset_state()
    return Project(tmp_path)


def test_push_pull_hit_through_s3(project: Project, s3_bucket: str) -> None:
    project.run("A", "1", "2x20", "other3")
    runs = project.body_runs()
    assert cli(project.store("A"), "remote", "add", "origin", s3_bucket).exit_code == 0
    pushed = cli(project.store("A"), "push", "--json")
    assert pushed.exit_code == 0, pushed.output
    first = json.loads(pushed.output)
    assert first["objects"] > 20 and len(first["refs_updated"]) == 3

    with open_transport(s3_bucket) as remote:
        assert remote.get_bytes("FORMAT") == b"memostore 1\n"
        assert len(list(remote.list("refs/"))) == 3

    pulled = cli(project.store("B"), "pull", s3_bucket, "--json")
    assert pulled.exit_code == 0, pulled.output
    assert json.loads(pulled.output)["objects"] == first["objects"]
    assert project.run("B", "1", "2x20", "other3") == project.run("A", "1", "2x20", "other3")
    assert project.body_runs() == runs

    again = json.loads(cli(project.store("A"), "push", "--json").output)
    assert again["up_to_date"] and again["objects"] == 0
    assert pull(Store(project.store("B")), s3_bucket).up_to_date


def test_auto_fetch_from_s3(project: Project, s3_bucket: str) -> None:
    project.run("A", "1", "2")
    push(Store(project.store("A")), s3_bucket)
    add_remote(Store(project.store("B")), "origin", s3_bucket, auto_fetch=True)
    runs = project.body_runs()
    proc = run_script(project.script, "2", env=project.env("B"))
    assert project.body_runs() == runs
    assert "MemostoreWarning" not in proc.stderr
    assert len(list(Store(project.store("B")).refs.iter(""))) == 1
