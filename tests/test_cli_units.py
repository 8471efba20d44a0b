"""Pieces of the CLI in isolation: summaries, lineage drawing, result comparison, formats."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from memostore_cli.graph import graph_rows
from memostore_cli.main import cli
from memostore_cli.maintenance_cmds import Duration
from memostore_cli.output import age, duration, json_safe
from test_cli_revisions import record

from memostore.errors import ObjectNotFound
from memostore.inspect.inspection import show_record
from memostore.inspect.result_diff import tensor_difference
from memostore.odb.object_store import DiskObjectStore
from memostore.odb.objects import KIND_VALUE, Doc, Links
from memostore.odb.store import Store
from memostore.values.codecs import CodecRegistry
from memostore.values.summaries import SummaryReader, describe, format_bytes


def tensor_store(tmp_path: Path) -> tuple[Store, str, str]:
    """An evaluation whose arguments and result hold torch tensor nodes (written without torch)."""
    store = Store(tmp_path / "store")
    blob = store.objects.add_bytes(b"\0" * 4096)
    tensor = {
        "$": "torch.tensor",
        "dtype": "float32",
        "shape": [32, 32],
        "device": "cpu",
        "requires_grad": False,
        "nbytes": 4096,
        "data": {"blob": blob},
    }
    module = {
        "$": "torch.module",
        "cls": {"$": "code", "module": "proj.nets", "qualname": "Net", "digest": "0" * 64},
        "params": [["weight", tensor]],
        "buffers": [],
        "modules": [],
    }
    links = Links(blobs={blob})
    args = Doc(KIND_VALUE, {"node": {"$": "args", "items": [["x", tensor], ["lr", 0.5]]}}, links)
    result = Doc(KIND_VALUE, {"node": {"$": "tuple", "items": [module, tensor, "done"]}}, links)
    store.objects.add_doc(args)
    store.objects.add_doc(result)
    evaluation_id = record(store, "proj.train:fit", 10.0, args=args.id, result=result.id)
    return store, evaluation_id, blob


def test_show_summarises_tensors_without_reading_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, evaluation_id, blob = tensor_store(tmp_path)
    real_read = DiskObjectStore._read_raw

    def guarded(self: DiskObjectStore, object_id: str) -> bytes:
        if object_id == blob:
            raise AssertionError("show read tensor data")
        return real_read(self, object_id)

    monkeypatch.setattr(DiskObjectStore, "_read_raw", guarded)
    shown = show_record(store, evaluation_id, load_codecs=False)
    x = shown["args"]["x"]
    assert x["shape"] == [32, 32] and x["dtype"] == "float32"
    module, tensor, text = shown["result"]["items"]
    # The torch codecs' own summaries when they are loaded already, else generic ones.
    assert module["class"] == "proj.nets.Net" and text == "done"
    assert tensor.get("bytes", tensor.get("nbytes")) == 4096
    assert "(float32, [32, 32], 4.0 KiB, device=cpu)" in describe(tensor)

    generic = SummaryReader(
        store.objects, codecs=CodecRegistry(), load_codecs=False, summarizers=[]
    )
    module, tensor, _ = generic.summarize_doc(shown["result_id"])["items"]
    assert module["tensors"] == 1 and module["nbytes"] == 4096
    assert describe(tensor) == "torch.tensor(float32, [32, 32], 4.0 KiB, device=cpu)"


def test_command_line_show_does_not_import_torch(tmp_path: Path) -> None:
    store, evaluation_id, _ = tensor_store(tmp_path)
    code = (
        "import sys\n"
        "from memostore_cli.main import cli\n"
        f"cli.main(['--store', {str(store.root)!r}, 'show', {evaluation_id[:8]!r}],"
        " standalone_mode=False)\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "TORCH False" in proc.stdout
    assert "float32, [32, 32]" in proc.stdout


def test_summaries_of_plain_values(tmp_path: Path) -> None:
    store = Store.in_memory()
    node = {
        "$": "dict",
        "items": [
            ["a", [1, 2, 3]],
            ["b", {"$": "tuple", "items": [1.5, {"$": "float", "v": "nan"}]}],
            ["c", {"$": "bytes", "hex": "00ff"}],
            [{"$": "tuple", "items": [1, 2]}, None],
        ],
    }
    summary = SummaryReader(store.objects).summarize(node)
    assert summary["len"] == 4
    assert (
        describe(summary) == "{'a': [1, 2, 3], 'b': (1.5, nan), 'c': bytes(len=2), '(1, 2)': None}"
    )
    many = SummaryReader(store.objects, max_items=2).summarize(list(range(10)))
    assert describe(many) == "[0, 1, …]"
    assert len(describe(list(range(1000)), width=40)) == 40
    assert format_bytes(3 * 1024**3) == "3.0 GiB" and format_bytes(5) == "5 B"


def test_an_unknown_codec_gets_a_generic_summary() -> None:
    store = Store.in_memory()
    blob = store.objects.add_bytes(b"12345")
    node = {"$": "nosuch.thing", "shape": [5], "dtype": "int8", "blob": blob, "secret": "x"}
    summary = SummaryReader(store.objects).summarize(node)
    assert summary == {"type": "nosuch.thing", "dtype": "int8", "shape": [5], "bytes": 5}


def test_graph_rows_draw_lineage() -> None:
    records = [
        {"id": "c2", "parents": ["b"]},
        {"id": "c1", "parents": ["b", "a"]},
        {"id": "b", "parents": []},
        {"id": "a", "parents": ["gone"]},
    ]
    rows = graph_rows(records)
    # c1 opens a lane for its second parent a; c2's and c1's lanes join at b.
    assert rows == [
        ([], "* "),
        ([], "| * "),
        (["| | \\ ", "| / | "], "*   | "),
        ([], "    * "),
    ]


def test_tensor_differences_numpy() -> None:
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert tensor_difference(a, a.copy()) is None
    b = a.copy()
    b[0, 0] = 1.5
    stats = tensor_difference(a, b)
    assert stats is not None
    assert stats["max_abs_diff"] == pytest.approx(0.5)
    assert stats["rel_norm"] == pytest.approx(0.5 / math.sqrt(30))
    assert tensor_difference(a, a[:1])["shape"] == [[2, 2], [1, 2]]
    nan = np.array([np.nan, 1.0])
    assert tensor_difference(nan, nan.copy()) is None
    assert tensor_difference(np.zeros(2), np.ones(2))["rel_norm"] == "inf"


def test_stored_results_are_compared_from_their_nodes(store_dir: Path) -> None:
    """Results walked in the store: module tensors by name, dict entries by key, no restore."""
    torch = pytest.importorskip("torch")
    from memostore import memo
    from memostore.inspect.comparison import diff_records

    @memo
    def make(bias: float, extra: bool) -> dict:
        torch.manual_seed(0)
        net = torch.nn.Linear(2, 2)
        with torch.no_grad():
            net.bias += bias
        out = {"m": net, "n": 3 if not extra else 4}
        if extra:
            out["new"] = 1
        return out

    make(0.0, False)
    make(1.0, True)
    first, second = make.lookup(0.0, False), make.lookup(1.0, True)
    assert first is not None and second is not None
    report = diff_records(Store(store_dir), first.id, second.id)["result"]
    assert not report["same"]
    (changed,) = report["tensors"]
    assert changed["path"] == "['m'].bias" and changed["max_abs_diff"] == pytest.approx(1.0)
    values = {v["path"]: v for v in report["values"]}
    assert values["['n']"]["change"] == "changed" and values["['new']"]["change"] == "added"
    assert diff_records(Store(store_dir), first.id, first.id)["result"]["same"]


def test_formats() -> None:
    assert duration(0.012) == "12ms" and duration(75) == "1m15s" and duration(7300) == "2h01m"
    assert age(100.0, now=130.0) == "30s ago" and age(0.0, now=7200.0) == "2h ago"
    assert json.dumps(json_safe({"x": [float("nan"), 1.0]})) == '{"x": ["nan", 1.0]}'
    assert Duration().convert("90", None, None) == 90.0
    assert Duration().convert("1.5h", None, None) == 5400.0


def test_module_entry_point_runs(tmp_path: Path) -> None:
    env = {**os.environ, "MEMOSTORE_DIR": str(tmp_path / "none")}
    proc = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "log"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1 and "no memostore store" in proc.stderr


def test_json_output_of_log_is_strict_json(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    record(store, "m:f", 1.0, hparams={"x": 1.0})
    out = CliRunner().invoke(cli, ["--store", str(store.root), "log", "--json"]).output
    assert json.loads(out)[0]["args"] == {"x": 1.0}
    with pytest.raises(ObjectNotFound):
        store.objects.get_bytes("0" * 64)
