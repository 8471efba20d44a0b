"""Globals that hold data are keyed by value at each call; service objects are skipped.

A non-constant global read by the closure is a dependency of kind ``"data"``
listed in ``CodeInfo.data_globals`` (the memoize layer reads and hashes it at
each call) unless it is a service object (kind ``"object"``, by type only).
Neither kind puts the value into the code digest.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import importlib
import io
import logging
import multiprocessing
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from tqdm import tqdm

from memostore import SummaryWriter, ignore_global
from memostore.code.deps import DataGlobal, code_info, data_globals


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write and import a module under a name unique to the test; ``MOD_`` is its prefix."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []
    prefix = f"cgtest_{abs(hash(str(tmp_path))) % 10**8}_"

    def make(name: str, source: str):
        full = prefix + name
        (tmp_path / f"{full}.py").write_text(textwrap.dedent(source).replace("MOD_", prefix))
        importlib.invalidate_caches()
        names.append(full)
        return importlib.import_module(full)

    yield make
    for name in names:
        sys.modules.pop(name, None)


def _reader(make_module, names: list[str]):
    """A module whose ``f`` reads every global in *names*; the test binds them."""
    body = "\n".join(f"    use({name})" for name in names)
    return make_module("reader", f"def use(x):\n    return x\ndef f():\n{body}\n    return 1\n")


@dataclasses.dataclass
class MutableConfig:
    lr: float = 0.1


class SummaryWriterLike:
    """Named like no writer: data."""


class FileWriter:
    """A writer by its class name, whatever its module."""


def _generator():
    yield 1


def test_each_data_type_is_listed_and_keyed_by_value(make_module) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    values = {
        "tensor": torch.ones(3),
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "args": argparse.Namespace(batch_size=128, lr=1e-3),
        "loader": torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2))),
        "array": np.arange(4),
        "config": MutableConfig(),
        "tensors": [torch.ones(1), 2],
        "device": torch.device("cpu"),
        "step": model.forward,  # a method bound to an instance carries its state
        "plain": SummaryWriterLike(),
    }
    mod = _reader(make_module, list(values))
    vars(mod).update(values)
    info = code_info(mod.f)
    name = mod.__name__
    for key, value in values.items():
        dep = info.deps[f"{name}:{key}"]
        assert dep.kind == "data", key
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        assert dep.source == f"{key}: {type_name} (keyed by value at each call)"
    assert [g.symbol for g in info.data_globals] == sorted(f"{name}:{key}" for key in values)
    for g in info.data_globals:
        assert isinstance(g, DataGlobal)
        assert g.namespace is vars(mod)
        assert g.read() is values[g.name]
    # The digest of a data dependency is its symbol and kind, never its value.
    assert "dist:torch" in info.deps  # the values' classes stay dependencies
    assert f"{__name__}:MutableConfig" in info.deps
    assert data_globals(mod.f) == info.data_globals


def test_each_service_type_is_skipped_by_type(make_module, tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    popen = subprocess.Popen([sys.executable, "-c", "pass"])
    sock = socket.socket()
    handle = open(tmp_path / "f.txt", "w")  # noqa: SIM115 (kept open as a global would be)
    executor = concurrent.futures.ThreadPoolExecutor(1)
    torch_writer = TorchWriter(log_dir=str(tmp_path / "tb"))
    logger = logging.getLogger("cgtest")
    loop = asyncio.new_event_loop()
    mp_queue = multiprocessing.get_context("spawn").Queue()
    services = {
        "logger": logger,
        "adapter": logging.LoggerAdapter(logger, {}),
        "handler": logging.StreamHandler(),
        "writer": SummaryWriter.__new__(SummaryWriter),  # memostore's own, not opened
        "torch_writer": torch_writer,
        "file_writer": FileWriter(),
        "lock": threading.Lock(),
        "rlock": threading.RLock(),
        "condition": threading.Condition(),
        "semaphore": threading.Semaphore(),
        "event": threading.Event(),
        "thread": threading.Thread(target=print),
        "local": threading.local(),
        "executor": executor,
        "queue": queue.Queue(),
        "simple_queue": queue.SimpleQueue(),
        "mp_lock": multiprocessing.get_context("spawn").Lock(),
        "mp_queue": mp_queue,
        "mp_context": multiprocessing.get_context("spawn"),
        "future": concurrent.futures.Future(),
        "loop": loop,
        "async_lock": asyncio.Lock(),
        "async_queue": asyncio.Queue(),
        "text": io.StringIO(),
        "weak_values": weakref.WeakValueDictionary(),
        "file": handle,
        "buffer": io.BytesIO(b"x"),
        "sock": sock,
        "popen": popen,
        "bar": tqdm(total=1, disable=True),
        "gen": _generator(),
        "ref": weakref.ref(MutableConfig),
        "stdout": sys.stdout,
        "info": logger.info,  # a method of a service is a service
    }
    try:
        mod = _reader(make_module, list(services))
        vars(mod).update(services)
        info = code_info(mod.f)
        for key, value in services.items():
            dep = info.deps[f"{mod.__name__}:{key}"]
            assert dep.kind == "object", key
            type_name = f"{type(value).__module__}.{type(value).__qualname__}"
            assert dep.source == f"{key}: {type_name} (service object: not keyed)", key
        assert info.data_globals == ()
    finally:
        popen.wait()
        sock.close()
        handle.close()
        executor.shutdown()
        torch_writer.close()
        loop.close()
        mp_queue.close()


def test_data_is_found_through_helpers_methods_cells_and_defaults(make_module) -> None:
    make_module(
        "state",
        """
        import torch
        weights = torch.zeros(2)
        def scale(x):
            return x * weights
        """,
    )
    mod = make_module(
        "train",
        """
        import torch
        import MOD_state as state
        from MOD_state import scale
        model = torch.nn.Linear(2, 2)
        class Trainer:
            def step(self, x):
                return model(x)
        def make(opt):
            def inner(x, extra=torch.ones(2)):
                return opt, extra, x
            return inner
        inner = make(torch.optim.SGD(model.parameters(), lr=0.1))
        def f(x):
            return Trainer().step(scale(x)) + state.weights, inner(x)
        """,
    )
    info = code_info(mod.f)
    state = mod.__name__.replace("train", "state")
    symbols = [g.symbol for g in info.data_globals]
    cell = f"{mod.__name__}:make.<locals>.inner.<opt>"
    default = f"{mod.__name__}:make.<locals>.inner.<extra>"
    assert symbols == sorted([f"{mod.__name__}:model", f"{state}:weights", cell, default])
    by_symbol = {g.symbol: g for g in info.data_globals}
    assert by_symbol[f"{state}:weights"].namespace is vars(sys.modules[state])
    assert by_symbol[cell].read() is mod.inner.__closure__[0].cell_contents
    assert by_symbol[default].read() is mod.inner.__defaults__[0]
    assert info.deps[cell].kind == info.deps[default].kind == "data"
    # The views read live values.
    mod.inner.__defaults__ = (torch.zeros(2),)
    assert by_symbol[default].read() is mod.inner.__defaults__[0]


def test_data_values_never_enter_the_digest_and_keep_the_closure(make_module) -> None:
    mod = make_module(
        "values",
        """
        import argparse
        import torch
        args = argparse.Namespace(batch_size=128)
        weights = torch.zeros(3)
        best = 1.0
        def record(x):
            global best
            best = min(best, x)
        def f(x):
            return x * weights * args.batch_size + best
        """,
    )
    info = code_info(mod.f)
    name = mod.__name__
    assert info.deps[f"{name}:best"].kind == "data"  # a constant rebound with ``global``
    mod.args.batch_size = 32  # mutated
    mod.weights.add_(1.0)
    mod.weights = torch.full((3,), 7.0)  # rebound to another value of the same type
    mod.record(0.5)
    assert code_info(mod.f) is info
    mod.args = argparse.Namespace(batch_size=1, lr=3)
    assert code_info(mod.f) is info
    # Built again from scratch with the new values: still the same digest.
    ignore_global(f"{name}:no_such_global")  # any registration rebuilds every closure
    rebuilt = code_info(mod.f)
    assert rebuilt is not info and rebuilt.digest == info.digest
    assert rebuilt.deps == info.deps


def test_rebinding_between_data_service_and_constant_rebuilds(make_module) -> None:
    mod = make_module(
        "kinds",
        """
        import torch
        thing = torch.zeros(1)
        def f():
            return thing
        """,
    )
    symbol = f"{mod.__name__}:thing"
    data = code_info(mod.f)
    assert data.deps[symbol].kind == "data"
    mod.thing = logging.getLogger("cgtest.kinds")
    service = code_info(mod.f)
    assert service is not data and service.deps[symbol].kind == "object"
    assert service.data_globals == ()
    mod.thing = 3
    constant = code_info(mod.f)
    assert constant.deps[symbol].kind == "constant" and constant.deps[symbol].source == "thing = 3"
    mod.thing = [torch.zeros(1)]  # a list holding a tensor is data
    assert code_info(mod.f).deps[symbol].kind == "data"
    assert len({data.digest, service.digest, constant.digest}) == 3


def test_ignored_globals_are_neither_data_nor_service(make_module) -> None:
    mod = make_module(
        "ignored",
        """
        import torch
        cache = {"x": torch.zeros(1)}
        model = torch.nn.Linear(1, 1)
        def f():
            return cache, model
        """,
    )
    ignore_global(f"{mod.__name__}:cache")
    ignore_global(mod.model)
    info = code_info(mod.f)
    assert f"{mod.__name__}:cache" not in info.deps
    assert f"{mod.__name__}:model" not in info.deps
    assert info.data_globals == ()


def test_user_class_of_a_data_value_is_a_dependency(make_module) -> None:
    mod = make_module(
        "userclass",
        """
        class Net:
            def forward(self, x):
                return x + 1
        net = Net()
        def f(x):
            return net.forward(x)
        """,
    )
    info = code_info(mod.f)
    assert info.deps[f"{mod.__name__}:net"].kind == "data"
    assert info.deps[f"{mod.__name__}:Net"].kind == "class"
    assert "return x + 1" in info.deps[f"{mod.__name__}:Net"].source


def test_a_module_rebound_with_global_is_a_service(make_module) -> None:
    mod = make_module(
        "lazy",
        """
        np = None
        def load():
            global np
            import numpy as np
        def f(x):
            return np.asarray(x)
        """,
    )
    mod.load()
    info = code_info(mod.f)
    dep = info.deps[f"{mod.__name__}:np"]
    assert dep.kind == "object" and dep.source == "np: builtins.module (service object: not keyed)"
    assert info.data_globals == ()
