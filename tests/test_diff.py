"""``memostore diff``: differences named inside objects, effects, and why a call would miss.

Evaluations are written by scripts run in fresh interpreters; the CLI runs as
a subprocess of the ``memostore`` console script (or in a child interpreter
through click's runner, where a test looks at what the command imported).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script
from test_cli import run_cli

from memostore.inspect.comparison import miss_reason
from memostore.odb.objects import Doc
from memostore.odb.store import Store

pytest.importorskip("torch")

FIELDS = """\
import argparse, dataclasses, os, sys
import torch
from memostore import memo


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 2)
        self.fc2 = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc2(self.fc1(x))


@dataclasses.dataclass
class Config:
    name: str
    depth: int


class Tracked:
    # Restoring this value would run __setstate__: a diff must never do it.
    def __init__(self, value):
        self.value = value

    def __setstate__(self, state):
        open(os.environ["RESTORE_MARKER"], "w").close()
        self.__dict__.update(state)


@memo
def fit(model, args, cfg, batch, sizes, opts):
    return {"out": model(batch["x"]).detach(), "epochs": args.epochs, "t": Tracked(cfg.depth)}


variant = int(sys.argv[1])
torch.manual_seed(0)
model = Net()
if variant:
    model.fc1.train(False)
# The long field sorts before lr: a one-line summary would be cut before the change.
args = argparse.Namespace(
    a_note="n" * 150, lr=0.003 if variant else 0.001, epochs=3, tail="t" * 300 + str(variant)
)
x = torch.ones(4, 3)
batch = {"x": x * 1.5 if variant else x, "mask": torch.ones(5 if variant else 4)}
fit(
    model,
    args,
    Config(name="base", depth=2 + variant),
    batch,
    [1, 2, 4] if variant else [1, 2, 3],
    {"opt": "adam" if variant else "sgd", "wd": 0.0},
)
"""


@pytest.fixture(scope="module")
def fields_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fields")
    store = root / "store"
    script = write_script(root, "fields.py", FIELDS)
    env = {"MEMOSTORE_DIR": str(store), "RESTORE_MARKER": str(root / "restored")}
    run_script(script, "0", env=env)
    run_script(script, "1", env=env)
    return {"root": root, "store": store, "marker": root / "restored"}


def test_diff_names_the_changed_field_inside_each_argument(fields_store: dict[str, Path]) -> None:
    store = fields_store["store"]
    proc = run_cli(store, "diff", "fit~1", "fit", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    args = record["args"]
    model = args["model"]
    assert model["class"] == "Net"
    assert [(f["path"], f["a"], f["b"]) for f in model["fields"]] == [
        (".fc1.training", True, False)
    ]
    lr, tail = args["args"]["fields"]
    assert (lr["path"], lr["a"], lr["b"]) == (".lr", 0.001, 0.003)
    # A long text is shown around its first difference, not cut before it.
    assert tail["path"] == ".tail" and tail["note"] == "first difference at character 300"
    assert tail["a"].endswith("t0") and tail["b"].endswith("t1")
    assert [(f["path"], f["a"], f["b"]) for f in args["cfg"]["fields"]] == [(".depth", 2, 3)]
    assert [(f["path"], f["a"], f["b"]) for f in args["sizes"]["fields"]] == [("[2]", 3, 4)]
    assert [(f["path"], f["a"], f["b"]) for f in args["opts"]["fields"]] == [
        ("['opt']", "sgd", "adam")
    ]
    batch = {f["path"]: f["tensor"] for f in args["batch"]["fields"]}
    assert batch["['x']"]["shape"] == [4, 3] and batch["['x']"]["dtype"] == "float32"
    assert batch["['x']"]["max_abs_diff"] == pytest.approx(0.5)
    assert batch["['mask']"]["shape"] == [[4], [5]]
    result = record["result"]
    tensors = {t["path"]: t for t in result["tensors"]}
    assert tensors["['out']"]["shape"] == [4, 1] and tensors["['out']"]["max_abs_diff"] > 0
    values = {v["path"]: v for v in result["values"]}
    assert (values["['t'].value"]["a"], values["['t'].value"]["b"]) == (2, 3)

    proc = run_cli(store, "diff", "fit~1", "fit")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for line in (
        "model: Net.fc1.training: True -> False",
        "args: Namespace.lr: 0.001 -> 0.003",
        "cfg: Config.depth: 2 -> 3",
        "sizes: [2]: 3 -> 4",
        "opts: ['opt']: 'sgd' -> 'adam'",
        "batch: ['x']: float32 [4, 3]: max abs diff 0.5",
        "batch: ['mask']: shape [4] -> [5]",
        "tttt0' -> '…tttt",
    ):
        assert line in text, (line, text)
    assert "fc2" not in text and "nnnn" not in text
    # Nothing was restored: the result's __setstate__ never ran.
    assert not fields_store["marker"].exists()


def test_diff_reads_the_store_without_importing_torch(fields_store: dict[str, Path]) -> None:
    driver = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from memostore_cli.main import cli
        result = CliRunner().invoke(cli, ["--store", sys.argv[1], "diff", "fit~1", "fit"])
        print(result.exit_code, "torch" in sys.modules)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", driver, str(fields_store["store"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.split() == ["0", "False"], proc.stderr


EFFECTS = """\
import random, sys
import torch
from memostore import memo


@memo
def step(model, history, n):
    history.append(n)
    with torch.no_grad():
        model.weight += torch.randn_like(model.weight) * n
    return random.random()


if sys.argv[2:] != ["unseeded"]:
    torch.manual_seed(0)
    random.seed(int(sys.argv[1]))
step(torch.nn.Linear(2, 2), [1], int(sys.argv[1]))
"""


def test_show_lists_mutated_arguments_and_rngs_and_diff_compares_them(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = write_script(tmp_path, "effects.py", EFFECTS)
    for n in ("1", "2"):
        run_script(script, n, env={"MEMOSTORE_DIR": str(store)})

    shown = json.loads(run_cli(store, "show", "step", "--json").stdout)
    assert set(shown["effects"]) == {"history", "model"}
    assert shown["effects"]["history"]["items"] == [1, 2]
    assert shown["effects"]["model"]["class"] == "torch.nn.modules.linear.Linear"
    assert set(shown["rng"]) >= {"python", "torch"}
    assert all(r["before"] and r["after"] and r["bytes"] for r in shown["rng"].values())
    assert all(r["seeded"] is True and r["leaves"] is None for r in shown["rng"].values())
    text = run_cli(store, "show", "step").stdout
    assert "mutated arguments (state after the call)" in text
    assert "random generators drawn from" in text
    assert re.search(r"torch +seeded: a call hits only from start state \w+ \(another: start", text)

    record = json.loads(run_cli(store, "diff", "step~1", "step", "--json").stdout)
    history = record["effects"]["history"]["fields"]
    assert [(f["path"], f["a"], f["b"]) for f in history] == [("[1]", 1, 2)]
    (weight,) = record["effects"]["model"]["fields"]
    assert weight["path"] == ".weight" and weight["tensor"]["max_abs_diff"] > 0
    assert "python" in record["rng"] and not record["rng"]["python"]["before_same"]
    assert "torch" not in record["rng"]  # same start, same draws: the same record
    assert record["rng"]["python"]["seeded"] is True
    text = run_cli(store, "diff", "step~1", "step").stdout
    assert "history: [1]: 1 -> 2" in text
    assert "model: Linear.weight: float32 [2, 2]: max abs diff" in text
    assert "python: seeded: start state differs" in text


def test_show_and_diff_say_when_an_unseeded_rng_lets_any_run_serve(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = write_script(tmp_path, "effects.py", EFFECTS)
    for n in ("1", "2"):
        run_script(script, n, "unseeded", env={"MEMOSTORE_DIR": str(store)})

    shown = json.loads(run_cli(store, "show", "step", "--json").stdout)
    assert {r["seeded"] for r in shown["rng"].values()} == {False}
    text = run_cli(store, "show", "step").stdout
    assert re.search(r"python +unseeded RNG: served the stored run, whatever the start", text)
    record = json.loads(run_cli(store, "diff", "step~1", "step", "--json").stdout)
    assert record["rng"]["torch"]["seeded"] is False
    text = run_cli(store, "diff", "step~1", "step").stdout
    assert "torch: started from a different state (unseeded RNG: either stored run" in text
    verdict = json.loads(run_cli(store, "diff", "step", "--json").stdout)
    assert any("unseeded global RNG(s) python, torch" in note for note in verdict["notes"])


def test_show_of_a_record_without_effects(fields_store: dict[str, Path]) -> None:
    shown = json.loads(run_cli(fields_store["store"], "show", "fit", "--json").stdout)
    assert shown["effects"] == {} and shown["rng"] == {}
    assert "mutated arguments" not in run_cli(fields_store["store"], "show", "fit").stdout


# -- why would the next call miss: a __main__ script ---------------------------------------
SCRIPT = """\
import os, sys
import torch
from memostore import memo
from helpers import scale

FACTOR = 2
device = torch.device("cpu")


def helper(x):
    return x * FACTOR


@memo
def train(n):
    print("RUN")
    return scale(helper(torch.arange(n, dtype=torch.float32).to(device)))


train(int(sys.argv[1]))
"""

HELPERS = """\
def scale(x):
    return x / 2
"""


def why(store: Path, *args: str, cwd: Path) -> dict[str, Any]:
    proc = run_cli(store, "diff", *args, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_why_miss_of_a_main_script_compares_todays_source(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    store = tmp_path / "store"
    env = {"MEMOSTORE_DIR": str(store)}
    script = write_script(project, "script.py", SCRIPT)
    write_script(project, "helpers.py", HELPERS)
    assert "RUN" in run_script(script, "3", env=env).stdout

    # From any directory: the recorded script is read, never run.
    verdict = why(store, "train", cwd=elsewhere)
    assert verdict["method"] == "source" and verdict["source"] == [str(script)]
    assert verdict["code"]["changed"] == [] and verdict["reasons"] == []
    unchecked = {u["symbol"]: u for u in verdict["unchecked"]}
    assert set(unchecked) == {"__main__:device"}
    assert verdict["verdict"] == "unknown"
    text = run_cli(store, "diff", "train", cwd=elsewhere).stdout
    assert "cannot be checked without running the code" in text and "__main__:device" in text

    # Comments and docstrings are no change, as for the digest itself: the run hits.
    script.write_text(SCRIPT.replace("def helper(x):\n", 'def helper(x):\n    """Doc."""\n'))
    assert why(store, "train", cwd=elsewhere)["code"]["changed"] == []
    assert "RUN" not in run_script(script, "3", env=env).stdout

    script.write_text(SCRIPT.replace("return x * FACTOR", "return x * FACTOR + 1"))
    verdict = why(store, "train", cwd=elsewhere)
    assert verdict["verdict"] == "miss"
    (changed,) = verdict["code"]["changed"]
    assert changed["symbol"] == "__main__:helper"
    assert "-    return x * FACTOR\n" in changed["diff"]
    assert "+    return x * FACTOR + 1\n" in changed["diff"]
    assert "__main__:helper changed" in verdict["reasons"]

    script.write_text(SCRIPT.replace("FACTOR = 2", "FACTOR = 3"))
    (changed,) = why(store, "train", cwd=elsewhere)["code"]["changed"]
    assert changed["symbol"] == "__main__:FACTOR"
    assert "-FACTOR = 2" in changed["diff"] and "+FACTOR = 3" in changed["diff"]

    script.write_text(SCRIPT.replace("FACTOR = 2", "FACTOR = int('2')"))
    verdict = why(store, "train", cwd=elsewhere)
    assert "__main__:FACTOR" in {u["symbol"] for u in verdict["unchecked"]}
    assert verdict["verdict"] == "unknown"

    script.write_text(SCRIPT)
    (project / "helpers.py").write_text(HELPERS.replace("x / 2", "x / 4"))
    (changed,) = why(store, "train", cwd=elsewhere)["code"]["changed"]
    assert changed["symbol"] == "helpers:scale" and "+    return x / 4" in changed["diff"]

    # The script gone: say so, and how to point at today's copy.
    moved = project / "moved.py"
    script.rename(moved)
    verdict = why(store, "train", cwd=elsewhere)
    assert verdict["verdict"] == "unknown" and "--source" in verdict["reasons"][0]
    assert why(store, "train", "--source", str(moved), cwd=elsewhere)["source"] == [str(moved)]


# -- a notebook ------------------------------------------------------------------------------
KERNEL = """\
import __main__, json, linecache, sys

# As a Jupyter kernel runs: argv names the launcher, code cells run in __main__,
# each cell's text in linecache under a pseudo file name.
sys.argv = ["/opt/venv/lib/python3/site-packages/ipykernel_launcher.py", "-f", "kernel.json"]
cells = [c for c in json.load(open(NOTEBOOK))["cells"] if c["cell_type"] == "code"]
for i, cell in enumerate(cells, 1):
    text = "".join(cell["source"])
    text = "".join(line if not line.startswith("%") else "\\n" for line in text.splitlines(True))
    filename = f"<ipython-input-{i}-0123abcd>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(text, filename, "exec"), __main__.__dict__)
"""

CELLS = [
    "%matplotlib inline\nimport torch\nfrom memostore import memo\nBASE = 10\n",
    "@memo\ndef nb_fn(n):\n    return torch.full((n,), BASE + 1.0)\n",
    "out = nb_fn(3)\n",
]


def write_notebook(path: Path, cells: list[str]) -> None:
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
            *(
                {"cell_type": "code", "metadata": {}, "source": c.splitlines(True), "outputs": []}
                for c in cells
            ),
        ],
    }
    path.write_text(json.dumps(notebook))


def test_why_miss_of_a_notebook_cell(tmp_path: Path) -> None:
    store = tmp_path / "store"
    notebook = tmp_path / "analysis.ipynb"
    write_notebook(notebook, CELLS)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(f"NOTEBOOK = {str(notebook)!r}\n" + KERNEL)
    run_script(kernel, env={"MEMOSTORE_DIR": str(store)})

    verdict = why(store, "nb_fn", cwd=tmp_path)
    assert verdict["verdict"] == "unknown"
    assert "notebook" in verdict["reasons"][0] and "--source" in verdict["reasons"][0]

    verdict = why(store, "nb_fn", "--source", str(notebook), cwd=tmp_path)
    assert verdict["verdict"] == "hit", verdict
    assert verdict["code"]["changed"] == [] and verdict["unchecked"] == []

    write_notebook(notebook, [CELLS[0], CELLS[1].replace("BASE + 1.0", "BASE + 2.0"), CELLS[2]])
    verdict = why(store, "nb_fn", "--source", str(notebook), cwd=tmp_path)
    assert verdict["verdict"] == "miss"
    (changed,) = verdict["code"]["changed"]
    assert changed["symbol"] == "__main__:nb_fn"
    assert "+    return torch.full((n,), BASE + 2.0)" in changed["diff"]

    write_notebook(notebook, [CELLS[0].replace("BASE = 10", "BASE = 11"), *CELLS[1:]])
    (changed,) = why(store, "nb_fn", "--source", str(notebook), cwd=tmp_path)["code"]["changed"]
    assert changed["symbol"] == "__main__:BASE" and "+BASE = 11" in changed["diff"]


# -- nothing recorded is imported ---------------------------------------------------------------
PLANTED = """\
import os
open(os.path.join({marker!r}, "imported-" + __name__), "w").close()

def train(n):
    return n

def scale(x):
    return x
"""

LIB = """\
from memostore import memo


@memo
def train(n):
    return n + 1
"""

RUNNER = """\
import sys
from lib import train

train(int(sys.argv[1]))
"""

MAIN_USING_HELPERS = """\
import sys
from memostore import memo
from helpers import scale


@memo
def fn(n):
    return scale(n)


fn(int(sys.argv[1]))
"""


def test_modules_beside_a_recorded_cwd_are_never_imported(tmp_path: Path) -> None:
    recorded, here, markers = tmp_path / "recorded", tmp_path / "here", tmp_path / "markers"
    for d in (recorded, here, markers):
        d.mkdir()
    store = tmp_path / "store"
    env = {"MEMOSTORE_DIR": str(store)}
    write_script(recorded, "lib.py", LIB)
    write_script(recorded, "helpers.py", "def scale(x):\n    return x * 2\n")
    runner = write_script(recorded, "run.py", RUNNER)
    main = write_script(recorded, "main.py", MAIN_USING_HELPERS)
    for n in ("1", "2"):
        run_script(runner, n, env=env)
    run_script(main, "1", env=env)
    # A writer of the shared store plants code where the evaluations ran.
    for name in ("lib", "helpers"):
        (recorded / f"{name}.py").write_text(PLANTED.format(marker=str(markers)))

    verdict = why(store, "train", cwd=here)
    assert verdict["verdict"] == "unknown" and "cannot import lib" in verdict["reasons"][0]
    assert str(recorded) in verdict["reasons"][0]  # named, so the user can go there
    for args in (["diff", "train~1", "train"], ["show", "train"], ["diff", "fn"]):
        assert run_cli(store, *args, cwd=here).returncode == 0
    # The script's helper module is read as text: its change is reported.
    changed = why(store, "fn", cwd=here)["code"]["changed"]
    assert [c["symbol"] for c in changed] == ["helpers:scale"]
    assert list(markers.iterdir()) == []


def test_why_miss_imports_from_the_current_directory_as_python_would(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    store = tmp_path / "store"
    write_script(project, "lib.py", LIB)
    runner = write_script(project, "run.py", RUNNER)
    run_script(runner, "1", env={"MEMOSTORE_DIR": str(store)})
    assert why(store, "train", cwd=project)["verdict"] == "hit"
    (project / "lib.py").write_text(LIB.replace("n + 1", "n + 2"))
    verdict = why(store, "train", cwd=project)
    assert verdict["verdict"] == "miss" and verdict["method"] == "import"
    assert "+    return n + 2" in verdict["code"]["changed"][0]["diff"]
    # PYTHONSAFEPATH: python would not look in the current directory, nor does the check.
    proc = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "diff", "train"],
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        timeout=60,
    )
    assert proc.returncode == 0 and "cannot import lib" in proc.stdout


# -- one-line reasons of a miss --------------------------------------------------------------
REASONS = """\
import os, sys
import torch
from memostore import memo


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(2, 2)


def loss_fn(x):
    return x.sum()


@memo
def train(model, lr, epochs):
    return (loss_fn(model.fc1.weight) * lr * epochs).detach()


# Each call goes into a store of its own: sys.argv lists "store:lr:epochs:training".
for spec in sys.argv[1:]:
    path, lr, epochs, training = spec.split(":")
    os.environ["MEMOSTORE_DIR"] = path
    torch.manual_seed(0)
    model = Net()
    model.fc1.training = training == "1"
    train(model, float(lr), int(epochs))
"""


def _call_of(store: Path) -> tuple[str, str, Doc, dict[str, Doc]]:
    """(args id, code digest, code document, every document of the arguments) of its one call."""
    opened = Store(store)
    ((_, evaluation_id),) = list(opened.iter_evaluation_refs())
    body = opened.evaluation(evaluation_id).body
    docs: dict[str, Doc] = {}
    stack = [body["args"]]
    while stack:
        doc = opened.objects.get_doc(stack.pop())
        docs[doc.id] = doc
        stack.extend(d for d in doc.links.docs if d not in docs)
    return body["args"], body["code_digest"], opened.objects.get_doc(body["code"]), docs


def test_miss_reason_in_one_line(tmp_path: Path) -> None:
    script = write_script(tmp_path, "reasons.py", REASONS)
    names = ("base", "lr", "both", "flag")
    specs = {
        "base": "0.1:1:1",
        "lr": "0.2:1:1",
        "both": "0.2:3:1",
        "flag": "0.1:1:0",
    }
    run_script(script, *(f"{tmp_path / n}:{specs[n]}" for n in names))
    script.write_text(REASONS.replace("return x.sum()", "return x.abs().sum()"))
    run_script(script, f"{tmp_path / 'code'}:{specs['base']}")

    base = Store(tmp_path / "base")
    function = "__main__:train"
    assert miss_reason(Store(tmp_path / "empty"), function, *_call_of(tmp_path / "lr")[:3]) == (
        "first call"
    )

    def reason(name: str) -> str:
        args_id, digest, code, docs = _call_of(tmp_path / name)
        return miss_reason(base, function, args_id, digest, code, docs=docs)

    assert reason("lr") == "lr changed"
    assert reason("both") == "lr, epochs changed"
    assert reason("flag") == "args changed: model.fc1.training"
    assert reason("code") == "code changed: loss_fn"
    # Without the documents not stored yet it still answers, with less detail.
    args_id, digest, code, _ = _call_of(tmp_path / "flag")
    assert miss_reason(base, function, args_id, digest, code) == "args changed"
    # A damaged record gives a reason that says so, in one line (it never raises).
    ((_, evaluation_id),) = list(base.iter_evaluation_refs())
    damaged = base.objects.path_of(evaluation_id)
    damaged.chmod(0o644)
    damaged.write_bytes(b"damaged")
    text = miss_reason(Store(tmp_path / "base"), function, args_id, digest, code)
    assert text.startswith("cannot tell why") and "\n" not in text


def test_result_tensors_are_read_from_their_blobs(store_dir: Path) -> None:
    """Views, bfloat16, complex and numpy arrays: max abs differences from the stored bytes."""
    import numpy as np
    import torch

    from memostore import memo
    from memostore.inspect.comparison import diff_records

    @memo
    def tensors(shift: float) -> tuple:
        base = torch.arange(6, dtype=torch.float32)
        base[4] += shift
        return (
            base,
            base[3:],  # stored as a view into base's blob
            torch.full((3,), 1.0 + shift, dtype=torch.bfloat16),
            torch.tensor([1 + 1j, 2j], dtype=torch.complex128) * (1 + shift),
            np.arange(3, dtype=np.int16) * int(1 + shift),
        )

    tensors(0.0)
    tensors(1.0)
    first, second = tensors.lookup(0.0), tensors.lookup(1.0)
    assert first is not None and second is not None
    report = diff_records(Store(store_dir), first.id, second.id)["result"]
    found = {t["path"]: t for t in report["tensors"]}
    assert found["[0]"]["max_abs_diff"] == 1.0 and found["[0]"]["shape"] == [6]
    assert found["[1]"]["max_abs_diff"] == 1.0 and found["[1]"]["shape"] == [3]
    assert found["[2]"]["max_abs_diff"] == 1.0 and found["[2]"]["dtype"] == "bfloat16"
    assert found["[3]"]["max_abs_diff"] == pytest.approx(abs(2j))
    assert found["[4]"]["max_abs_diff"] == 2.0 and found["[4]"]["dtype"] == "int16"


def test_explaining_a_miss_on_an_omegaconf_config_edited_in_place_ends(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from omegaconf import OmegaConf

    from memostore import memo, set_verbose

    # Every node of a DictConfig refers back to its parent: a walk that followed each
    # reference anew never ended.
    cfg = OmegaConf.create(
        {
            "model": {"hidden": 4, "layers": [1, 2, 3], "act": {"name": "relu"}},
            "optim": {"lr": 0.1, "betas": [0.9, 0.99], "sched": {"step": 10}},
            "data": {"path": "x", "batch": 3, "aug": {"flip": True}},
        }
    )

    @memo
    def width(cfg: Any) -> int:
        return int(cfg.model.hidden) * 2

    set_verbose(True)
    try:
        assert width(cfg) == 8
        cfg.model.hidden = 8
        assert width(cfg) == 16
    finally:
        set_verbose(None)
    lines = re.findall(r"memostore: [\w.<>]+: miss key \w+ \((.*)\)", capsys.readouterr().err)
    assert lines[0] == "first call"
    assert "['model']" in lines[1] and "['hidden']" in lines[1], lines[1]


def test_a_comparison_past_its_budget_says_it_stopped(tmp_path: Path, store_dir: Path) -> None:
    from memostore import memo

    @memo
    def total(values: list[int]) -> int:
        return sum(values)

    first = list(range(120_000))  # past the budget of nodes compared
    second = [*first[:-1], -1]  # the one difference lies beyond it
    assert total(first) != total(second)
    ids = [entry["id"] for entry in json.loads(run_cli(store_dir, "log", "--json").stdout)]
    report = json.loads(run_cli(store_dir, "diff", ids[1], ids[0], "--json").stdout)
    assert report["args"]["values"]["stopped"] is True
    shown = run_cli(store_dir, "diff", ids[1], ids[0])
    assert shown.returncode == 0 and "the comparison stopped here" in shown.stdout


def test_a_result_object_reached_by_two_paths_is_listed_once(store_dir: Path) -> None:
    """(model, opt, sched): the optimizer's tensors show once, not again under sched.optimizer."""
    import torch

    from memostore import memo
    from memostore.inspect.comparison import diff_records

    @memo
    def fit(lr: float) -> tuple:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        model(torch.ones(4, 3)).sum().backward()
        opt.step()
        sched.step()
        return model, opt, sched

    fit(0.1)
    fit(0.2)
    first, second = fit.lookup(0.1), fit.lookup(0.2)
    assert first is not None and second is not None
    report = diff_records(Store(store_dir), first.id, second.id)["result"]
    paths = [t["path"] for t in report["tensors"]]
    assert paths, report
    assert len(paths) == len(set(paths)), paths
    # Each distinct tensor once, where the model holds it: the optimizer's
    # parameters are the model's, and the scheduler's optimizer is the optimizer
    # (the first step's moments do not depend on lr: equal on both sides).
    assert paths == ["[0].weight", "[0].bias"], paths
