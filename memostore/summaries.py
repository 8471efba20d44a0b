"""Summaries of stored values for ``memostore show`` and ``log``, without reading bulk data.

A summary walks a value's nodes (``docs/format.md``) and the small value
documents they reference; it never reads a blob, only its size. Codecs describe
their own nodes through :meth:`Codec.summarize`, which receives a
:class:`SummaryReader`; nodes of a codec that gives no summary (or of a codec
package that is not installed) get a generic one built from the node's small
fields (dtype, shape, class names).

A summary is JSON: plain scalars stand for themselves; anything else is a dict
with a ``"type"``. :func:`describe` turns one into a line of text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .codecs import Codec, CodecRegistry, registry
from .errors import MemostoreError
from .objects import KIND_VALUE

MAX_ITEMS = 20
MAX_DEPTH = 6
MAX_TEXT = 200

# Node fields that a generic summary of an unknown codec's node keeps.
_GENERIC_FIELDS = (
    "dtype",
    "descr",
    "shape",
    "size",
    "len",
    "class",
    "cls",
    "device",
    "requires_grad",
)


class SummaryReader:
    """Read access for summaries: small value documents and blob sizes, never blob bytes.

    Codec ``summarize(node, reader)`` hooks may call :meth:`summarize` on child
    nodes, :meth:`node_of` on a referenced document and :meth:`blob_size`.
    """

    def __init__(
        self,
        objects: Any,
        codecs: CodecRegistry = registry,
        max_items: int = MAX_ITEMS,
        max_depth: int = MAX_DEPTH,
    ) -> None:
        self.objects = objects
        self.codecs = codecs
        self.max_items = max_items
        self.max_depth = max_depth
        self._depth = 0

    def node_of(self, doc_id: str) -> Any:
        """The node of value document *doc_id*."""
        doc = self.objects.get_doc(doc_id)
        if doc.kind != KIND_VALUE:
            return {"$": "unknown", "kind": doc.kind}
        return doc.body.get("node")

    def blob_size(self, blob_id: str) -> int | None:
        """A blob's size in bytes (its bytes are not read), or None when absent."""
        try:
            return self.objects.size_of(blob_id)
        except (MemostoreError, OSError):
            return None

    def summarize_doc(self, doc_id: str) -> Any:
        """The summary of the value stored as document *doc_id*."""
        try:
            node = self.node_of(doc_id)
        except MemostoreError as exc:
            return {"type": "unreadable", "id": doc_id, "error": str(exc)}
        return self.summarize(node)

    def summarize(self, node: Any) -> Any:
        """The summary of one node (recursing into containers up to a depth limit)."""
        if node is None or isinstance(node, (bool, int, float)):
            return node
        if isinstance(node, str):
            return node if len(node) <= MAX_TEXT else node[: MAX_TEXT - 1] + "…"
        if self._depth >= self.max_depth:
            return {"type": "…"}
        self._depth += 1
        try:
            if isinstance(node, list):
                return self._sequence("list", _strip_label(node))
            if not isinstance(node, dict):
                return {"type": type(node).__name__}
            tag = node.get("$")
            handler = _HANDLERS.get(tag)
            if handler is not None:
                return handler(self, node)
            return self._codec(tag, node)
        finally:
            self._depth -= 1

    # -- helpers --------------------------------------------------------------------------
    def _sequence(self, kind: str, items: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"type": kind, "len": len(items)}
        out["items"] = [self.summarize(x) for x in items[: self.max_items]]
        return out

    def _codec(self, tag: Any, node: dict[str, Any]) -> Any:
        codec = self.codecs.for_tag(tag) if isinstance(tag, str) else None
        if codec is not None and type(codec).summarize is not Codec.summarize:
            try:
                return codec.summarize(node, self)
            except Exception as exc:  # a codec's summary bug must not hide the rest
                summary = self.generic(node)
                summary["summary_error"] = f"{type(exc).__name__}: {exc}"
                return summary
        return self.generic(node)

    def generic(self, node: dict[str, Any]) -> dict[str, Any]:
        """A summary of a node from its small fields (any codec)."""
        out: dict[str, Any] = {"type": str(node.get("$"))}
        for name in _GENERIC_FIELDS:
            value = node.get(name)
            if isinstance(value, (str, int, float, bool)) or (
                isinstance(value, list) and all(isinstance(v, int) for v in value)
            ):
                out[name] = value
            elif isinstance(value, dict) and value.get("$") == "code":
                out[name] = _code_name(value)
        if isinstance(node.get("blob"), str):
            size = self.blob_size(node["blob"])
            if size is not None:
                out["bytes"] = size
        return out


def _strip_label(items: list[Any]) -> list[Any]:
    if items and isinstance(items[0], dict) and items[0].get("$") == "label":
        return items[1:]
    return items


def _code_name(node: dict[str, Any]) -> str:
    return f"{node.get('module')}.{node.get('qualname')}"


def _dict(reader: SummaryReader, node: dict[str, Any]) -> dict[str, Any]:
    items = node.get("items", [])
    out: dict[str, Any] = {"type": "dict" if node["$"] == "dict" else "OrderedDict"}
    out["len"] = len(items)
    shown: dict[str, Any] = {}
    for key, value in items[: reader.max_items]:
        shown[_key_text(reader, key)] = reader.summarize(value)
    out["items"] = shown
    return out


def _key_text(reader: SummaryReader, key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return repr(key)
    return describe(reader.summarize(key))


def _bytes(reader: SummaryReader, node: dict[str, Any]) -> dict[str, Any]:
    if "blob" in node:
        size = reader.blob_size(node["blob"])
    else:
        size = len(node.get("hex", "")) // 2
    return {"type": node["$"], "len": size}


def _object(reader: SummaryReader, node: dict[str, Any]) -> dict[str, Any]:
    cls = node.get("cls") if node["$"] == "object" else node.get("fn")
    name = _code_name(cls) if isinstance(cls, dict) and cls.get("$") == "code" else "object"
    out: dict[str, Any] = {"type": name}
    if "state" in node:
        out["state"] = reader.summarize(node["state"])
    if node["$"] == "reduce" and node.get("args"):
        out["args"] = [reader.summarize(a) for a in node["args"][: reader.max_items]]
    return out


def _args(reader: SummaryReader, node: dict[str, Any]) -> dict[str, Any]:
    return {name: reader.summarize(value) for name, value in node.get("items", [])}


_HANDLERS: dict[Any, Callable[[SummaryReader, dict[str, Any]], Any]] = {
    "float": lambda r, n: {"type": "float", "value": n.get("v")},
    "tuple": lambda r, n: r._sequence("tuple", n.get("items", [])),
    "set": lambda r, n: r._sequence("set", n.get("items", [])),
    "frozenset": lambda r, n: r._sequence("frozenset", n.get("items", [])),
    "complex": lambda r, n: {"type": "complex", "value": f"({n.get('re')}+{n.get('im')}j)"},
    "bytes": _bytes,
    "bytearray": _bytes,
    "str": lambda r, n: {"type": "str", "len": r.blob_size(n.get("blob", ""))},
    "dict": _dict,
    "odict": _dict,
    "same": lambda r, n: {"type": "same", "label": n.get("k")},
    "ref": lambda r, n: r.summarize_doc(n["id"]),
    "code": lambda r, n: {"type": "code", "symbol": f"{n.get('module')}:{n.get('qualname')}"},
    "module": lambda r, n: {"type": "module", "name": n.get("name")},
    "object": _object,
    "reduce": _object,
    "args": _args,
}


def summarize_value(objects: Any, doc_id: str | None) -> Any:
    """The summary of the value stored as document *doc_id* (None for no value)."""
    if doc_id is None:
        return None
    return SummaryReader(objects).summarize_doc(doc_id)


def summarize_arguments(objects: Any, args_id: str | None) -> dict[str, Any]:
    """Summaries of a call's arguments, by name, from its arguments document."""
    if args_id is None:
        return {}
    reader = SummaryReader(objects)
    try:
        node = reader.node_of(args_id)
    except MemostoreError as exc:
        return {"<unreadable>": str(exc)}
    if not isinstance(node, dict) or node.get("$") != "args":
        return {"<value>": reader.summarize(node)}
    return {name: reader.summarize(value) for name, value in node.get("items", [])}


# -- text --------------------------------------------------------------------------------
_SIZE_FIELDS = ("bytes", "nbytes")


def describe(summary: Any, width: int = 100) -> str:
    """One line of text for a summary."""
    text = _describe(summary)
    return text if len(text) <= width else text[: width - 1] + "…"


def _describe(summary: Any) -> str:
    if not isinstance(summary, dict):
        return repr(summary)
    kind = str(summary.get("type", "?"))
    if kind in ("float", "complex"):
        return str(summary.get("value"))
    if kind in ("list", "tuple", "set", "frozenset"):
        items = summary.get("items", [])
        inner = ", ".join(_describe(x) for x in items)
        if summary.get("len", 0) > len(items):
            inner += ", …"
        open_, close = {"list": "[]", "tuple": "()"}.get(kind, "{}")
        if kind == "tuple" and len(items) == 1 and summary.get("len") == 1:
            inner += ","
        text = f"{open_}{inner}{close}"
        return text if kind in ("list", "tuple", "set") else f"frozenset({text})"
    if kind in ("dict", "OrderedDict"):
        items = summary.get("items", {})
        inner = ", ".join(f"{k!r}: {_describe(v)}" for k, v in items.items())
        if summary.get("len", 0) > len(items):
            inner += ", …"
        return "{" + inner + "}" if kind == "dict" else f"OrderedDict({{{inner}}})"
    if kind in ("bytes", "bytearray", "str") and "len" in summary:
        return f"{kind}(len={summary['len']})"
    if kind == "code":
        return str(summary.get("symbol"))
    if kind == "module":
        return f"module {summary.get('name')}"
    if kind == "same":
        return "<shared reference>"
    return _describe_generic(kind, summary)


def _describe_generic(kind: str, summary: dict[str, Any]) -> str:
    name = str(summary.get("class") or kind)
    parts: list[str] = []
    dtype = summary.get("dtype") or summary.get("descr")
    if dtype is not None:
        parts.append(str(dtype).replace("torch.", ""))
    if "shape" in summary:
        parts.append(str(list(summary["shape"])))
    for field in _SIZE_FIELDS:
        if isinstance(summary.get(field), int):
            parts.append(format_bytes(summary[field]))
            break
    skip = {"type", "class", "dtype", "descr", "shape", "state", "items", *_SIZE_FIELDS}
    for key, value in summary.items():
        if key in skip or isinstance(value, (dict, list)):
            continue
        parts.append(f"{key}={value}")
    if "state" in summary and not parts:
        return f"{name}({_describe(summary['state'])})"
    return f"{name}({', '.join(parts)})" if parts else name


def format_bytes(size: float) -> str:
    """A human size: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
