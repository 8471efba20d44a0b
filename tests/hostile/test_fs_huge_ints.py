"""Ints of any size key, store and round-trip (a JSON number up to 4300 digits, hex beyond)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_script, write_script

from memostore import Store
from memostore.values.encoding import Encoder, HashSink

from .fskit import cli, forge_result

FORMAT_MD = Path(__file__).resolve().parents[2] / "docs" / "format.md"

JOB = """
import sys
import memostore


@memostore.memo
def grow(n, extra):
    print("BODY RAN", flush=True)
    return {"n": n * 3, "neg": -n, "keys": {n: "big"}, "extra": extra}


n = 7 ** int(sys.argv[1])
out = grow(n, [n + 1, 10**4300 - 1, 10**4300])
assert out == {"n": n * 3, "neg": -n, "keys": {n: "big"}, "extra": [n + 1, 10**4300 - 1, 10**4300]}
print("KEY", grow.key(n, [n + 1, 10**4300 - 1, 10**4300]))
"""


def value_id(value: object) -> str:
    return Encoder(HashSink(), cache=None, lineage=None).encode_value(value)


def test_a_huge_int_keys_stores_and_hits_across_processes(tmp_path: Path) -> None:
    script = write_script(tmp_path, "job.py", JOB)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    first = run_script(script, "20000", env=env)
    assert "BODY RAN" in first.stdout and first.stderr == ""
    second = run_script(script, "20000", env=env)
    assert "BODY RAN" not in second.stdout and second.stderr == ""
    assert second.stdout.split("KEY")[1] == first.stdout.split("KEY")[1]
    other = run_script(script, "20001", env=env)
    assert "BODY RAN" in other.stdout  # another int, another key
    store = tmp_path / "store"
    for args in (("log",), ("show", "grow", "--json"), ("fsck",), ("diff", "grow", "grow~1")):
        proc = cli(store, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    shown = json.loads(cli(store, "show", "grow", "--json").stdout)
    assert "bits" in shown["args_summary"]["n"]


def test_only_ints_past_4300_digits_change_form() -> None:
    # Small ints keep the JSON numbers (and ids) of format version 1.
    assert value_id(1) == "1a235e6040341f103cc42def2cc078e115aab2bc7dc927a5692cfceff5b4a955"
    assert value_id(10**4300 - 1) == (
        "2456f58888598f5a9814fa2bfc450dbccb6443bfad8a71dca6a0b80a8bb9f78e"
    )
    huge = "46b97d8ba2670875244f9adc5c15011417a0da608549e8983e513082586d8fe2"
    assert value_id(2**20000) == huge
    assert huge in FORMAT_MD.read_text()
    assert value_id(-(2**20000)) != huge
    assert value_id(10**4300) != value_id(10**4300 - 1)


def test_a_lowered_conversion_limit_gets_a_clear_error(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "limit.py",
        """
        import memostore

        @memostore.memo
        def f(n):
            return n

        try:
            f(10**2000)
        except memostore.MemostoreError as exc:
            print("ERROR", exc)
        print("BIG", f(10**5000) == 10**5000)
        """,
    )
    env = {"MEMOSTORE_DIR": str(tmp_path / "store"), "PYTHONINTMAXSTRDIGITS": "1000"}
    out = run_script(script, env=env).stdout
    assert "ERROR" in out and "allow at least 4300 digits" in out
    assert "BIG True" in out


@pytest.mark.parametrize("digits", ["xyz", "", "0x10", " 1", 5])
def test_a_malformed_int_node_is_a_miss(tmp_path: Path, digits: object) -> None:
    script = write_script(
        tmp_path,
        "job.py",
        """
        import memostore

        @memostore.memo
        def f():
            print("BODY RAN", flush=True)
            return 2 ** 20000

        print("OK", f() == 2 ** 20000)
        """,
    )
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    run_script(script, env=env)
    forge_result(Store(tmp_path / "store"), {"$": "int", "hex": digits}, set())
    proc = run_script(script, env=env)
    assert "BODY RAN" in proc.stdout and "OK True" in proc.stdout
    assert "malformed int node" in proc.stderr
