"""Train a small classifier with memostore. Run it twice: the second run is restored.

Every expensive step is a memoised function: the "download" (files kept as a
content-addressed snapshot), building the dataset, training (model, optimizer
and scheduler come back together, the optimizer bound to the model) and the
evaluation. Metrics logged with SummaryWriter stay with the training run.

    python examples/train.py --lr 1e-3
    memostore log
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

from memostore import SummaryWriter, memo, snapshot

N_FEATURES = 32
N_CLASSES = 10


@memo
def download_data(n_samples: int, seed: int = 0):
    """Stand-in for a data set download: writes the files once, returns a snapshot."""
    target = Path(tempfile.mkdtemp()) / "synthetic"
    target.mkdir()
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(N_CLASSES, N_FEATURES)) * 0.5
    labels = rng.integers(0, N_CLASSES, n_samples)
    features = centers[labels] + rng.normal(size=(n_samples, N_FEATURES))
    np.save(target / "features.npy", features.astype(np.float32))
    np.save(target / "labels.npy", labels.astype(np.int64))
    return snapshot(target)


@memo
def load_dataset(files) -> TensorDataset:
    """Read the downloaded files into tensors, normalised."""
    x = torch.from_numpy(np.load(files.path / "features.npy"))
    y = torch.from_numpy(np.load(files.path / "labels.npy"))
    x = (x - x.mean(0)) / x.std(0)
    return TensorDataset(x, y)


class Classifier(nn.Module):
    """A small MLP; its code is part of the key of every call that uses it."""

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(N_FEATURES, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, N_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@memo
def train(loader: DataLoader, epochs: int, lr: float):
    """Train from scratch; returns the model, its optimizer and its scheduler."""
    torch.manual_seed(0)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, epochs // 3), gamma=0.5)
    writer = SummaryWriter()
    step = 0
    for epoch in range(epochs):
        total = 0.0
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            writer.add_scalar("loss", loss.item(), step)
            total += loss.item()
            step += 1
        writer.add_scalar("lr", sched.get_last_lr()[0], epoch)
        # Printed by a run that trains; a restored call prints nothing.
        print(f"    epoch {epoch + 1}/{epochs}: mean loss {total / len(loader):.4f}", flush=True)
        sched.step()
    writer.close()
    return model, opt, sched


@memo
def evaluate(model: nn.Module, loader: DataLoader) -> dict:
    """Accuracy and mean loss on held-out data."""
    model.eval()
    correct, total, loss = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss += nn.functional.cross_entropy(logits, y, reduction="sum").item()
            correct += int((logits.argmax(1) == y).sum())
            total += len(y)
    return {"accuracy": correct / total, "loss": loss / total}


def timed(label: str, fn, *args):
    """Call a memoised function and say whether it ran or came from the store."""
    stored = fn.lookup(*args) is not None
    start = time.perf_counter()
    result = fn(*args)
    how = "restored from the store" if stored else "computed"
    print(f"  {label:<14} {how:<24} {time.perf_counter() - start:6.2f} s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--samples", type=int, default=50_000)
    args = parser.parse_args()

    start = time.perf_counter()
    files = timed("download_data", download_data, args.samples)
    dataset = timed("load_dataset", load_dataset, files)
    train_set, val_set = random_split(
        dataset, [0.9, 0.1], generator=torch.Generator().manual_seed(0)
    )
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=256)
    model, opt, sched = timed("train", train, train_loader, args.epochs, args.lr)
    metrics = timed("evaluate", evaluate, model, val_loader)
    # Restored together, the three stay bound: training could go on from here.
    assert opt.param_groups[0]["params"][0] is next(model.parameters())
    assert sched.optimizer is opt
    print(
        f"  lr={args.lr:g}: accuracy {metrics['accuracy']:.3f}, loss {metrics['loss']:.3f}, "
        f"total {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
