"""Writes that bypass a tensor's version counter, seen where they are made possible.

A tensor's cached digest is reused while its version counter, data pointer,
shape, stride and dtype are unchanged (``fingerprints.py``). Every in-place
torch operation moves the version counter, but some writers do not:

* ``t.data`` returns an alias of ``t``'s storage with a version counter of its
  own: ``p.data.add_(g)`` (the classic SGD update) changes ``p`` unseen;
* ``t.numpy()`` (and ``np.asarray(t)``, which calls it) returns an array over
  the tensor's memory, which numpy writes without telling torch;
* ``torch.from_numpy(a)``, ``torch.as_tensor(a)``, ``torch.asarray(a)`` and
  ``torch.frombuffer(b)`` make tensors over memory that the caller may still
  write through ``a`` or ``b``;
* torch's fused optimizer kernels (``Adam(fused=True)``, ``AdamW``, ``SGD``,
  ``Adagrad``) update parameters and their state without moving any counter;
* ``share_memory_()`` puts a storage where other processes can write it;
* ``t.data = other`` changes a tensor's shape, stride or dtype, maybe over the
  same storage, without moving its version counter (every in-place operation
  that changes them moves it: ``resize_``, ``set_``, ``transpose_``, ...).

:func:`install` wraps exactly those entry points (once per process). Each of
them records an *exposure* of the storage involved: a global generation
counter moves, and the storage's last exposure is set to it. An alias that
stays alive (a kept ``p.data``, a numpy array) keeps its storage *live*: a
live storage is never trusted, since it can be written at any moment; its
death is an exposure too. The fused kernels bump the version counters of
what they write instead, as the unfused kernels do.

A tensor's cached digest then holds only while its storage is not live and
has not been exposed since the digest was computed (:func:`storage_state`,
:func:`unexposed_since`). Storages are keyed by their data pointer, so two
storages that share an address over time share their record: that can only
make a digest be recomputed more often, never trusted wrongly.

Tensors made over foreign memory before this module was installed (it is
installed when a memoised function is defined in a process that imported
torch, or when memostore first meets a torch value): :func:`install` looks
for every live tensor then, and a storage torch did not allocate itself (one
that cannot be resized: ``from_numpy``, ``frombuffer``, a DLPack capsule, a
mapped file) is never trusted afterwards: such a tensor is hashed at every
use, since the array it was made from may be written at any moment.

What this cannot see, and the rule documented for it (``docs/torch.md``):
writes through raw pointers (``data_ptr()``, DLPack, ctypes, C extensions),
through ``untyped_storage()`` objects, and ``.data`` or numpy aliases of
torch's own storages made before this module was installed. After such a
write, call ``memostore.forget_digest(obj)``.
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any

import torch

_STORAGE = torch._C.TensorBase.untyped_storage
_BASE_DATA = torch._C.TensorBase.data
_BASE_NUMPY = torch._C.TensorBase.numpy
_BASE_SHARE = torch.Tensor.share_memory_
_BASE_FROMBUFFER = torch.frombuffer
_INCREMENT_VERSION = torch.autograd.graph.increment_version
_FUSED_KERNELS = ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_")
# Past this many recorded storages the records start over, with every earlier
# record counted as an exposure (see _forget_all).
_MAX_RECORDS = 1 << 16


class _State:
    """The generation counter: moved by every exposure, anywhere in the process."""

    __slots__ = ("floor", "gen")

    def __init__(self) -> None:
        self.gen = 0
        # Generations at or below this one may have lost their records: a state
        # taken then cannot be proven unexposed any more.
        self.floor = 0


STATE = _State()
_last: dict[int, int] = {}  # storage key -> generation of its last exposure
_live: dict[int, int] = {}  # storage key -> live aliases (kept .data, numpy arrays, ...)
_aliases: dict[int, tuple[weakref.ref[Any], int]] = {}  # id(ref) -> (ref, storage key)
# Storages made over a numpy array the caller may still hold (from_numpy, ...).
_foreign: dict[int, list[weakref.ref[Any]]] = {}
# Aliases that died, not yet counted out of _live. Weakref callbacks run whenever
# the collector does, also while this thread holds _lock: they only append here
# (atomic), and whoever takes _lock next counts them out.
_dead: deque[int] = deque()
_lock = threading.Lock()
_installed = False


def storage_key(t: torch.Tensor) -> int:
    """The key of *t*'s storage: its base address (0 for no storage or no bytes)."""
    try:
        return _STORAGE(t).data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, nested, meta, functional
        return 0


def _touch(key: int) -> None:
    STATE.gen += 1
    _last[key] = STATE.gen
    if len(_last) > _MAX_RECORDS:
        _forget_all()


def _forget_all() -> None:
    """Start the records over; every state taken so far stops being provable."""
    _last.clear()
    STATE.floor = STATE.gen


def _alias_died(ref: weakref.ref[Any]) -> None:
    _dead.append(id(ref))  # no lock here: see _dead


def _drain() -> None:
    """Count the aliases that died out of the live storages (with _lock held).

    Their writes are over, and made before they died: a digest computed from
    now on sees them. One computed earlier was never trusted (the storage was
    live then) or predates the alias (whose birth was an exposure).
    """
    while _dead:
        entry = _aliases.pop(_dead.popleft(), None)
        if entry is None:
            continue
        key = entry[1]
        count = _live.get(key, 0) - 1
        if count > 0:
            _live[key] = count
        else:
            _live.pop(key, None)


def _note_alias(alias: Any, key: int) -> None:
    """*alias* (a tensor or array over storage *key*) may write it while it lives."""
    if not key:
        return
    ref = weakref.ref(alias, _alias_died)
    with _lock:
        _drain()
        _aliases[id(ref)] = (ref, key)
        _live[key] = _live.get(key, 0) + 1
        _touch(key)


def mark_written(tensors: Iterable[torch.Tensor]) -> None:
    """Record that *tensors*' storages were written unseen (for writers of one's own)."""
    with _lock:
        for t in tensors:
            key = storage_key(t)
            if key:
                _touch(key)


def raw_numpy(t: torch.Tensor) -> Any:
    """``t.numpy()`` for memostore's own reads (hashing, checks): not an exposure."""
    return _BASE_NUMPY(t)


def raw_frombuffer(buffer: Any, **kwargs: Any) -> torch.Tensor:
    """``torch.frombuffer`` over a buffer memostore owns (restored bytes): not foreign."""
    return _BASE_FROMBUFFER(buffer, **kwargs)


# -- the wrapped entry points -------------------------------------------------------------
def _data_get(self: torch.Tensor) -> torch.Tensor:
    alias = _BASE_DATA.__get__(self)
    _note_alias(alias, storage_key(alias))
    return alias


def _data_set(self: torch.Tensor, value: torch.Tensor) -> None:
    # The one change of shape, stride or dtype that moves no version counter (and
    # may keep the data pointer: ``p.data = p.view(-1)``): an exposure, before and after.
    before = storage_key(self)
    _BASE_DATA.__set__(self, value)
    after = storage_key(self)
    with _lock:
        _drain()
        for key in {before, after} - {0}:
            _touch(key)


def _numpy(self: torch.Tensor, *, force: bool = False) -> Any:
    array = _BASE_NUMPY(self, force=force)
    key = storage_key(self)
    if key and _array_address(array) == _BASE_DATA_PTR(self):
        _note_alias(array, key)
    return array


def _share_memory(self: torch.Tensor) -> torch.Tensor:
    out = _BASE_SHARE(self)
    key = storage_key(self)
    if key:
        # Other processes may write it from now on: live for as long as it exists.
        with _lock:
            _live[key] = _live.get(key, 0) + 1
            _touch(key)
    return out


def _over_foreign(make: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Wrap a constructor that may return a tensor over the caller's array or buffer."""

    @functools.wraps(make)
    def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = make(*args, **kwargs)
        source = args[0] if args else kwargs.get("obj", kwargs.get("buffer"))
        if isinstance(out, torch.Tensor) and source is not None and type(source) is not bytes:
            _note_foreign(source, out)
        return out

    return wrapper


def _note_foreign(source: Any, out: torch.Tensor) -> None:
    key = storage_key(out)
    if not key:
        return
    address = _array_address(source)
    if address is None:
        if isinstance(source, (bytearray, memoryview)) or hasattr(source, "__buffer__"):
            # A writable buffer we cannot watch: live for as long as the key is seen.
            with _lock:
                _live[key] = _live.get(key, 0) + 1
                _touch(key)
        return
    if not _overlaps(address, source, out):
        return  # a copy was made
    try:
        ref = weakref.ref(source)
    except TypeError:
        with _lock:
            _live[key] = _live.get(key, 0) + 1
            _touch(key)
        return
    with _lock:
        _foreign.setdefault(key, []).append(ref)
        _touch(key)


def _overlaps(address: int, source: Any, out: torch.Tensor) -> bool:
    start = _BASE_DATA_PTR(out)
    nbytes = getattr(source, "nbytes", 0)
    return address <= start < address + max(int(nbytes), 1)


def _array_address(obj: Any) -> int | None:
    iface = getattr(obj, "__array_interface__", None)
    if not isinstance(iface, dict):
        return None
    data = iface.get("data")
    return data[0] if isinstance(data, tuple) and data else None


_BASE_DATA_PTR = torch._C.TensorBase.data_ptr


def _fused(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """A fused optimizer kernel that moves the version counters of what it writes."""

    @functools.wraps(kernel)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = kernel(*args, **kwargs)
        for arg in args:
            if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
                try:
                    _INCREMENT_VERSION(arg)
                except RuntimeError:  # inference tensors have no counter
                    mark_written(arg)
        return out

    return wrapper


def install() -> None:
    """Wrap the entry points above, once per process (idempotent, thread-safe)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    torch.Tensor.data = property(_data_get, _data_set, doc=_BASE_DATA.__doc__)  # type: ignore[method-assign,assignment]
    torch.Tensor.numpy = _numpy  # type: ignore[method-assign]
    torch.Tensor.share_memory_ = _share_memory  # type: ignore[method-assign]
    for name in ("from_numpy", "as_tensor", "asarray", "frombuffer"):
        original = getattr(torch, name, None)
        if original is not None:
            setattr(torch, name, _over_foreign(original))
    for name in _FUSED_KERNELS:
        kernel = getattr(torch, name, None)
        if kernel is not None:
            setattr(torch, name, _fused(kernel))
    _distrust_earlier_foreign()


def _distrust_earlier_foreign() -> None:
    """Never trust a storage over memory torch did not allocate, made before the wrappers.

    ``torch.from_numpy(a)`` made before :func:`install` was not seen: ``a`` may be
    written at any time, unseen. Every live tensor is found once (the collector
    tracks tensors), and each storage that cannot be resized (torch's own
    allocations can) stays live for good: hashed at every use, never stale.
    """
    found: set[int] = set()
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # not isinstance: no __class__ property runs
            try:
                storage = _STORAGE(obj)
                if not storage.resizable():
                    found.add(storage.data_ptr())
            except Exception:
                continue  # sparse, nested, meta, inference, functional: not plain memory
    found.discard(0)
    if found:
        with _lock:
            for key in found:
                _live[key] = _live.get(key, 0) + 1
                _touch(key)


# -- queries ---------------------------------------------------------------------------------
def _foreign_free(key: int) -> bool:
    """Whether no one but torch holds the arrays storage *key* was made over.

    Each such storage holds one reference to its array; once nothing else does,
    the memory is reachable only through torch (whose aliases are watched), and
    the storage stops being foreign. A view of another array never qualifies.
    """
    refs = _foreign.get(key)
    if refs is None:
        return True
    alive = [r for r in refs if r() is not None]
    for ref in alive:
        array = ref()
        if getattr(array, "base", None) is not None:
            return False
        # One reference here, one for getrefcount's argument, one per tensor made.
        if sys.getrefcount(array) - 2 > sum(1 for r in alive if r() is array):
            return False
        del array
    with _lock:
        _foreign.pop(key, None)
    return True


def storage_state(t: torch.Tensor) -> int | None:
    """The generation of the last exposure of *t*'s storage; None while it is live."""
    if _dead:
        with _lock:
            _drain()
    key = storage_key(t)
    if key in _live or (key in _foreign and not _foreign_free(key)):
        return None
    return _last.get(key, 0)


def any_live(tensors: Iterable[torch.Tensor | None]) -> bool:
    """Whether an alias holds the storage of one of *tensors* open (cheap when none does)."""
    if _dead:
        with _lock:
            _drain()
    if not _live and not _foreign:
        return False
    for t in tensors:
        if t is not None:
            key = storage_key(t)
            if key in _live or (key in _foreign and not _foreign_free(key)):
                return True
    return False


def keys_unexposed_since(keys: list[int], gen: int) -> bool:
    """:func:`unexposed_since` for storage keys recorded earlier (C-level passes)."""
    if gen < STATE.floor:
        return False
    if _dead:
        with _lock:
            _drain()
    if (_live and not _live.keys().isdisjoint(keys)) or (
        _foreign and not all(_foreign_free(k) for k in _foreign.keys() & set(keys))
    ):
        return False
    return max(map(_last.get, keys, repeat(0, len(keys))), default=0) <= gen


def unexposed_since(tensors: Iterable[torch.Tensor], gen: int) -> bool:
    """Whether no storage of *tensors* is live or was exposed after generation *gen*."""
    if gen < STATE.floor:
        return False
    if _dead:
        with _lock:
            _drain()
    last = _last.get
    for t in tensors:
        if t is None:
            continue
        key = storage_key(t)
        if key in _live or (key in _foreign and not _foreign_free(key)) or last(key, 0) > gen:
            return False
    return True
