"""What a body reads is observed: files it opens and directories it lists are hit conditions.

However the path reached the body (a dataclass config, an argparse
``Namespace``, an OmegaConf node, a constant), a changed file is a miss that
names it, and its old content, when it comes back, hits the evaluation made
from it. Torch's process modes (autocast) key the call.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script

from memostore import memo, set_verbose


@dataclasses.dataclass
class DataCfg:
    path: Path
    sep: str = ","


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The verbose lines that decide a call (``miss``/``hit``; not ``stored``)."""
    found = re.findall(r"^memostore: [\w.<>]+: (.*)$", capsys.readouterr().err, re.M)
    return [line for line in found if not line.startswith("stored ")]


@pytest.fixture
def verbose() -> Any:
    set_verbose(True)
    yield
    set_verbose(None)


def _configs(path: Path) -> list[tuple[str, Any, Any]]:
    """(name, config, how the body reaches the path) for each kind of config object."""
    from omegaconf import OmegaConf

    return [
        ("dataclass", DataCfg(path), lambda c: c.path),
        ("namespace", argparse.Namespace(data=str(path)), lambda c: c.data),
        ("omegaconf", OmegaConf.create({"data": {"train": str(path)}}), lambda c: c.data.train),
    ]


@pytest.mark.parametrize("kind", ["dataclass", "namespace", "omegaconf"])
def test_a_file_read_through_a_config_is_an_input(
    kind: str,
    tmp_path: Path,
    store_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verbose: Any,
) -> None:
    monkeypatch.chdir(tmp_path)
    data = Path("data") / "train.csv"
    data.parent.mkdir()
    data.write_text("1,2\n3,4\n")
    _, cfg, reach = next(c for c in _configs(data) if c[0] == kind)

    @memo
    def total(cfg: Any) -> int:
        with open(reach(cfg)) as f:
            return sum(int(v) for line in f for v in line.split(","))

    assert total(cfg) == 10
    assert total(cfg) == 10
    data.write_text("2,4\n6,8\n")
    assert total(cfg) == 20  # not the stored 10
    data.write_text("1,2\n3,4\n")
    assert total(cfg) == 10  # the first evaluation, kept beside the second
    lines = _lines(capsys)
    assert [line.split()[0] for line in lines] == ["miss", "hit", "miss", "hit"]
    assert lines[2].endswith(f"({os.path.join('data', 'train.csv')} changed)"), lines[2]


def test_listing_a_directory_is_an_input(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str], verbose: Any
) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.txt").write_text("a")

    @memo
    def count(root: str) -> int:
        return len(sorted(os.listdir(root)))

    assert count(str(shards)) == 1
    assert count(str(shards)) == 1
    (shards / "b.txt").write_text("b")  # a new shard: the listing changed
    assert count(str(shards)) == 2
    lines = _lines(capsys)
    assert [line.split()[0] for line in lines] == ["miss", "hit", "miss"]
    assert "shards/ changed" in lines[2]


def test_what_is_not_an_input(tmp_path: Path, store_dir: Path) -> None:
    out = tmp_path / "out.txt"
    data = tmp_path / "data.txt"
    data.write_text("3")

    @memo
    def work(n: int) -> int:
        import json  # noqa: F401  (the import system's files are not inputs)

        out.write_text(str(n))  # written, then read back: the body's own file
        with open(out) as f:
            written = int(f.read())
        return written + int(data.read_text())

    assert work(1) == 4
    evaluation = work.lookup(1)
    assert evaluation is not None
    files = _stored_files(store_dir, evaluation.id)
    assert list(files) == [str(data)]
    assert files[str(data)]["kind"] == "file"
    out.unlink()
    assert work(1) == 4 and work.lookup(1) is not None  # still a hit: out.txt was output


def _stored_files(store_dir: Path, evaluation_id: str) -> dict[str, Any]:
    from memostore import Store

    return dict(Store(store_dir).evaluation(evaluation_id).body.get("files") or {})


READER = """
import sys
from pathlib import Path
from memostore import memo

@memo
def total(cfg):
    print("RUN", flush=True)
    return sum(int(v) for v in Path(cfg["path"]).read_text().split())

print("RESULT", total({"path": sys.argv[1]}))
"""


def test_a_fresh_process_checks_the_file_and_an_edit_misses(
    tmp_path: Path, store_dir: Path
) -> None:
    data = tmp_path / "numbers.txt"
    data.write_text("1 2 3 4")
    old = 1_000_000_000  # timestamps old enough for the recorded stat to be trusted
    os.utime(data, ns=(old, old))
    script = write_script(tmp_path, "reader.py", READER)
    first = run_script(script, str(data))
    assert "RUN" in first.stdout and "RESULT 10" in first.stdout
    second = run_script(script, str(data))
    assert "RUN" not in second.stdout and "RESULT 10" in second.stdout
    data.write_text("2 4 6 8")
    os.utime(data, ns=(old, old))  # same mtime: the ctime and content tell the change
    third = run_script(script, str(data))
    assert "RUN" in third.stdout and "RESULT 20" in third.stdout


def test_autocast_keys_the_call(store_dir: Path) -> None:
    import torch

    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)

    @memo
    def predict(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x).detach()

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert predict(model, x).dtype == torch.bfloat16
    assert predict(model, x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert predict(model, x).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert predict(model, x).dtype == torch.float32
    assert predict.key(model, x) != _key_under_autocast(predict, model, x)


def _key_under_autocast(fn: Any, *args: Any) -> str:
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16):
        return str(fn.key(*args))
