"""Training code as pytorch/examples writes it, memoised as it is. Run it twice.

``train()`` trains the model and the optimizer in place and returns None;
``test()`` switches the model to eval mode and returns numbers; the loop
around them seeds the global RNG once and lets a shuffling DataLoader and
dropout draw from it; the scheduler steps between epochs. Nothing here was
rewritten for memostore but the two decorators (and a synthetic data set in
place of the MNIST download).

The second run is all hits, and ends with the same weights, optimizer state
and RNG state as the first, because a hit replays what the body did to its
arguments and to the global RNGs::

    MEMOSTORE_VERBOSE=1 python examples/mnist_inplace.py --epochs 3
    MEMOSTORE_VERBOSE=1 python examples/mnist_inplace.py --epochs 3   # all hits
"""

from __future__ import annotations

import argparse
import hashlib

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from memostore import memo


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.dropout1 = nn.Dropout(0.25)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout1(x)
        return F.log_softmax(self.fc2(x), dim=1)


@memo(ignore=("device",))
def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                f"\tLoss: {loss.item():.6f}"
            )
            if args.dry_run:
                break


@memo(ignore=("device",))
def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    return test_loss, correct


def synthetic_digits(n: int, prototypes: torch.Tensor, generator: torch.Generator) -> TensorDataset:
    """8x8 'digits': noisy copies of one prototype per class (a stand-in for MNIST)."""
    labels = torch.randint(0, 10, (n,), generator=generator)
    images = prototypes[labels] + 0.3 * torch.randn(n, 1, 8, 8, generator=generator)
    return TensorDataset(images, labels)


def state_digest(model: nn.Module, optimizer: optim.Optimizer) -> str:
    """A digest of the weights, the optimizer's state and the global RNG, to compare runs."""
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    for state in optimizer.state.values():
        for _, value in sorted(state.items()):
            if torch.is_tensor(value):
                h.update(value.detach().contiguous().numpy().tobytes())
    h.update(torch.get_rng_state().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description="pytorch/examples-style training, memoised")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    data = torch.Generator().manual_seed(0)
    prototypes = torch.rand(10, 1, 8, 8, generator=data)
    train_set = synthetic_digits(2048, prototypes, data)
    test_set = synthetic_digits(512, prototypes, data)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test_loss, correct = test(model, device, test_loader)
        print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/512")
        scheduler.step()
    print(f"final state {state_digest(model, optimizer)}")


if __name__ == "__main__":
    main()
