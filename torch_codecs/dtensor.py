"""DTensors: this rank's local shard as a tensor blob, with the global tensor's layout.

Node (tag ``torch.dtensor``)::

    dtype, shape, stride  the global tensor's
    requires_grad
    kind        "param" for a parameter (an ``nn.Parameter`` DTensor); absent otherwise
    state       attributes set on it, when there are any
    mesh        {"device_type", "shape", "names", "ranks"}: the device mesh, its
                dimension names (or null) and the global ranks it spans, in order
    placements  one per mesh dimension: ["shard", dim], ["replicate"] or ["partial", op]
    local       {"shape", "blob"}: this rank's local tensor, a blob as any tensor's
                (``blobs.py``), on the mesh's device type when restored

A DTensor hashes and stores as its local shard: the ranks of a job each
store their own (``memostore/values/rank_results.py`` keeps them side by
side), and equal shards, of one rank or of many results (the frozen layers
of a fine-tune), are one blob in the store.

Restoring makes the DTensor again on a 1-D device mesh over every rank of
the job (``DeviceMesh.from_group`` of the default process group: no
collective, so a rank may restore while the others wait elsewhere):

* in a job of the mesh's size, from this rank's own shard, as it was (no
  gathering);
* in a job of another size, from the shards every rank stored (a node
  :meth:`DTensorCodec.merge_ranks` made, with ``shards`` in place of
  ``local``), resharded: ``Shard(d)`` takes this rank's part of the global
  tensor, read from the stored shards that overlap it (a memory-mapped read,
  one copy), ``Replicate()`` any one of them. ``Partial`` placements, meshes
  of more than one dimension and meshes that leave out ranks of the job are
  restored only where they were stored (the same mesh); anything else raises
  a DecodeError naming why (a memo hit: a miss).
"""

from __future__ import annotations

import math
import sys
import weakref
from collections.abc import Hashable
from typing import Any

import torch

from memostore.errors import DecodeError, EncodeError, MalformedObject
from memostore.values.codecs import Codec
from memostore.values.hashcache import digest_cache

from .blobs import read_tensor, tensor_producer
from .dtypes import dtype_name, tensor_dtype
from .fingerprints import tensor_data_state
from .summaries import dtensor_summary

TAG = "torch.dtensor"
_REDUCE_OPS = frozenset({"sum", "avg", "product", "min", "max", "band", "bor", "bxor"})
DTENSOR_TYPE = "torch.distributed.tensor.DTensor"

# One mesh per process group, device type and dimension names: DTensors restored
# together share it (and an FSDP module restored with them, see fsdp.py).
# Per default group, weakly: a group the user destroyed is not kept alive here (it
# would be torn down while the interpreter finalizes, where gloo's threads can abort).
_meshes: weakref.WeakKeyDictionary[Any, dict[tuple[str, tuple[str, ...] | None], Any]] = (
    weakref.WeakKeyDictionary()
)


def encode_placement(p: Any) -> list[Any]:
    """A placement as its node (Shard, Replicate and Partial; nothing else)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    if type(p) is Shard:
        return ["shard", p.dim]
    if type(p) is Replicate:
        return ["replicate"]
    if type(p) is Partial:
        return ["partial", str(p.reduce_op)]
    raise EncodeError(
        f"a DTensor with the placement {p!r} is not supported (only Shard, Replicate and "
        "Partial); store dtensor.full_tensor(), or dtensor.redistribute(...) first"
    )


def decode_placement(node: Any) -> Any:
    from torch.distributed.tensor import Partial, Replicate, Shard

    if isinstance(node, list) and node:
        kind = node[0]
        if kind == "shard" and len(node) == 2 and type(node[1]) is int and node[1] >= 0:
            return Shard(node[1])
        if kind == "replicate" and len(node) == 1:
            return Replicate()
        if kind == "partial" and len(node) == 2 and node[1] in _REDUCE_OPS:
            return Partial(node[1])
    raise MalformedObject(f"a DTensor node holds an unknown placement {str(node)[:60]}")


def mesh_node(mesh: Any) -> dict[str, Any]:
    names = mesh.mesh_dim_names
    return {
        "device_type": mesh.device_type,
        "shape": list(mesh.shape),
        "names": list(names) if names else None,
        "ranks": [int(r) for r in mesh.mesh.flatten().tolist()],
    }


def world_mesh(device_type: str, names: list[str] | None) -> Any:
    """The 1-D device mesh over every rank of this process's job (made without collectives).

    Raises DecodeError when there is no job (torch.distributed not initialized)
    or its device type is not available here.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise DecodeError(
            "a DTensor is restored only where torch.distributed is initialized "
            "(dist.init_process_group, as torchrun's scripts do): call it before this call"
        )
    if not isinstance(device_type, str) or not device_type.isalpha():
        raise MalformedObject(f"a DTensor node names the device type {str(device_type)[:40]!r}")
    if device_type != "cpu":
        backend = getattr(torch, device_type, None)
        if not callable(getattr(backend, "is_available", None)) or not backend.is_available():
            raise DecodeError(f"a DTensor stored on {device_type} needs {device_type} here")
    group = dist.group.WORLD
    key = (device_type, tuple(names) if names else None)
    known = _meshes.setdefault(group, {})
    mesh = known.get(key)
    if mesh is None:
        from torch.distributed.device_mesh import DeviceMesh

        mesh = known[key] = DeviceMesh.from_group(group, device_type, mesh_dim_names=key[1])
    return mesh


def is_shard(t: Any) -> bool:
    """Whether *t* is a DTensor sharded over more than one rank (its local part differs)."""
    found = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(found, "DTensor", None) if found is not None else None
    if dtensor is None or not isinstance(t, dtensor):
        return False
    return t.device_mesh.size() > 1 and any(p.is_shard() for p in t.placements)


def chunk_range(size: int, parts: int, index: int) -> tuple[int, int]:
    """The part *index* of *size* elements split in *parts* as DTensor's Shard splits them."""
    step = -(-size // parts) if size else 0
    start = min(index * step, size)
    return start, min(start + step, size)


class DTensorCodec(Codec):
    """``torch.distributed.tensor.DTensor``, a parameter or not."""

    tag = TAG
    type_names = (DTENSOR_TYPE,)

    def encode(self, t: Any, enc: Any) -> dict[str, Any]:
        local = getattr(t, "_local_tensor", None)
        if not isinstance(local, torch.Tensor):
            local = t.to_local().detach()
        node: dict[str, Any] = {
            "dtype": dtype_name(t.dtype),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "requires_grad": bool(t.requires_grad),
            "mesh": mesh_node(t.device_mesh),
            "placements": [encode_placement(p) for p in t.placements],
        }
        extra = {k: v for k, v in t.__dict__.items() if k != "_is_param"}
        if t.__dict__.get("_is_param"):
            node["kind"] = "param"
        if extra:
            node["state"] = enc.node(extra)
        produce, size = tensor_producer(local)
        blob = enc.cached_blob(local, tensor_data_state(local), produce, size, packable=True)
        node["local"] = {"shape": list(local.shape), "blob": blob}
        return node

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from torch.distributed.tensor import DTensor

        dtype = tensor_dtype(node["dtype"])
        shape = [int(n) for n in node["shape"]]
        stored = node["mesh"]
        placements = [decode_placement(p) for p in node["placements"]]
        if len(placements) != len(stored["shape"]):
            raise MalformedObject("a DTensor node has one placement per mesh dimension")
        if len(stored["shape"]) != 1:
            raise DecodeError(
                f"a DTensor on a {len(stored['shape'])}-D device mesh is stored, but only "
                "DTensors on a 1-D mesh are restored; store dtensor.full_tensor(), or its "
                'local shard with @memo(distributed="per_rank")'
            )
        stride = node["stride"]
        if len(stride) != len(shape) or not all(type(x) is int for x in stride):
            raise MalformedObject("a DTensor node's stride does not match its shape")
        for p in placements:
            if getattr(p, "dim", 0) >= max(len(shape), 1):
                raise MalformedObject(f"a DTensor of {len(shape)} dimensions is sharded on {p}")
        mesh = world_mesh(stored["device_type"], stored["names"])
        world = mesh.size()
        n = stored["shape"][0]
        ranks = stored["ranks"]
        # The length first: a list of the length a node claims would cost its memory.
        if not isinstance(ranks, list) or len(ranks) != n or ranks != list(range(n)):
            raise DecodeError(
                f"a DTensor on a mesh of the ranks {stored['ranks']} is stored; only DTensors "
                "on a mesh of every rank of their job are restored"
            )
        device = _device(stored["device_type"])
        rank = mesh.get_local_rank()
        if "shards" not in node and n == world:
            local = _read(dec, node["local"], dtype, _local_shape(shape, placements[0], n, rank))
        else:
            local = _reshard(dec, node, dtype, shape, placements[0], n, world, rank)
        if local.device != device:
            local = local.to(device)
        t = DTensor.from_local(
            local, mesh, placements, run_check=False, shape=torch.Size(shape), stride=tuple(stride)
        )
        requires_grad = bool(node.get("requires_grad"))
        if node.get("kind") == "param":
            t = torch.nn.Parameter(t, requires_grad=requires_grad)
        elif requires_grad:
            t.requires_grad_(True)
        if "state" in node:
            t.__dict__.update(dec.node(node["state"]))
        return t

    def holds_shards(self, obj: Any) -> bool:
        return is_shard(obj)

    def merge_ranks(self, nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The node of a DTensor from every rank's node of it: their shards side by side."""
        base = {k: v for k, v in nodes[0].items() if k != "local"}
        if "local" not in nodes[0] or any(
            "local" not in n or {k: v for k, v in n.items() if k != "local"} != base for n in nodes
        ):
            return None
        mesh = base.get("mesh") or {}
        placements = base.get("placements") or []
        if (
            mesh.get("ranks") != list(range(len(nodes)))
            or len(placements) != 1
            or placements[0][:1] not in (["shard"], ["replicate"])
        ):
            return None
        return {**base, "shards": [n["local"] for n in nodes]}

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return dtensor_summary(node, reader)

    def fingerprint(self, obj: Any) -> Hashable | None:
        return None  # re-hashed on each use: its local shard is read through a wrapper


def _device(device_type: str) -> torch.device:
    if device_type == "cpu":
        return torch.device("cpu")
    backend = getattr(torch, device_type)
    return torch.device(device_type, backend.current_device())


def _local_shape(shape: list[int], placement: Any, parts: int, index: int) -> list[int]:
    from torch.distributed.tensor import Shard

    if isinstance(placement, Shard):
        d = placement.dim
        start, stop = chunk_range(shape[d], parts, index)
        return [*shape[:d], stop - start, *shape[d + 1 :]]
    return list(shape)


def _read(dec: Any, local: dict[str, Any], dtype: torch.dtype, expected: list[int]) -> torch.Tensor:
    """A stored local shard, checked against the shape the DTensor's layout gives it."""
    shape = [int(n) for n in local["shape"]]
    if shape != expected:
        raise MalformedObject(
            f"a DTensor's stored shard has the shape {shape}, not the {expected} of its layout"
        )
    t = read_tensor(dec, local["blob"], dtype, shape)
    state = tensor_data_state(t)
    if state is not None:
        digest_cache.put(t, state, local["blob"])  # its bytes were just proven to be the blob
    return t


def _reshard(
    dec: Any,
    node: dict[str, Any],
    dtype: torch.dtype,
    shape: list[int],
    placement: Any,
    n: int,
    world: int,
    rank: int,
) -> torch.Tensor:
    """This rank's shard of a DTensor stored by a job of *n* ranks, for a job of *world*."""
    from torch.distributed.tensor import Replicate, Shard

    # An unmerged node in a job of another size: every rank stored this very shard.
    shards = node.get("shards") or [node["local"]] * n
    if len(shards) != n:
        raise MalformedObject(f"a DTensor node of a {n}-rank mesh holds {len(shards)} shards")
    if isinstance(placement, Replicate):
        return _read(dec, shards[0], dtype, list(shape))
    if not isinstance(placement, Shard):
        raise DecodeError(
            f"a DTensor with the placement {placement!r} was stored by {n} ranks and cannot "
            f"be resharded for {world}: run {n} ranks, or store dtensor.full_tensor()"
        )
    d = placement.dim
    start, stop = chunk_range(shape[d], world, rank)
    parts = []
    for i, shard in enumerate(shards):
        lo, hi = chunk_range(shape[d], n, i)
        if max(lo, start) < min(hi, stop):
            # Read (and checked against the layout) first: what is allocated below is
            # then bounded by what the store holds, whatever shape a node claims.
            parts.append((_read(dec, shard, dtype, _local_shape(shape, placement, n, i)), lo, hi))
    if len(parts) == 1 and (parts[0][1], parts[0][2]) == (start, stop):
        return parts[0][0]  # exactly one stored shard: as it is, no copy
    local_shape = _local_shape(shape, placement, world, rank)
    dec.charge(math.prod(local_shape) * dtype.itemsize, f"a DTensor shard of shape {local_shape}")
    out = torch.empty(local_shape, dtype=dtype)
    for part, lo, hi in parts:
        first, last = max(lo, start), min(hi, stop)
        out.narrow(d, first - start, last - first).copy_(part.narrow(d, first - lo, last - first))
    return out
