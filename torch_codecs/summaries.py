"""Readable summaries of stored nodes for ``memostore show`` (no blob is read)."""

from __future__ import annotations

from typing import Any

_PLAIN_DEPTH = 8


def plain(node: Any, depth: int = 0) -> Any:
    """A JSON-friendly rendering of a node: atoms as they are, containers unwrapped.

    Tensors become their summary; code references their dotted name; anything
    else its tag. Never reads an object from the store.
    """
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if depth > _PLAIN_DEPTH:
        return "..."
    if isinstance(node, list):
        items = (
            node[1:] if node and isinstance(node[0], dict) and node[0].get("$") == "label" else node
        )
        return [plain(x, depth + 1) for x in items]
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
        return f"{node.get('module')}.{node.get('qualname')}"
    if tag == "torch.tensor":
        from .tensors import tensor_summary

        return tensor_summary(node)
    return f"<{tag}>"


def child_summary(reader: Any, node: Any) -> Any:
    """Summarise a child node through memostore's reader when there is one."""
    summarize = getattr(reader, "summarize", None)
    if callable(summarize):
        return summarize(node)
    return plain(node)
