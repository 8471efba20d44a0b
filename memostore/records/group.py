"""The torch.distributed process group this process is a rank of, and its few collectives.

torch is never imported here: a process that has not imported it cannot be a
rank of a process group, so :func:`current` costs one ``sys.modules`` lookup
there. Every collective goes through the default (world) group, on CPU tensors
for gloo and on the current CUDA device for NCCL, and every rank calls it at
the same point of the same memoised call: the callers keep that order.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import sys
import weakref
from collections.abc import Iterator
from typing import Any

# Set while rank 0 runs a leader-mode body alone: memoised calls nested in it are
# that rank's own (the other ranks are waiting, not calling them too).
_alone: contextvars.ContextVar[bool] = contextvars.ContextVar("memostore_alone", default=False)


class Group:
    """The default process group of an initialised torch.distributed job (world size > 1)."""

    def __init__(self, torch: Any, dist: Any, handle: Any) -> None:
        self.torch = torch
        self.dist = dist
        # The default group object, weakly: a strong reference would keep the group
        # alive after the user's destroy_process_group(), to be torn down while the
        # interpreter finalizes, where gloo's threads can abort the process.
        self.handle = weakref.ref(handle)
        self.job = next(_jobs)  # names this group for caches: ids of dead ones are reused
        self.rank: int = dist.get_rank()
        self.world: int = dist.get_world_size()
        backend = str(dist.get_backend()).lower()
        # NCCL moves CUDA tensors only; a mixed "cpu:gloo,cuda:nccl" group takes CPU ones.
        if backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")

    def all_gather_fixed(self, data: bytes) -> list[bytes]:
        """Every rank's *data* (the same length on every rank), by rank."""
        torch = self.torch
        mine = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        out = [torch.empty_like(mine) for _ in range(self.world)]
        self.dist.all_gather(out, mine)
        return [bytes(t.cpu().numpy().tobytes()) for t in out]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable *obj*, by rank."""
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank *src*'s picklable *obj*, on every rank."""
        box = [obj if self.rank == src else None]
        self.dist.broadcast_object_list(box, src=src, device=self.device)
        return box[0]

    def broadcast_bytes(self, data: bytes | None, src: int = 0) -> bytes:
        """Rank *src*'s *data* on every rank (a length, then the bytes: no pickling)."""
        torch = self.torch
        size = torch.tensor([len(data) if self.rank == src and data else 0], dtype=torch.int64)
        size = size.to(self.device)
        self.dist.broadcast(size, src=src)
        n = int(size.item())
        if n == 0:
            return b""
        if self.rank == src:
            buf = torch.frombuffer(bytearray(data or b""), dtype=torch.uint8).to(self.device)
        else:
            buf = torch.empty(n, dtype=torch.uint8, device=self.device)
        self.dist.broadcast(buf, src=src)
        return data if self.rank == src and data else bytes(buf.cpu().numpy().tobytes())

    def barrier(self) -> None:
        """Return once every rank has called it (a one-byte gather: any backend)."""
        self.all_gather_fixed(b"\0")


_cached: Group | None = None
_jobs = itertools.count()


def _dist() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
    except Exception:  # a partly initialised or unusual build: not a job we know of
        return None
    return dist


def current() -> Group | None:
    """This process's group when it is a rank of a job of two or more ranks, else None.

    None also inside a leader-mode body on rank 0 (:func:`alone`).
    """
    global _cached
    if _alone.get():
        return None
    dist = _dist()
    if dist is None:
        return None
    try:
        handle = dist.group.WORLD
        if _cached is not None and _cached.handle() is handle:
            return _cached
        if dist.get_world_size() < 2:
            return None
        _cached = Group(sys.modules["torch"], dist, handle)
    except Exception:
        return None
    return _cached


def other_rank() -> int | None:
    """This process's rank in an initialised torch.distributed job, unless it is rank 0."""
    dist = _dist()
    if dist is None:
        return None
    try:
        rank = int(dist.get_rank())
    except Exception:
        return None
    return rank or None


def acting_alone() -> bool:
    """Whether memoised calls made now are this rank's own (inside :func:`alone`)."""
    return _alone.get()


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Memoised calls made inside are this rank's own: no collective decision.

    For calls that only some ranks make (``if rank == 0: evaluate(model)``):
    without it, such a call would wait in the decision for ranks that never
    make it. Inside, a call is keyed, looked up and stored as in a process of
    its own (single-flight included).

    Example:
        >>> with memostore.distributed.alone():
        ...     score = evaluate(model)
    """
    token = _alone.set(True)
    try:
        yield
    finally:
        _alone.reset(token)
