"""The README's demo script: a second run restores every step from the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_example_training_script_is_restored_on_the_second_run(tmp_path: Path) -> None:
    env = {**os.environ, "MEMOSTORE_DIR": str(tmp_path / "store")}
    command = [sys.executable, str(REPO / "examples" / "train.py"), "--samples", "2000"]
    command += ["--epochs", "2"]

    def run() -> str:
        proc = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    first, second = run(), run()
    steps = ("download_data", "load_dataset", "train", "evaluate")
    for step in steps:
        assert f"{step}" in first
    assert first.count("computed") == len(steps)
    assert second.count("restored from the store") == len(steps)
    # The same model comes back: identical accuracy and loss.
    assert first.splitlines()[-1].split(", total")[0] == second.splitlines()[-1].split(", total")[0]

    log = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "log"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert log.returncode == 0, log.stderr
    for step in steps:
        assert step in log.stdout
