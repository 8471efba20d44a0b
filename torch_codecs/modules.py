"""``nn.Module``: the whole module tree as one document.

Node (tag ``torch.module``, a standalone document), recursively for submodules::

    cls       digest-pinned code ref of the module's class
    params    [[name, tensor node or null], ...]   in registration order
    buffers   [[name, tensor node or null], ...]
    modules   [[name, module tree or null], ...]  (or {"again": n}: the n-th module
              of this tree, pre-order, when one submodule is registered twice)
    hooks     {hook dict name: [[n, hook], ...]}  hooks, renumbered 0.. (the
              handle ids of a process are not part of a value)
    state     every other entry of the module's __dict__ (training, sizes, ...)

The tree is one document so that identity holds across it: a parameter shared
by two submodules (tied weights) is one object after a restore, and a
submodule registered twice is one module. Restoring calls ``cls.__new__`` and
``__setstate__``, never ``__init__``, as unpickling does.

Modules held in plain attributes (not registered) are stored as values of
their own and restore as distinct objects.

A parametrized module (``weight_norm``, ``spectral_norm``, any
``register_parametrization``) is an instance of a class torch makes for it at
run time; it is stored with the class it had before (``cls``) and the names
of its parametrized tensors (``parametrized``), and restored by making that
class again, as ``register_parametrization`` does. Its ``parametrizations``
submodule (the original tensors and the parametrizations' own state) is an
ordinary part of the tree.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from torch.nn.utils import parametrize

from memostore.errors import DecodeError, EncodeError, MalformedObject
from memostore.odb.objects import canonical_json
from memostore.values.codecs import Codec

from . import fsdp
from .dtensor import TAG as DTENSOR_TAG
from .dtensor import is_shard
from .fingerprints import Fingerprint, fingerprint_or_none
from .hooks import HOOK_OWNER, encode_hooks, is_hook_dict, restore_hooks
from .module_guards import TreeGuard
from .replay import assign_module
from .summaries import summarize

_OWN_KEYS = frozenset({"_parameters", "_buffers", "_modules"})
# A compiled forward is a per-process cache; Module.__getstate__ drops it too.
_TRANSIENT_KEYS = frozenset({"_compiled_call_impl"})
SESSION_PARAMS = "torch.restored_params"


def param_key(node: Any) -> Hashable | None:
    """What identifies a parameter's content across documents (None for views)."""
    if isinstance(node, dict) and node.get("$") == DTENSOR_TAG:
        shards = node.get("shards") or [node.get("local")]
        blobs = tuple(s.get("blob") if isinstance(s, dict) else None for s in shards)
        # The layout too: equal local shards of differently laid out parameters differ.
        layout = canonical_json([node.get("shape"), node.get("placements"), node.get("mesh")])
        return ("dtensor", blobs, bool(node.get("requires_grad")), node.get("kind"), layout)
    if not isinstance(node, dict) or node.get("$") != "torch.tensor":
        return None
    data = node.get("data")
    if not isinstance(data, dict) or "blob" not in data or "base" in data:
        return None
    return (data["blob"], bool(node.get("requires_grad")), node.get("kind"), node.get("device"))


class ModuleCodec(Codec):
    """Any ``torch.nn.Module``, built-in or user-defined."""

    tag = "torch.module"
    types = (torch.nn.Module,)
    standalone = True

    def encode(self, m: torch.nn.Module, enc: Any) -> dict[str, Any]:
        fsdp_cls = fsdp.fsdp_module_class()
        return _encode_tree(m, enc, {}, None if fsdp_cls is None else _Sharding(fsdp_cls))

    def decode(self, node: dict[str, Any], dec: Any) -> torch.nn.Module:
        restored: list[tuple[Any, Any]] = []
        seen: list[torch.nn.Module] = []
        sharding = _Sharding(None)
        module = _decode_tree(node, dec, seen, restored, sharding)
        if sharding.slots or sharding.modules:
            fsdp.reapply(sharding.modules, sharding.slots, seen)
        # The optimizer codec binds its parameters to these (see optim.py).
        by_key: dict[Hashable, list[torch.nn.Parameter]] = {}
        for param_node, param in restored:
            key = param_key(param_node)
            if key is not None and isinstance(param, torch.nn.Parameter):
                by_key.setdefault(key, []).append(param)
        dec.session.setdefault(SESSION_PARAMS, []).append(by_key)
        return module

    def holds_shards(self, m: torch.nn.Module) -> bool:
        return any(map(is_shard, m.parameters()))

    def fingerprint(self, m: torch.nn.Module) -> Hashable | None:
        snapshot = fingerprint_or_none(m)
        return None if snapshot is None else ModuleFingerprint(snapshot)

    def fingerprint_holds(self, m: torch.nn.Module, fingerprint: Hashable) -> bool:
        if not isinstance(fingerprint, ModuleFingerprint):
            return False
        guard = fingerprint.guard
        if guard is not None and guard.holds(m):
            return True
        snapshot = fingerprint_or_none(m)
        if snapshot is None or snapshot != fingerprint.snapshot:
            return False
        # Seen again, unchanged: from now on a guard proves it faster than a snapshot.
        fingerprint.guard = TreeGuard.build(m)
        return True

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}

    def assign(self, target: torch.nn.Module, source: torch.nn.Module, plan: Any) -> bool:
        return assign_module(target, source, plan)

    def same_type(self, target: Any, source: Any) -> bool:
        # Each parametrized module has a class of its own, made at run time.
        return (
            isinstance(target, torch.nn.Module)
            and parametrize.is_parametrized(target)
            and parametrize.is_parametrized(source)
            and parametrize.type_before_parametrizations(target)
            is parametrize.type_before_parametrizations(source)
            and list(target.parametrizations.keys()) == list(source.parametrizations.keys())
        )


class ModuleFingerprint:
    """A module tree's snapshot, and a guard of it once the tree was seen unchanged.

    Equality is the snapshot's. The guard (``module_guards.py``) is built on the
    first repeated digest, not the first: most objects are hashed once, and a
    guard costs about as much as a snapshot to build.
    """

    __slots__ = ("guard", "snapshot")

    def __init__(self, snapshot: Fingerprint) -> None:
        self.snapshot = snapshot
        self.guard: TreeGuard | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModuleFingerprint):
            return NotImplemented
        return self.snapshot == other.snapshot

    def __hash__(self) -> int:
        return hash(self.snapshot)


class _Sharding:
    """FSDP2 in a module tree being stored or restored (``fsdp.py``).

    Attributes:
        cls: ``FSDPModule`` when storing (None: FSDP is not even imported).
        managed: storing: (id of module, name) -> FSDP's sharded parameter.
        slots: restoring: (id of module, name) -> the restored DTensor parameter.
        modules: restoring: (module, its ``fsdp`` field) of each FSDP module, pre-order.
    """

    def __init__(self, cls: type | None) -> None:
        self.cls = cls
        self.managed: dict[tuple[int, str], Any] = {}
        self.slots: dict[tuple[int, str], Any] = {}
        self.modules: list[tuple[torch.nn.Module, dict[str, Any]]] = []
        self.placeholders: dict[int, torch.nn.Parameter] = {}


def _encode_tree(
    m: torch.nn.Module, enc: Any, seen: dict[int, int], sharding: _Sharding | None
) -> dict[str, Any]:
    index = seen.get(id(m))
    if index is not None:
        return {"again": index}
    seen[id(m)] = len(seen)
    d = _module_state(m)
    cls = parametrize.type_before_parametrizations(m)
    spec = None
    if sharding is not None and isinstance(m, sharding.cls):  # type: ignore[arg-type]
        cls = fsdp.original_class(m)
        spec = fsdp.describe(m, sharding.managed)  # before the parameters: it names them
    managed = sharding.managed if sharding is not None else {}
    node: dict[str, Any] = {"cls": enc.code(cls)}
    if parametrize.is_parametrized(m):
        node["parametrized"] = list(m.parametrizations.keys())
    params = []
    sharded = []
    for name, p in d.get("_parameters", {}).items():
        if managed and (id(m), name) in managed:
            p = managed[(id(m), name)]  # this rank's shard, whether unsharded now or not
            sharded.append(name)
        params.append([name, None if p is None else enc.node(p)])
    node["params"] = params
    node["buffers"] = [
        [name, None if b is None else enc.node(b)] for name, b in d.get("_buffers", {}).items()
    ]
    node["modules"] = [
        [name, None if c is None else _encode_tree(c, enc, seen, sharding)]
        for name, c in d.get("_modules", {}).items()
    ]
    state: dict[str, Any] = {}
    hooks: dict[str, Any] = {}
    for name, value in d.items():
        if name in _OWN_KEYS or name in _TRANSIENT_KEYS:
            continue
        if managed and fsdp.is_fsdp_entry(name, value):
            continue
        if name.startswith("_") and is_hook_dict(name, value):
            hooks[name] = value
        else:
            state[name] = value
    if managed or spec is not None:
        hooks = _without_fsdp_hooks(hooks)
    outer = enc.scratch.get(HOOK_OWNER)
    enc.scratch[HOOK_OWNER] = m  # a hook given its module names this one
    try:
        node["hooks"] = encode_hooks(hooks, enc)
    finally:
        enc.scratch[HOOK_OWNER] = outer
    node["state"] = enc.node(state)
    if sharded:
        node["sharded"] = sharded
    if spec is not None:
        node["fsdp"] = spec
    return node


def _without_fsdp_hooks(hooks: dict[str, Any]) -> dict[str, Any]:
    """*hooks* without those FSDP registered, and without their handles' flags."""
    dropped = {k for h in hooks.values() for k, v in h.items() if fsdp.is_fsdp_hook(v)}
    if not dropped:
        return hooks
    return {name: {k: v for k, v in h.items() if k not in dropped} for name, h in hooks.items()}


def _module_state(m: torch.nn.Module) -> dict[str, Any]:
    """What pickling would store of *m* (its ``__getstate__``, usually its ``__dict__``)."""
    getstate = type(m).__getstate__
    if getstate is torch.nn.Module.__getstate__ or parametrize.is_parametrized(m):
        return m.__dict__  # a parametrized module's class refuses pickling, not its state
    try:
        state = getstate(m)  # e.g. RNNs drop their weak references to the flat weights
    except Exception as exc:
        raise EncodeError(
            f"cannot store the module {type(m).__qualname__}: its __getstate__ refuses "
            f"({exc}). Store its state_dict() instead (for parametrized modules, or call "
            "torch.nn.utils.parametrize.remove_parametrizations first)"
        ) from exc
    if not isinstance(state, dict):
        raise EncodeError(
            f"{type(m).__qualname__}.__getstate__ returned a {type(state).__name__}, "
            "not a dict; memostore stores modules whose state is a dict"
        )
    return state


def _decode_tree(
    node: dict[str, Any],
    dec: Any,
    seen: list[torch.nn.Module],
    restored: list[tuple[Any, Any]],
    sharding: _Sharding,
) -> torch.nn.Module:
    if "again" in node:
        return seen[node["again"]]
    cls = dec.code(node["cls"])
    m = cls.__new__(cls)
    seen.append(m)
    params: dict[str, Any] = {}
    for name, pnode in node["params"]:
        params[name] = None if pnode is None else dec.node(pnode)
        restored.append((pnode, params[name]))
    for name in node.get("sharded", ()):
        # Until fully_shard has sharded it again: a meta placeholder (fsdp.py).
        param = params.get(name)
        if type(param).__name__ != "DTensor":
            raise MalformedObject(f"a module node names {name!r} as sharded, not a DTensor")
        sharding.slots[(id(m), name)] = param
        placeholder = sharding.placeholders.get(id(param))
        if placeholder is None:
            placeholder = sharding.placeholders[id(param)] = fsdp.placeholder(param)
        params[name] = placeholder
    if "fsdp" in node:
        sharding.modules.append((m, node["fsdp"]))
    buffers = {name: None if b is None else dec.node(b) for name, b in node["buffers"]}
    modules = {
        name: None if c is None else _decode_tree(c, dec, seen, restored, sharding)
        for name, c in node["modules"]
    }
    outer = dec.scratch.get(HOOK_OWNER)
    dec.scratch[HOOK_OWNER] = m
    try:
        stored_hooks = dec.node(node["hooks"])
    finally:
        dec.scratch[HOOK_OWNER] = outer
    state = dec.node(node["state"])
    if type(state) is not dict or type(stored_hooks) is not dict:  # no decoded object's methods
        raise DecodeError(f"the stored state of a {cls.__qualname__} is not a dict")
    state.update(restore_hooks(stored_hooks))
    state["_parameters"] = params
    state["_buffers"] = buffers
    state["_modules"] = modules
    m.__setstate__(state)
    if node.get("parametrized"):
        _reparametrize(m, node["parametrized"])
    return m


def _reparametrize(m: torch.nn.Module, names: list[str]) -> None:
    """Make *m* parametrized again, as ``register_parametrization`` left it.

    Its class becomes a subclass of its own made for it (so that the properties
    below are its alone), with a property per parametrized tensor.
    """
    found = m.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(found, torch.nn.ModuleDict) or any(n not in found for n in names):
        raise DecodeError(f"a parametrized module lacks its parametrizations of {names}")
    parametrize._inject_new_class(m)
    for name in names:
        parametrize._inject_property(m, name)
