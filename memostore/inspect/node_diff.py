"""Where two stored values differ, found by walking their nodes (``docs/format.md``).

``memostore diff`` and the one-line reason of a miss compare arguments,
argument effects and results from the stored documents only: value nodes and
the small documents they reference, plus tensor blobs read as numbers
(:mod:`memostore.inspect.result_diff`). Nothing is decoded, so no code from the store
runs to render a diff.

A difference is reported at the deepest place it can be named: an object's
attribute (``Namespace.lr``, a dataclass field), a module's submodule,
parameter, buffer or attribute (``Net.fc1.training``), a list item by index,
a dict entry by key, a tensor by its path with its shape or dtype change or
its max abs difference. A path is written as Python would reach the value:
``.name`` for attributes, ``[i]`` for items, ``['key']`` for entries.

A comparison is bounded: each pair of nodes is compared once (values with
back references, such as an OmegaConf node's parent, would otherwise be walked
again from every child), and a differ compares at most :data:`MAX_STEPS`
pairs in all; past that it stops and says so (``ValueDiff.stopped``), so a
miss's reason and ``memostore diff`` take bounded time and memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import MemostoreError
from ..odb.objects import KIND_VALUE
from ..values.summaries import SummaryReader
from .result_diff import compare_array_nodes, data_key, is_array_node, node_dtype, node_shape

MAX_CHANGES = 50
# Strings longer than this are shown around their first difference.
LONG_TEXT = 120
MAX_DEPTH = 64
# Pairs of nodes one differ compares at most (all its comparisons together).
MAX_STEPS = 100_000
_OBJECT_TAGS = ("object", "reduce", "torch.dataset")
_MODULE_TAG = "torch.module"
# Tensor node fields that compare_array_nodes covers (data, dtype, shape).
_ARRAY_FIELDS = frozenset({"$", "&", "data", "dtype", "shape", "nbytes", "blob", "descr"})


@dataclass
class ValueDiff:
    """The differences between two values.

    Attributes:
        root_class: the class name of the value on the newer side when it is an
            object or module (``Net``, ``Namespace``), written before a path.
        changes: each difference: ``{"path", "change", "a", "b"}`` where
            ``change`` is ``changed``, ``added`` or ``removed`` and ``a``/``b``
            are summaries; a tensor's has ``tensor`` (shape, dtype, max abs
            difference) instead of summaries of its data.
        more: differences found beyond :data:`MAX_CHANGES` and not listed.
        stopped: the comparison ran out of its budget (:data:`MAX_STEPS`) before
            the end: there may be differences it did not find.
    """

    root_class: str | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    more: int = 0
    stopped: bool = False


class _OutOfSteps(Exception):
    """The differ has compared :data:`MAX_STEPS` pairs of nodes."""


class _Side:
    """One side of a comparison: the labels of the document a node is in."""

    __slots__ = ("labels",)

    def __init__(self, labels: dict[int, Any]) -> None:
        self.labels = labels


class NodeDiffer:
    """Compares nodes of one store (or of documents given before they are stored).

    Args:
        objects: the object database (``get_doc``, ``get_bytes``, ``size_of``).
        docs: documents by id that take precedence over the store (those a call
            has hashed but not written yet).
        numeric: read tensor blobs to give max abs differences (False: shape
            and dtype changes only, and no blob is read).
        summaries: describe the values on each side of a change (False: paths only).
        max_steps: pairs of nodes compared at most, over every comparison it makes.
    """

    def __init__(
        self,
        objects: Any,
        docs: Mapping[str, Any] | None = None,
        numeric: bool = True,
        summaries: bool = True,
        max_steps: int = MAX_STEPS,
    ) -> None:
        self.objects = objects
        self.steps_left = max_steps
        self._compared: set[tuple[Any, Any]] = set()
        self.docs = docs or {}
        self.numeric = numeric
        self.summaries = summaries
        self._reader = SummaryReader(objects, load_codecs=False)
        self._nodes: dict[str, tuple[Any, dict[int, Any]]] = {}
        # Pairs of nodes (by identity) a diff has walked: each is reported once.

    # -- documents ------------------------------------------------------------------------
    def doc_node(self, doc_id: str) -> tuple[Any, dict[int, Any]]:
        """The node of value document *doc_id* and its identity labels."""
        found = self._nodes.get(doc_id)
        if found is None:
            doc = self.docs.get(doc_id)
            if doc is None:
                doc = self.objects.get_doc(doc_id)
            node = doc.body.get("node") if doc.kind == KIND_VALUE else None
            found = (node, _labels(node))
            self._nodes[doc_id] = found
        return found

    # -- entry points ---------------------------------------------------------------------
    def diff_docs(self, id_a: str | None, id_b: str | None) -> ValueDiff:
        """How the values stored as documents *id_a* and *id_b* differ."""
        out = ValueDiff()
        if id_a == id_b:
            return out
        node_a, labels_a = self.doc_node(id_a) if id_a else (None, {})
        node_b, labels_b = self.doc_node(id_b) if id_b else (None, {})
        return self.diff(node_a, labels_a, node_b, labels_b)

    def diff(self, a: Any, labels_a: dict[int, Any], b: Any, labels_b: dict[int, Any]) -> ValueDiff:
        """How node *a* (in a document with *labels_a*) and node *b* differ."""
        side_a, side_b = _Side(labels_a), _Side(labels_b)
        a, side_a = self._resolve(a, side_a)
        b, side_b = self._resolve(b, side_b)
        out = ValueDiff(root_class=class_name(b) or class_name(a))
        self._compared = set()
        try:
            for change in self._walk(a, side_a, b, side_b, "", 0):
                if len(out.changes) < MAX_CHANGES:
                    out.changes.append(change)
                else:
                    out.more += 1
        except _OutOfSteps:
            out.stopped = True
        return out

    def summarize(self, node: Any) -> Any:
        """The summary of a node (as ``show`` gives it)."""
        if not self.summaries:
            return None
        return self._reader.summarize(node)

    # -- walking --------------------------------------------------------------------------
    def _resolve(self, node: Any, side: _Side) -> tuple[Any, _Side]:
        """Follow labels (``same``) and references (``ref``) to the node they stand for."""
        for _ in range(MAX_DEPTH):
            if not isinstance(node, dict):
                return node, side
            tag = node.get("$")
            if tag == "same":
                found = side.labels.get(node.get("k"))
                if found is None or found is node:
                    return node, side
                node = found
            elif tag == "ref" and isinstance(node.get("id"), str):
                try:
                    node, labels = self.doc_node(node["id"])
                except MemostoreError:
                    return node, side
                side = _Side(labels)
            else:
                return node, side
        return node, side

    def _walk(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        if _is_ref(a) and _is_ref(b) and a["id"] == b["id"]:
            return
        if self.steps_left <= 0:
            raise _OutOfSteps
        self.steps_left -= 1
        a, sa = self._resolve(a, sa)
        b, sb = self._resolve(b, sb)
        if _same(a, b):
            return
        if isinstance(a, (dict, list)) and isinstance(b, (dict, list)):
            # One object reached by several paths (a config node's back reference
            # to its parent; a model's parameter in its optimizer, the optimizer in
            # its scheduler) is compared, and reported, once: at the first path.
            pair = (_identity(a), _identity(b))
            if pair in self._compared:
                return
            self._compared.add(pair)
        if depth >= MAX_DEPTH:
            yield self._leaf(path, a, b)
            return
        kind_a, kind_b = _kind(a), _kind(b)
        if kind_a != kind_b or kind_a == "leaf":
            yield self._leaf(path, a, b)
            return
        walker = _WALKERS.get(kind_a)
        if walker is None:
            yield self._leaf(path, a, b)
            return
        yield from walker(self, a, sa, b, sb, path, depth + 1)

    def _leaf(self, path: str, a: Any, b: Any, change: str = "changed") -> dict[str, Any]:
        if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > LONG_TEXT:
            # Summaries cut long text at its start: show where the two first differ.
            first = _first_difference(a, b)
            start = max(0, first - LONG_TEXT // 4)
            return {
                "path": path,
                "change": change,
                "a": _window(a, start) if self.summaries else None,
                "b": _window(b, start) if self.summaries else None,
                "note": f"first difference at character {first}",
            }
        return {"path": path, "change": change, "a": self.summarize(a), "b": self.summarize(b)}

    def _added(self, path: str, b: Any) -> dict[str, Any]:
        return {"path": path, "change": "added", "a": None, "b": self.summarize(b)}

    def _removed(self, path: str, a: Any) -> dict[str, Any]:
        return {"path": path, "change": "removed", "a": self.summarize(a), "b": None}

    def _keyed(
        self,
        items_a: list[tuple[str, Any]],
        sa: _Side,
        items_b: list[tuple[str, Any]],
        sb: _Side,
        depth: int,
    ) -> Iterator[dict[str, Any]]:
        """Compare two sequences of (path, node) matched by path."""
        by_path_b = dict(items_b)
        seen = set()
        for path, node in items_a:
            seen.add(path)
            if path in by_path_b:
                yield from self._walk(node, sa, by_path_b[path], sb, path, depth)
            else:
                yield self._removed(path, node)
        for path, node in items_b:
            if path not in seen:
                yield self._added(path, node)

    # -- kinds ----------------------------------------------------------------------------
    def _sequence(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        items_a, items_b = _items(a), _items(b)
        yield from self._keyed(
            [(f"{path}[{i}]", x) for i, x in enumerate(items_a)],
            sa,
            [(f"{path}[{i}]", x) for i, x in enumerate(items_b)],
            sb,
            depth,
        )

    def _mapping(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        keyed_a = [(f"{path}[{self._key_text(k)}]", v) for k, v in _pairs(a)]
        keyed_b = [(f"{path}[{self._key_text(k)}]", v) for k, v in _pairs(b)]
        found = list(self._keyed(keyed_a, sa, keyed_b, sb, depth))
        if not found and a.get("$") == "odict":
            found.append({**self._leaf(path, a, b), "note": "order changed"})
        yield from found

    def _set(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        encoded_a = {_canonical(x): x for x in a.get("items", [])}
        encoded_b = {_canonical(x): x for x in b.get("items", [])}
        for key, node in encoded_a.items():
            if key not in encoded_b:
                yield self._removed(f"{path}{{{self._key_text(node)}}}", node)
        for key, node in encoded_b.items():
            if key not in encoded_a:
                yield self._added(f"{path}{{{self._key_text(node)}}}", node)

    def _object(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        if not _same(_code_of(a), _code_of(b)):
            yield {**self._leaf(path, a, b), "note": "class changed"}
            return
        yield from self._keyed(
            list(_object_parts(a, path)), sa, list(_object_parts(b, path)), sb, depth
        )

    def _module(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        if not _same(a.get("cls"), b.get("cls")):
            yield {**self._leaf(path, a, b), "note": "class changed"}
            return
        yield from self._keyed(
            list(_module_parts(a, path)), sa, list(_module_parts(b, path)), sb, depth
        )

    def _array(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        # Without numbers no blob is read: shape, dtype and data identity only.
        stats = compare_array_nodes(self.objects, a, b) if self.numeric else _shape_change(a, b)
        if stats is not None:
            yield {"path": path, "change": "changed", "tensor": stats}
        others_a = [(f"{path}.{k}", v) for k, v in a.items() if k not in _ARRAY_FIELDS]
        others_b = [(f"{path}.{k}", v) for k, v in b.items() if k not in _ARRAY_FIELDS]
        yield from self._keyed(others_a, sa, others_b, sb, depth)

    def _fields(
        self, a: Any, sa: _Side, b: Any, sb: _Side, path: str, depth: int
    ) -> Iterator[dict[str, Any]]:
        """Any other codec's node: field by field."""
        yield from self._keyed(
            [(f"{path}.{k}", v) for k, v in a.items() if k not in ("$", "&")],
            sa,
            [(f"{path}.{k}", v) for k, v in b.items() if k not in ("$", "&")],
            sb,
            depth,
        )

    def _key_text(self, key: Any) -> str:
        if key is None or isinstance(key, (bool, int, float, str)):
            return repr(key)
        from ..values.summaries import describe

        return describe(self._reader.summarize(key), 40)


_Walker = Callable[[NodeDiffer, Any, _Side, Any, _Side, str, int], Iterator[dict[str, Any]]]
_WALKERS: dict[str, _Walker] = {
    "sequence": NodeDiffer._sequence,
    "mapping": NodeDiffer._mapping,
    "set": NodeDiffer._set,
    "object": NodeDiffer._object,
    "module": NodeDiffer._module,
    "array": NodeDiffer._array,
    "fields": NodeDiffer._fields,
}


def _kind(node: Any) -> str:
    """How a node is walked (two nodes of different kinds differ as a whole)."""
    if isinstance(node, list):
        return "sequence"
    if not isinstance(node, dict):
        return "leaf"
    tag = node.get("$")
    if tag == "tuple":
        return "sequence"
    if tag in ("dict", "odict"):
        return "mapping" if tag == "dict" else "odict"
    if tag in ("set", "frozenset"):
        return "set" if tag == "set" else "frozenset"
    if tag in _OBJECT_TAGS:
        return "object"
    if tag == _MODULE_TAG or (tag is None and "modules" in node and "params" in node):
        return "module"
    if is_array_node(node):
        return "array"
    if tag in ("float", "complex", "bytes", "bytearray", "str", "code", "module", "same", "ref"):
        return "leaf"
    if tag == "args":
        return "mapping"
    return "fields" if isinstance(tag, str) else "leaf"


# Kinds that share a walker under another name (kept apart so a tuple never
# matches a list, nor a set a frozenset).
_WALKERS["odict"] = NodeDiffer._mapping
_WALKERS["frozenset"] = NodeDiffer._set


def _identity(node: dict[str, Any] | list[Any]) -> Any:
    """What names one object of a stored value: its node, or a tensor's bytes and layout.

    A tensor stored twice (a parameter in its module and in its optimizer) has
    two nodes over the same bytes: the same tensor to a reader of the diff.
    """
    if isinstance(node, dict) and is_array_node(node):
        return ("array", data_key(node), str(node_shape(node)), node_dtype(node))
    return id(node)


def _is_ref(node: Any) -> bool:
    return isinstance(node, dict) and node.get("$") == "ref" and isinstance(node.get("id"), str)


def _same(a: Any, b: Any) -> bool:
    """Equal encodings are equal values (nodes hold the digests of what they reference)."""
    if type(a) is not type(b) or a != b:
        return False
    # ``==`` takes 1, 1.0 and True inside containers for one another: encodings do not.
    return a is b or _canonical(a) == _canonical(b)


def _canonical(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def _items(node: Any) -> list[Any]:
    items = node if isinstance(node, list) else node.get("items", [])
    if items and isinstance(items[0], dict) and items[0].get("$") == "label":
        return items[1:]
    return list(items)


def _pairs(node: dict[str, Any]) -> list[tuple[Any, Any]]:
    out = []
    for item in node.get("items", []):
        if isinstance(item, list) and len(item) == 2:
            out.append((item[0], item[1]))
    return out


def _code_of(node: dict[str, Any]) -> Any:
    return node.get("cls") if "cls" in node else node.get("fn")


def _state_parts(state: Any, path: str) -> Iterator[tuple[str, Any]]:
    """An object's pickled state as attributes (a dict, or a ``(dict, slots)`` pair)."""
    if isinstance(state, dict) and state.get("$") == "dict":
        pairs = _pairs(state)
        if all(isinstance(k, str) for k, _ in pairs):
            for key, value in pairs:
                yield f"{path}.{key}", value
            return
    if isinstance(state, dict) and state.get("$") == "tuple" and len(state.get("items", [])) == 2:
        for part in state["items"]:
            if part is not None:
                yield from _state_parts(part, path)
        return
    if state is not None:
        yield f"{path}.__state__", state


def _object_parts(node: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    for i, arg in enumerate(node.get("args") or []):
        yield f"{path}.__args__[{i}]", arg
    if "state" in node:
        yield from _state_parts(node["state"], path)
    for i, item in enumerate(_items(node.get("listitems") or [])):
        yield f"{path}[{i}]", item
    dictitems = node.get("dictitems")
    if isinstance(dictitems, dict):
        for key, value in _pairs(dictitems):
            yield f"{path}[{key!r}]", value
    for key, value in node.items():
        if key not in ("$", "&", "cls", "fn", "args", "state", "listitems", "dictitems"):
            yield f"{path}.<{key}>", value


def _module_parts(node: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """A module tree's parameters, buffers, submodules, hooks and attributes by name."""
    for section in ("params", "buffers", "modules"):
        for entry in node.get(section) or []:
            if isinstance(entry, list) and len(entry) == 2:
                yield f"{path}.{entry[0]}", entry[1]
    hooks = node.get("hooks")
    if isinstance(hooks, dict):
        for name, value in _pairs(hooks):
            yield f"{path}.{name}", value
    yield from _state_parts(node.get("state"), path)
    for key, value in node.items():
        if key not in ("$", "&", "cls", "params", "buffers", "modules", "hooks", "state"):
            yield f"{path}.<{key}>", value


def _shape_change(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    dtype_a, dtype_b = node_dtype(a), node_dtype(b)
    shape_a, shape_b = node_shape(a), node_shape(b)
    if dtype_a == dtype_b and shape_a == shape_b and data_key(a) == data_key(b):
        return None
    return {
        "shape": shape_a if shape_a == shape_b else [shape_a, shape_b],
        "dtype": dtype_a if dtype_a == dtype_b else [dtype_a, dtype_b],
    }


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _window(text: str, start: int) -> str:
    body = text[start : start + LONG_TEXT]
    return ("…" if start else "") + body + ("…" if start + LONG_TEXT < len(text) else "")


def class_name(node: Any) -> str | None:
    """The class name of an object or module node (``Net``), else None."""
    if not isinstance(node, dict):
        return None
    code = node.get("cls") if _kind(node) in ("object", "module") else None
    if code is None and _kind(node) == "object":
        code = node.get("fn")
    if isinstance(code, dict) and code.get("$") == "code" and isinstance(code.get("qualname"), str):
        return code["qualname"].rsplit(".", 1)[-1]
    return None


def _labels(node: Any) -> dict[int, Any]:
    """Label -> labelled node, for the ``same`` nodes of one document."""
    found: dict[int, Any] = {}
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            if item and isinstance(item[0], dict) and item[0].get("$") == "label":
                label = item[0].get("k")
                if isinstance(label, int):
                    found.setdefault(label, item)
            stack.extend(item)
        elif isinstance(item, dict):
            label = item.get("&")
            if isinstance(label, int):
                found.setdefault(label, item)
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
    return found


def argument_nodes(differ: NodeDiffer, args_id: str | None) -> tuple[dict[str, Any], Any]:
    """The arguments of a call by name, from its arguments document, and that document's labels."""
    if not args_id:
        return {}, {}
    node, labels = differ.doc_node(args_id)
    if not isinstance(node, dict) or node.get("$") != "args":
        return {}, labels
    return {name: value for name, value in _pairs(node)}, labels
