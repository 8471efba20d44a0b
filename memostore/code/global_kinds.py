"""Globals that hold data, and the service objects that are skipped instead.

A global read by the user's code that is not constant-like (see
``graph.Closure.constant_tree``) is either *data* -- a model, a tensor,
an optimizer, parsed arguments, a loader, a mutable dataclass -- whose value
keys every call, or a *service* -- a logger, a writer, a lock, a file -- that
cannot change what the call returns and is skipped by type.
:data:`SERVICE_TYPES` is the whole list of services; everything else is data.

Data is read where the code reads it, at each call: a module's globals dict,
or, for a closure cell or a default value, a live view of it
(:class:`CellView`, :class:`DefaultView`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import CellType, FunctionType, MethodType
from typing import Any

__all__ = ["SERVICE_TYPES", "CellView", "DefaultView", "ServiceType", "service_kind"]


@dataclass(frozen=True)
class ServiceType:
    """Classes whose instances are services, not data.

    Attributes:
        what: What such an object is, in words (shown in its dependency's source).
        module: The module defining the classes, matched with ``isinstance``
            (subclasses count) only when that module is imported, since no
            instance can exist before; None to match the class *name* in any
            module, anywhere in the value's class hierarchy.
        names: Class names (attribute names in *module*).
    """

    what: str
    module: str | None
    names: tuple[str, ...]


SERVICE_TYPES: tuple[ServiceType, ...] = (
    ServiceType("logger", "logging", ("Logger", "LoggerAdapter", "Handler")),
    ServiceType("writer", None, ("SummaryWriter", "FileWriter")),
    ServiceType("wandb run", "wandb.sdk.wandb_run", ("Run",)),
    ServiceType("lock", "_thread", ("LockType", "RLock")),
    ServiceType(
        "threading primitive",
        "threading",
        ("Condition", "Semaphore", "Event", "Barrier", "Thread", "_RLock", "local"),
    ),
    ServiceType("threading primitive", "_thread", ("_local",)),
    ServiceType(
        "multiprocessing primitive",
        "multiprocessing.synchronize",
        ("SemLock", "Condition", "Event", "Barrier"),
    ),
    ServiceType("process", "multiprocessing.process", ("BaseProcess",)),
    ServiceType("pool", "multiprocessing.pool", ("Pool",)),
    ServiceType("queue", "multiprocessing.queues", ("Queue", "SimpleQueue")),
    ServiceType("connection", "multiprocessing.connection", ("Connection", "Listener")),
    ServiceType("manager", "multiprocessing.managers", ("BaseManager", "BaseProxy")),
    ServiceType("multiprocessing context", "multiprocessing.context", ("BaseContext",)),
    ServiceType("executor", "concurrent.futures._base", ("Executor", "Future")),
    ServiceType("queue", "queue", ("Queue", "SimpleQueue")),
    ServiceType("event loop", "asyncio.events", ("AbstractEventLoop",)),
    ServiceType("future", "asyncio.futures", ("Future",)),
    ServiceType("asyncio primitive", "asyncio.locks", ("Lock", "Event", "Condition", "Semaphore")),
    ServiceType("queue", "asyncio.queues", ("Queue",)),
    ServiceType("file", "io", ("IOBase",)),
    ServiceType("socket", "socket", ("socket",)),
    ServiceType("process", "subprocess", ("Popen",)),
    ServiceType("progress bar", "tqdm.std", ("tqdm",)),
    ServiceType("generator", "types", ("GeneratorType", "CoroutineType", "AsyncGeneratorType")),
    ServiceType(
        "weak reference",
        "weakref",
        (
            "ref",
            "ProxyType",
            "CallableProxyType",
            "WeakValueDictionary",
            "WeakKeyDictionary",
            "WeakSet",
            "finalize",
        ),
    ),
    ServiceType("module", "types", ("ModuleType",)),
)

_STREAMS = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")


def service_kind(value: Any) -> str | None:
    """What service *value* is (``"logger"``, ``"file"``, ...), or None when it is data.

    A bound method is judged by its object (``log = logger.info`` is a
    logger's). ``sys.stdout`` and the other standard streams are services
    whatever their class (a notebook or a test runner replaces them).
    """
    if isinstance(value, MethodType):
        value = value.__self__
    if value is not None and any(value is getattr(sys, name, None) for name in _STREAMS):
        return "stream"
    names = {cls.__name__ for cls in type(value).__mro__}
    for service in SERVICE_TYPES:
        if service.module is None:
            if names.intersection(service.names):
                return service.what
            continue
        module = sys.modules.get(service.module)
        if module is None:
            continue
        for name in service.names:
            cls = getattr(module, name, None)
            if isinstance(cls, type) and isinstance(value, cls):
                return service.what
    return None


class CellView(Mapping[str, Any]):
    """A closure cell seen as a one-entry mapping, read live: ``view[name]`` is its contents."""

    __slots__ = ("_cell", "_name")

    def __init__(self, cell: CellType, name: str) -> None:
        self._cell = cell
        self._name = name

    def __getitem__(self, key: str) -> Any:
        if key != self._name:
            raise KeyError(key)
        try:
            return self._cell.cell_contents
        except ValueError:  # the cell was emptied (``del`` of a nonlocal)
            raise KeyError(key) from None

    def __setitem__(self, key: str, value: Any) -> None:
        """Bind the cell (a hit repeating a body's ``nonlocal`` assignment)."""
        if key != self._name:
            raise KeyError(key)
        self._cell.cell_contents = value

    def __iter__(self) -> Iterator[str]:
        return iter((self._name,))

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"<closure cell {self._name}>"


class DefaultView(Mapping[str, Any]):
    """A function's default value for one parameter, read live from the function."""

    __slots__ = ("_func", "_index", "_name")

    def __init__(self, func: FunctionType, name: str, index: int | None) -> None:
        self._func = func
        self._name = name
        self._index = index  # position in ``__defaults__``; None for a keyword-only parameter

    def __getitem__(self, key: str) -> Any:
        if key != self._name:
            raise KeyError(key)
        try:
            if self._index is None:
                return (self._func.__kwdefaults__ or {})[key]
            return (self._func.__defaults__ or ())[self._index]
        except (IndexError, KeyError):  # the defaults were replaced
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter((self._name,))

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"<default of {self._func.__qualname__}({self._name}=...)>"
