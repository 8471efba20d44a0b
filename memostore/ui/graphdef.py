"""A logged model graph as a tree of modules with shapes, read from its stored ``GraphDef``.

``add_graph`` stores the ``GraphDef`` torch's tracer makes (``docs/format.md``):
one node per operation, named by the module scope it ran in
(``Net/Sequential[enc]/Linear[0]/input.3``), with its inputs and, in the
``_output_shapes`` attribute, the shapes it produced. The page draws modules,
not operations: nodes are grouped by scope, and a module's input and output
shapes are those of the values that cross its boundary.

The bytes are read with a small protocol-buffer wire reader that knows only
the fields used here (never a generated class, never ``protobuf`` itself, which
the dashboard does not need): a malformed or hostile blob raises ValueError,
and the sizes it may announce are bounded by the blob's own length.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# Beyond this many nodes the tree is cut (a reader cannot unfold more anyway).
MAX_NODES = 100_000
_MAX_TEXT = 300
# Operations that compute nothing a reader follows: constants and attribute reads.
_PLUMBING = ("prim::Constant", "prim::GetAttr", "prim::ListConstruct", "prim::TupleConstruct")
_SCOPE = re.compile(r"^(?P<type>[^\[\]]*)\[(?P<attr>[^\[\]]*)\]$")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints, or bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("length-delimited field runs past the message")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("field runs past the message")
        yield number, wire, value


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")[:_MAX_TEXT]


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shape(data: bytes) -> list[int] | None:
    """A ``TensorShapeProto``: its dimensions (-1 unknown), None for an unknown rank."""
    dims: list[int] = []
    for number, wire, value in _fields(data):
        if number == 2 and wire == 2:  # dim
            size = -1
            for n, w, v in _fields(value):
                if n == 1 and w == 0:
                    size = _signed(v)
            dims.append(size)
        elif number == 3 and wire == 0 and value:  # unknown_rank
            return None
    return dims


def _attr(data: bytes) -> tuple[str, list[list[int] | None] | str | None]:
    """One ``attr`` map entry: (key, shapes for ``_output_shapes``, text for a string value)."""
    key, found = "", None
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            key = _text(value)
        elif number == 2 and wire == 2:  # AttrValue
            for n, w, v in _fields(value):
                if n == 1 and w == 2:  # list: its shapes (field 7)
                    found = [_shape(s) for k, t, s in _fields(v) if k == 7 and t == 2]
                elif n == 2 and w == 2:  # s
                    found = _text(v)
    return key, found


def parse_graph(data: bytes) -> list[dict[str, Any]]:
    """The nodes of a serialized ``GraphDef``: ``{"name", "op", "inputs", "shapes", "attr"}``.

    Raises:
        ValueError: the bytes are not a well-formed ``GraphDef``.
    """
    nodes = []
    for number, wire, value in _fields(data):
        if number != 1 or wire != 2:
            continue  # versions, library: not drawn
        node: dict[str, Any] = {"name": "", "op": "", "inputs": [], "shapes": [], "attr": ""}
        for n, w, v in _fields(value):
            if w != 2:
                continue
            if n == 1:
                node["name"] = _text(v)
            elif n == 2:
                node["op"] = _text(v)
            elif n == 3:
                node["inputs"].append(_text(v).split(":")[0].lstrip("^"))
            elif n == 5:
                key, found = _attr(v)
                if key == "_output_shapes" and isinstance(found, list):
                    node["shapes"] = found
                elif key == "attr" and isinstance(found, str):
                    node["attr"] = found
        nodes.append(node)
        if len(nodes) > MAX_NODES:
            raise ValueError(f"graph of more than {MAX_NODES} nodes")
    return nodes


def _module(scope: str) -> dict[str, Any]:
    match = _SCOPE.match(scope)
    kind, attr = (match["type"], match["attr"]) if match else (scope, None)
    return {
        "scope": scope,
        "type": kind,
        "attr": attr,
        "path": "",
        "modules": [],
        "ops": [],
        "parameters": [],
        "inputs": [],
        "outputs": [],
        "count": 0,
    }


def module_tree(nodes: list[dict[str, Any]], parameters: Any = None) -> dict[str, Any]:
    """The modules of a traced graph as a tree, with the shapes crossing each one's boundary.

    Args:
        nodes: what :func:`parse_graph` returns.
        parameters: the ``parameters`` a graph point recorded (``[[name, shape, dtype,
            role], ...]``, dotted names as ``named_parameters`` gives them), or None.

    Returns:
        ``{"inputs", "outputs", "root", "nodes"}``: the model's inputs and outputs
        (``{"name", "shape"}``), the root module and how many nodes the graph has.
        A module is ``{"scope", "type", "attr", "path", "modules", "ops",
        "parameters", "inputs", "outputs", "count"}``: ``path`` is its dotted
        name (``enc.0``), ``ops`` the operations run directly in it (``{"name",
        "op", "shapes"}``), ``inputs``/``outputs`` the shapes entering and leaving
        it, ``count`` the operations in its whole subtree.
    """
    by_name = {n["name"]: n for n in nodes}
    root = _module("")
    modules: dict[tuple[str, ...], dict[str, Any]] = {(): root}
    inputs, outputs = [], []

    def module_of(scopes: tuple[str, ...]) -> dict[str, Any]:
        found = modules.get(scopes)
        if found is None:
            parent = module_of(scopes[:-1])
            found = _module(scopes[-1])
            found["path"] = ".".join(s for s in (parent["path"], found["attr"]) if s)
            parent["modules"].append(found)
            modules[scopes] = found
        return found

    scope_of: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        parts = node["name"].split("/")
        if node["op"] == "IO Node":
            io = {"name": parts[-1], "shape": (node["shapes"] or [None])[0]}
            (inputs if parts[0] == "input" else outputs).append(io)
            continue
        if node["op"] in _PLUMBING:
            continue
        scopes = tuple(parts[:-1])
        scope_of[node["name"]] = scopes
        module_of(scopes)["ops"].append(
            {"name": parts[-1], "op": node["op"], "shapes": node["shapes"]}
        )
        for depth in range(len(scopes) + 1):
            modules[scopes[:depth]]["count"] += 1
    # A value crossing from scope A into scope B leaves every module of A below their
    # common prefix and enters every module of B below it.
    for node in nodes:
        target = scope_of.get(node["name"])
        if target is None:
            continue
        for source_name in node["inputs"]:
            source = scope_of.get(source_name)
            shape = _first_shape(by_name.get(source_name))
            if source is None and (by_name.get(source_name) or {}).get("op") != "IO Node":
                continue
            common = _common(source or (), target) if source is not None else 0
            for depth in range(common + 1, len(target) + 1):
                _add_shape(modules[target[:depth]]["inputs"], shape)
            for depth in range(common + 1, len(source or ()) + 1):
                _add_shape(modules[(source or ())[:depth]]["outputs"], shape)
    for io in outputs:
        for source_name in (by_name.get(f"output/{io['name']}") or {}).get("inputs", []):
            source = scope_of.get(source_name, ())
            for depth in range(1, len(source) + 1):
                _add_shape(modules[source[:depth]]["outputs"], io["shape"])
    _attach_parameters(modules, parameters)
    top = root["modules"][0] if len(root["modules"]) == 1 and not root["ops"] else root
    return {"inputs": inputs, "outputs": outputs, "root": top, "nodes": len(nodes)}


def _first_shape(node: dict[str, Any] | None) -> list[int] | None:
    shapes = (node or {}).get("shapes") or []
    return shapes[0] if shapes else None


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    depth = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        depth += 1
    return depth


def _add_shape(shapes: list[Any], shape: list[int] | None) -> None:
    if shape is not None and shape not in shapes:
        shapes.append(shape)


def _attach_parameters(modules: dict[tuple[str, ...], dict[str, Any]], parameters: Any) -> None:
    """Put each recorded parameter and buffer in the module whose dotted path owns it."""
    if not isinstance(parameters, list):
        return
    by_path = {m["path"]: m for m in modules.values()}
    for item in parameters:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)):
            continue
        owner, _, leaf = item[0].rpartition(".")
        module = by_path.get(owner)
        if module is not None:
            module["parameters"].append(
                {"name": leaf[:_MAX_TEXT], "shape": item[1], "dtype": item[2], "role": item[3]}
            )
