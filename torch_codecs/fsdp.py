"""FSDP2 modules (``torch.distributed.fsdp.fully_shard``) inside a module tree.

``fully_shard`` turns a module's class into a subclass made at run time
(``FSDPLinear``), keeps its state (communication state, parameter groups,
hooks bound to it) beside the module, and registers each parameter as a
sharded DTensor. None of that can be stored as it is. A module tree
(``modules.py``) holding FSDP modules is stored instead as the tree it was
before ``fully_shard``, with:

* each FSDP module's node naming its original class, and ``fsdp``: how it
  was sharded (``{"mesh", "reshard_after_forward", "mp", "offload"}``:
  the device mesh as a DTensor's, ``null`` for the automatic choice,
  ``{param_dtype, reduce_dtype, output_dtype, cast_forward_inputs}`` of its
  ``MixedPrecisionPolicy``, and ``null`` or ``{"pin_memory"}`` for its
  ``CPUOffloadPolicy``);
* each module that holds parameters FSDP manages listing them in
  ``sharded`` (by name); their nodes are their sharded DTensors (``dtensor.py``:
  this rank's shard, read from FSDP's own sharded parameter, whether the
  module is sharded or unsharded at the time);
* FSDP's hooks and state entries left out (``fully_shard`` makes them again).

Restoring builds the tree with placeholders on the meta device of each
managed parameter's global shape (no memory), calls ``fully_shard`` again on
every FSDP module, children first, with the stored settings on the device
mesh of every rank of the job (the same mesh object the DTensors get), and
then puts the restored DTensors in as the sharded parameters (FSDP pads an
uneven shard, as it does for ``load_state_dict(assign=True)``). No collective
is made, so a rank restores on its own. The sharded parameters are the
restored DTensors themselves: an optimizer restored with the model binds to
them (``optim.py``), and training goes on as it would have.

Supported: 1-D meshes over every rank (FSDP's default), ``Shard(0)``
parameters (the default placement). Refused when storing (an EncodeError:
the result is returned unstored, with a warning): HSDP and other meshes of
more dimensions, ``fully_shard`` of a list of modules, ``shard_placement_fn``
placements other than ``Shard(0)``.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from memostore.errors import DecodeError, EncodeError, MalformedObject

from .dtensor import mesh_node, world_mesh
from .dtypes import dtype_from_name, dtype_name

_STATE_KEY = "__composable_api_state_key_"
_MANAGED_FLAGS = frozenset({"_is_fsdp_managed_module", "_fsdp_use_orig_params"})
_FSDP_CODE = "torch.distributed.fsdp._fully_shard."


def fsdp_module_class() -> type | None:
    """``FSDPModule`` once torch's FSDP is imported (no module can be one before)."""
    found = sys.modules.get("torch.distributed.fsdp")
    return getattr(found, "FSDPModule", None) if found is not None else None


def original_class(m: torch.nn.Module) -> type:
    """The class *m* had before ``fully_shard`` made it an FSDP one."""
    cls = type(m)
    return cls.__mro__[getattr(cls, "_orig_cls_mro_index", 2)]


def is_fsdp_hook(hook: Any) -> bool:
    """Whether a hook is one ``fully_shard`` registered (it registers them again)."""
    fn = getattr(hook, "__func__", hook)
    return str(getattr(fn, "__module__", "") or "").startswith(_FSDP_CODE)


def is_fsdp_entry(name: str, value: Any) -> bool:
    """Whether a module ``__dict__`` entry is FSDP's own state (made again on restore)."""
    return name.startswith(_STATE_KEY) or (name in _MANAGED_FLAGS and value is True)


def describe(m: torch.nn.Module, managed: dict[tuple[int, str], Any]) -> dict[str, Any]:
    """The ``fsdp`` field of an FSDP module's node; adds its sharded parameters to *managed*.

    *managed* maps (id of the module holding it, name) to FSDP's sharded
    parameter, for the tree's modules below this one to store.
    """
    state = m._get_fsdp_state()
    name = original_class(m).__qualname__
    if len(getattr(state, "_modules", (m,))) != 1:
        raise EncodeError(
            "an FSDP module made by fully_shard([...]) of several modules together is not "
            "stored; store its state_dict() instead"
        )
    groups = list(getattr(state, "_fsdp_param_groups", ()) or ())
    mesh = None
    reshard: Any = None
    mp = state._mp_policy
    offload = None
    for group in groups:
        info = group.mesh_info
        if type(info).__name__ != "FSDPMeshInfo" or info.mesh.ndim != 1:
            raise EncodeError(
                f"an FSDP module ({name}) sharded over a {info.mesh.ndim}-D mesh (HSDP) is "
                "not stored; store its state_dict() with torch.distributed.checkpoint"
            )
        mesh = info.mesh
        mp = group.mp_policy
        if not state._auto_reshard_after_forward:
            post = group.post_forward_mesh_info
            reshard = False if post is None else (True if post is info else post.shard_mesh_size)
        if type(group.offload_policy).__name__ == "CPUOffloadPolicy":
            offload = {"pin_memory": bool(group.offload_policy.pin_memory)}
        for fp in group.fsdp_params:
            placement = fp.fsdp_placement
            if getattr(placement, "dim", None) != 0 or type(placement).__name__ != "Shard":
                raise EncodeError(
                    f"an FSDP parameter sharded as {placement} (shard_placement_fn) is not "
                    "stored; only FSDP's default Shard(0) is"
                )
            info_ = fp._module_info
            managed[(id(info_.module), info_.param_name)] = fp.sharded_param
            for shared, shared_name in zip(
                info_.shared_modules, info_.shared_param_names, strict=True
            ):
                managed[(id(shared), shared_name)] = fp.sharded_param
    if mesh is not None and mesh_node(mesh)["ranks"] != list(range(_world())):
        raise EncodeError(
            f"an FSDP module ({name}) sharded over some ranks of its job only is not stored; "
            "only FSDP over every rank (its default mesh) is"
        )
    return {
        "device_type": state._device.type,
        "mesh": None if mesh is None else mesh_node(mesh),
        "reshard_after_forward": reshard,
        "mp": {
            "param_dtype": _dtype(mp.param_dtype),
            "reduce_dtype": _dtype(mp.reduce_dtype),
            "output_dtype": _dtype(mp.output_dtype),
            "cast_forward_inputs": bool(mp.cast_forward_inputs),
        },
        "offload": offload,
    }


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size()


def _dtype(d: torch.dtype | None) -> str | None:
    return None if d is None else dtype_name(d)


def placeholder(param: Any) -> torch.nn.Parameter:
    """A meta parameter of a restored DTensor parameter's global shape, for ``fully_shard``."""
    meta = torch.empty(param.shape, dtype=param.dtype, device="meta")
    return torch.nn.Parameter(meta, requires_grad=param.requires_grad)


def reapply(
    sharded: list[tuple[torch.nn.Module, dict[str, Any]]],
    slots: dict[tuple[int, str], Any],
    tree: list[torch.nn.Module],
) -> None:
    """Shard a restored tree again and put the restored DTensors in as its parameters.

    Args:
        sharded: (module, its ``fsdp`` field) of each FSDP module, in pre-order.
        slots: (id of module, name) -> the restored DTensor parameter, for
            every managed parameter (registered meanwhile as a meta placeholder).
        tree: every module of the tree (for the parameters FSDP must leave alone).
    """
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    managed = {id(p) for m in tree for n, p in m._parameters.items() if (id(m), n) in slots}
    ignored = {
        p
        for m in tree
        for p in m._parameters.values()
        if isinstance(p, torch.nn.Parameter) and id(p) not in managed
    }
    for module, spec in reversed(sharded):  # children first, as fully_shard wants
        stored_mesh = spec["mesh"]
        if stored_mesh is not None:
            mesh = world_mesh(stored_mesh["device_type"], stored_mesh["names"])
        else:
            mesh = world_mesh(spec["device_type"], None)
        mp = spec["mp"]
        offload = spec["offload"]
        reshard = spec["reshard_after_forward"]
        if not (reshard is None or type(reshard) in (bool, int)):
            raise MalformedObject("an FSDP node's reshard_after_forward is not a bool or int")
        fully_shard(
            module,
            mesh=mesh,
            reshard_after_forward=reshard,
            mp_policy=MixedPrecisionPolicy(
                param_dtype=_dtype_of(mp["param_dtype"]),
                reduce_dtype=_dtype_of(mp["reduce_dtype"]),
                output_dtype=_dtype_of(mp["output_dtype"]),
                cast_forward_inputs=bool(mp["cast_forward_inputs"]),
            ),
            offload_policy=(
                OffloadPolicy()
                if offload is None
                else CPUOffloadPolicy(pin_memory=bool(offload["pin_memory"]))
            ),
            ignored_params=ignored or None,
        )
    filled: set[tuple[int, str]] = set()
    with torch.no_grad():
        for module, _ in sharded:
            for group in module._get_fsdp_state()._fsdp_param_groups:
                for fp in group.fsdp_params:
                    info = fp._module_info
                    owners = [
                        (info.module, info.param_name),
                        *zip(info.shared_modules, info.shared_param_names, strict=True),
                    ]
                    param = slots.get((id(info.module), info.param_name))
                    if param is None:
                        raise DecodeError(
                            f"fully_shard manages the parameter {info.param_name} of a "
                            f"{type(info.module).__qualname__} that was not sharded when stored"
                        )
                    for owner, name in owners:
                        owner._parameters[name] = param  # no class code runs (trust/gate.py)
                        filled.add((id(owner), name))
                    fp.reset_sharded_param()  # FSDP pads an uneven shard, as after a load
    missing = set(slots) - filled
    if missing:
        raise DecodeError(
            f"{len(missing)} parameters stored as FSDP-sharded are not sharded by fully_shard "
            "once restored (the model's FSDP layout changed?)"
        )


def _dtype_of(name: Any) -> torch.dtype | None:
    if name is None:
        return None
    if not isinstance(name, str):
        raise MalformedObject("an FSDP node names a dtype that is not a string")
    return dtype_from_name(name)
