"""Summaries of stored values for ``memostore show`` and ``log``, without reading bulk data.

A summary walks a value's nodes (``docs/format.md``) and the small value
documents they reference; it never reads a blob, only its size. A node of a
codec's tag is described by, in order:

1. the codec's :meth:`Codec.summarize` (given a :class:`SummaryReader`), when the
   codec is registered -- or, with ``load_codecs=False``, only when it is
   registered already, since loading a codec package may import a heavy
   library (torch takes a second) that a summary does not need;
2. a light summarizer from the ``memostore.values.summaries`` entry-point group: a
   function ``summarize(node, reader) -> dict | None`` that imports nothing
   heavy (the first one that returns a dict wins);
3. a generic summary from the node's small fields (dtype, shape, class names)
   and the tensors nested in it (count and bytes).

A summary is JSON: plain scalars stand for themselves; anything else is a dict
with a ``"type"``. :func:`describe` turns one into a line of text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import MemostoreError
from ..odb.objects import KIND_VALUE
from .codecs import Codec, CodecRegistry, registry

MAX_ITEMS = 20
MAX_DEPTH = 6
MAX_TEXT = 200
SUMMARY_ENTRY_POINT_GROUP = "memostore.summaries"
_SIZE_FIELDS = ("bytes", "nbytes")
_NESTED_SCAN_MAX = 10_000

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
    "nbytes",
)

Summarizer = Callable[[dict[str, Any], Any], Any]
_light: list[Summarizer] | None = None
_light_lock = threading.Lock()


def light_summarizers() -> list[Summarizer]:
    """The ``memostore.values.summaries`` entry points, loaded once (broken ones skipped)."""
    global _light
    with _light_lock:
        if _light is None:
            from importlib import metadata  # slow to import; most summaries never need it

            found: list[Summarizer] = []
            for ep in metadata.entry_points(group=SUMMARY_ENTRY_POINT_GROUP):
                try:
                    found.append(ep.load())
                except Exception:  # a broken plug-in only loses its nicer summaries
                    continue
            _light = found
        return _light


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
        load_codecs: bool = True,
        summarizers: list[Summarizer] | None = None,
    ) -> None:
        """*summarizers*: the light summarizers to try (default: the installed
        ``memostore.values.summaries`` entry points; ``[]`` for generic summaries only)."""
        self.objects = objects
        self._summarizers = summarizers
        self.codecs = codecs
        self.load_codecs = load_codecs
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

    def _registered_codec(self, tag: Any) -> Codec | None:
        if not isinstance(tag, str):
            return None
        if self.load_codecs:
            return self.codecs.for_tag(tag)
        # Only a codec registered already: loading a package may import torch.
        return self.codecs.for_tag(tag, load=False)

    def _codec(self, tag: Any, node: dict[str, Any]) -> Any:
        codec = self._registered_codec(tag)
        summary: Any = None
        try:
            if codec is not None and type(codec).summarize is not Codec.summarize:
                summary = codec.summarize(node, self)
            else:
                for summarizer in (
                    light_summarizers() if self._summarizers is None else self._summarizers
                ):
                    summary = summarizer(node, self)
                    if summary is not None:
                        break
        except Exception as exc:  # a summary bug must not hide the rest of the value
            summary = self.generic(node)
            summary["summary_error"] = f"{type(exc).__name__}: {exc}"
            return summary
        if not isinstance(summary, dict):
            return self.generic(node)
        if isinstance(node.get("blob"), str) and not any(k in summary for k in _SIZE_FIELDS):
            size = self.blob_size(node["blob"])
            if size is not None:
                summary = {**summary, "bytes": size}
        return summary

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
                out["class" if name == "cls" else name] = _code_name(value)
        if isinstance(node.get("blob"), str):
            size = self.blob_size(node["blob"])
            if size is not None:
                out["bytes"] = size
        elif not _tensor_like(node):
            count, nbytes = _nested_tensors(node)
            if count:
                out["tensors"] = count
                out.setdefault("nbytes", nbytes)
        return out


def _tensor_like(node: Any) -> bool:
    return isinstance(node, dict) and "dtype" in node and "shape" in node


def _nested_tensors(node: dict[str, Any]) -> tuple[int, int]:
    """(count, bytes) of the tensor-like nodes inside *node* (inline ones only)."""
    count = nbytes = 0
    stack: list[Any] = [v for k, v in node.items() if k != "$"]
    seen = 0
    while stack and seen < _NESTED_SCAN_MAX:
        item = stack.pop()
        seen += 1
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if _tensor_like(item):
                count += 1
                if isinstance(item.get("nbytes"), int):
                    nbytes += item["nbytes"]
            else:
                stack.extend(item.values())
    return count, nbytes


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
    size = reader.blob_size(node["blob"]) if "blob" in node else len(node.get("hex", "")) // 2
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


def _per_rank(reader: SummaryReader, node: dict[str, Any]) -> dict[str, Any]:
    """A result stored rank by rank (``rank_results.py``): their number, and rank 0's."""
    results = node.get("results") or []
    out: dict[str, Any] = {"type": "per_rank", "ranks": node.get("world")}
    if results and isinstance(results[0], dict):
        out["rank0"] = reader.summarize(results[0])
    return out


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
    "per_rank": _per_rank,
}


def summarize_value(objects: Any, doc_id: str | None, load_codecs: bool = True) -> Any:
    """The summary of the value stored as document *doc_id* (None for no value)."""
    if doc_id is None:
        return None
    return SummaryReader(objects, load_codecs=load_codecs).summarize_doc(doc_id)


def summarize_arguments(
    objects: Any, args_id: str | None, load_codecs: bool = True
) -> dict[str, Any]:
    """Summaries of a call's arguments, by name, from its arguments document."""
    if args_id is None:
        return {}
    reader = SummaryReader(objects, load_codecs=load_codecs)
    try:
        node = reader.node_of(args_id)
    except MemostoreError as exc:
        return {"<unreadable>": str(exc)}
    if not isinstance(node, dict) or node.get("$") != "args":
        return {"<value>": reader.summarize(node)}
    return {name: reader.summarize(value) for name, value in node.get("items", [])}


# -- text --------------------------------------------------------------------------------


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
    if kind == "per_rank":
        text = f"per-rank result ({summary.get('ranks')} ranks)"
        return f"{text}, rank 0: {_describe(summary['rank0'])}" if "rank0" in summary else text
    return _describe_generic(kind, summary)


def _describe_generic(kind: str, summary: dict[str, Any]) -> str:
    name = str(summary.get("class") or kind)
    parts: list[str] = []
    dtype = summary.get("dtype")
    if dtype is None and isinstance(summary.get("descr"), str):
        dtype = numpy_dtype_name(summary["descr"])
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
        if key in skip or isinstance(value, (dict, list)) or value is False:
            continue
        parts.append(f"{key}={value}")
    if "state" in summary and not parts:
        return f"{name}({_describe(summary['state'])})"
    return f"{name}({', '.join(parts)})" if parts else name


_DESCR_KINDS = {"f": "float", "i": "int", "u": "uint", "c": "complex"}


def numpy_dtype_name(descr: str) -> str:
    """``<f4`` -> ``float32`` (numpy's own name) without importing numpy."""
    kind, size = descr[1:2], descr[2:]
    if descr[1:] == "b1":
        return "bool"
    if kind in _DESCR_KINDS and size.isdigit():
        return f"{_DESCR_KINDS[kind]}{int(size) * 8}"
    return descr


def format_bytes(size: float) -> str:
    """A human size: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
