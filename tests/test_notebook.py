"""Notebooks under a real Jupyter kernel (nbclient + ipykernel).

Cells define the model and the memoised functions in the kernel's ``__main__``,
train in place and return None, as notebooks are written. Run twice, in two
kernels, the second run is all hits and ends with the same weights; editing a
cell changes only the keys of what it defines, and ``memostore diff FN
--source NOTEBOOK`` says which cell's code changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CELLS = [
    """
import torch
import torch.nn as nn
import torch.nn.functional as F
from memostore import memo, set_verbose

set_verbose(True)
torch.manual_seed(0)
x = torch.randn(64, 5)
y = (x.sum(1) > 0).long()
model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
""",
    """
@memo
def train_epoch(model, opt, epoch):
    model.train()
    for _ in range(5):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
""",
    """
@memo
def accuracy(model):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()
""",
    """
for epoch in range(3):
    train_epoch(model, opt, epoch)
    print("acc", round(accuracy(model), 6), model.training)
print("weights", round(sum(p.double().sum().item() for p in model.parameters()), 8))
""",
]


def _notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source.strip()) for source in cells]
    nbformat.write(nb, str(path))


def _run(path: Path, store: Path) -> tuple[list[str], list[str]]:
    """Execute the notebook in a fresh kernel: (printed lines, memostore verbose lines)."""
    nb = nbformat.read(str(path), as_version=4)
    os.environ["MEMOSTORE_DIR"] = str(store)
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=180,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
    finally:
        del os.environ["MEMOSTORE_DIR"]
    out, calls = [], []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if output.get("name") == "stdout":
                out.extend(text.splitlines())  # what the cells print
                continue
            for line in text.splitlines():  # memostore's lines, and any error
                if line.startswith("memostore: "):
                    if line.split()[2] != "stored":  # the decisions: miss or hit
                        calls.append(" ".join(line.split()[1:3]).rstrip(":"))
                elif line.strip():
                    out.append(line)
    return out, calls


@pytest.mark.slow
def test_a_notebook_hits_in_a_second_kernel_and_diff_reads_its_cells(tmp_path: Path) -> None:
    notebook = tmp_path / "train.ipynb"
    store = tmp_path / "store"
    _notebook(notebook, CELLS)
    first, calls = _run(notebook, store)
    assert calls == ["train_epoch: miss", "accuracy: miss"] * 3
    second, calls = _run(notebook, store)
    assert calls == ["train_epoch: hit", "accuracy: hit"] * 3
    assert second == first
    assert first[-1].startswith("weights") and "acc" in first[0] and "False" in first[0]

    # An edit of one cell (same behaviour, other code): only the calls of the
    # function it defines miss, and diff names that function from the notebook.
    edited = [*CELLS]
    edited[2] = CELLS[2].replace("argmax(1) == y", "argmax(1) != 1 - y")
    _notebook(notebook, edited)
    env = {**os.environ, "MEMOSTORE_DIR": str(store)}
    why = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "diff", "accuracy", "--source", str(notebook),
         "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert why.returncode == 0, why.stderr
    verdict = json.loads(why.stdout)
    assert verdict["verdict"] == "miss"
    assert [c["symbol"] for c in verdict["code"]["changed"]] == ["__main__:accuracy"]
    assert "argmax(1) != 1 - y" in verdict["code"]["changed"][0]["diff"]
    third, calls = _run(notebook, store)
    assert calls == ["train_epoch: hit", "accuracy: miss"] * 3
    assert third == first
