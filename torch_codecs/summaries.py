"""Summaries of torch nodes for ``memostore show``: no blob read, and no torch import.

:func:`summarize` is what every torch codec's ``summarize`` returns, and is
also meant to be registered as a light summarizer (entry-point group
``memostore.values.summaries``), so that ``memostore show`` describes torch values
without importing torch. Only small node fields are read: tensor names,
shapes, dtypes and byte counts, classes, hyper-parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PLAIN_DEPTH = 8
_PLACEMENTS = {"replicate": "R", "partial": "P"}


def summarize(node: Any, reader: Any = None) -> dict[str, Any] | None:
    """The summary of a torch node, or None for a node of another package."""
    if not isinstance(node, dict):
        return None
    handler = _HANDLERS.get(node.get("$"))
    return None if handler is None else handler(node, reader)


def tensor_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """A tensor: shape, dtype, bytes, device (and ``requires_grad`` when set)."""
    out = {
        "type": "parameter" if node.get("kind") == "param" else "tensor",
        "shape": node.get("shape"),
        "dtype": node.get("dtype"),
        "bytes": node.get("nbytes", 0),
        "device": node.get("device"),
    }
    if node.get("layout"):
        out["layout"] = node["layout"]
    if node.get("requires_grad"):
        out["requires_grad"] = True
    return out


def dtensor_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """A DTensor: its global shape and dtype, its mesh and placements, this rank's bytes."""
    mesh = node.get("mesh") or {}
    placements = [
        f"S({p[1]})" if p[:1] == ["shard"] else _PLACEMENTS.get(p[0], "?")
        for p in node.get("placements") or []
        if isinstance(p, list) and p
    ]
    local = node.get("local") or {}
    out = {
        "type": "dtensor parameter" if node.get("kind") == "param" else "dtensor",
        "shape": node.get("shape"),
        "dtype": node.get("dtype"),
        "mesh": "x".join(str(n) for n in mesh.get("shape") or ()),
        "placements": ",".join(placements),
        "local_shape": local.get("shape"),
    }
    if node.get("requires_grad"):
        out["requires_grad"] = True
    return out


def module_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """A module: its class, every parameter and buffer by name, counts and bytes."""
    tensors: dict[str, Any] = {}
    _module_tensors(node, "", tensors)
    return {
        "type": "torch.module",
        "class": code_name(node.get("cls")),
        "tensors": tensors,
        "parameters": sum(
            _numel(t.get("shape")) for t in tensors.values() if t.get("type") == "parameter"
        ),
        "bytes": sum(t.get("bytes", 0) for t in tensors.values()),
    }


def optimizer_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """An optimizer: its class, hyper-parameters per group, parameter and state counts."""
    groups = plain(node.get("groups"))
    hyper = [
        {k: v for k, v in group.items() if k != "params"}
        for group in (groups if isinstance(groups, list) else [])
        if isinstance(group, dict)
    ]
    state_tensors = 0
    for entry in node.get("state") or []:
        if isinstance(entry, dict):
            state_tensors += sum(
                1
                for _, value in entry.get("items", ())
                if isinstance(value, dict) and value.get("$") == "torch.tensor"
            )
    return {
        "type": "torch.optimizer",
        "class": code_name(node.get("cls")),
        "params": len(node.get("params") or ()),
        "param_groups": hyper,
        "state_tensors": state_tensors,
    }


def scheduler_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """An LR scheduler: its class, epoch and learning rates."""
    out: dict[str, Any] = {"type": "torch.lr_scheduler", "class": code_name(node.get("cls"))}
    state = plain(node.get("state"))
    if isinstance(state, dict):
        for key in ("last_epoch", "_last_lr", "base_lrs"):
            if key in state:
                out[key.lstrip("_")] = state[key]
    return out


def dataset_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """A dataset: its class and (summarised) state."""
    out: dict[str, Any] = {
        "type": "torch.dataset",
        "class": code_name(node.get("cls") or node.get("fn")),
    }
    if "state" in node:
        out["state"] = child_summary(reader, node["state"])
    return out


def loader_summary(node: dict[str, Any], reader: Any = None) -> dict[str, Any]:
    """A DataLoader: batch size, drop_last, sampler kind, collate function, dataset."""
    sampler = node.get("sampler") or {}
    return {
        "type": "torch.dataloader",
        "batch_size": node.get("batch_size"),
        "drop_last": node.get("drop_last"),
        "sampler": sampler.get("kind"),
        "collate_fn": plain(node.get("collate_fn")),
        "dataset": child_summary(reader, node.get("dataset")),
    }


def child_summary(reader: Any, node: Any) -> Any:
    """Summarise a child node through memostore's reader when there is one."""
    summarize_child = getattr(reader, "summarize", None)
    if callable(summarize_child):
        return summarize_child(node)
    return plain(node)


def code_name(code: Any) -> str | None:
    """``module.QualName`` of a code node."""
    if isinstance(code, dict) and "qualname" in code:
        return f"{code.get('module')}.{code['qualname']}"
    return None


def plain(node: Any, depth: int = 0) -> Any:
    """A JSON-friendly rendering of a node: atoms as they are, containers unwrapped.

    Tensors become their summary, code references their dotted name, anything
    else its tag.
    """
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if depth > _PLAIN_DEPTH:
        return "..."
    if isinstance(node, list):
        labelled = node and isinstance(node[0], dict) and node[0].get("$") == "label"
        return [plain(x, depth + 1) for x in (node[1:] if labelled else node)]
    if not isinstance(node, dict):
        return repr(node)
    tag = node.get("$")
    if tag == "float":
        return node.get("v")
    if tag in ("tuple", "frozenset", "set"):
        return [plain(x, depth + 1) for x in node.get("items", ())]
    if tag in ("dict", "odict"):
        out = {}
        for key, value in node.get("items", ()):
            k = plain(key, depth + 1)
            out[k if isinstance(k, str) else repr(k)] = plain(value, depth + 1)
        return out
    if tag == "code":
        return code_name(node)
    if tag == "torch.tensor":
        return tensor_summary(node)
    if tag in ("torch.dtype", "torch.memory_format"):
        return f"torch.{node.get('name')}"
    return f"<{tag}>"


def _module_tensors(node: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    if "again" in node:
        return
    for section in ("params", "buffers"):
        for name, tnode in node.get(section, ()):
            if isinstance(tnode, dict) and tnode.get("$") == "torch.tensor":
                out[prefix + name] = tensor_summary(tnode)
            elif isinstance(tnode, dict) and tnode.get("$") == "torch.dtensor":
                out[prefix + name] = dtensor_summary(tnode)
            elif isinstance(tnode, dict) and tnode.get("$") == "same":
                out[prefix + name] = {"type": "tied"}
    for name, child in node.get("modules", ()):
        if isinstance(child, dict):
            _module_tensors(child, f"{prefix}{name}.", out)


def _numel(shape: Any) -> int:
    n = 1
    for s in shape or ():
        n *= s
    return n


_HANDLERS: dict[Any, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
    "torch.tensor": tensor_summary,
    "torch.dtensor": dtensor_summary,
    "torch.module": module_summary,
    "torch.optim": optimizer_summary,
    "torch.lr_scheduler": scheduler_summary,
    "torch.dataset": dataset_summary,
    "torch.dataloader": loader_summary,
    "torch.int_list": lambda n, r: {
        "type": "int_list",
        "len": ((n.get("values") or {}).get("shape") or [0])[0],
    },
    "torch.generator": lambda n, r: {
        "type": "torch.generator",
        "device": n.get("device"),
        "seed": n.get("seed"),
    },
    "torch.dtype": lambda n, r: {"type": "torch.dtype", "name": n.get("name")},
    "torch.memory_format": lambda n, r: {"type": "torch.memory_format", "name": n.get("name")},
}
