"""Path arguments: keyed by content where declared (``@memo(files=...)``), hinted otherwise.

``@memo(files=("path",))`` keys the parameter ``path`` by the content of the
file or directory tree it names (:mod:`memostore.values.file_digests`), not by the
name: the same bytes under another path hit, a changed file misses. The body
still gets the argument it was given; only the key sees its content.

A declared name may also reach inside an argument: ``files=("cfg.path",)``
keys the ``path`` attribute (or ``"path"`` entry) of the argument ``cfg`` by
content, in addition to ``cfg`` itself, as an extra item of the key.

An undeclared ``str`` or ``os.PathLike`` argument that names an existing file
or directory is keyed by its name, and so is such a value held inside an
argument (a dataclass field, an attribute, an item; two levels down at most).
The first such call of each function in a process warns once
(:class:`MemostoreWarning`) and says how to key it by content; after that the
function's calls are not checked again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import MemostoreError, warn
from .codecs import Codec, register_codec, registry
from .file_digests import ContentDigest, PathKeyError, content_digest
from .snapshot import Snapshot

# Longer strings, or ones holding these characters, are never file names worth a stat.
_PATH_MAX = 4096
_NOT_IN_PATHS = ("\0", "\n")
# Distinct non-path strings remembered per function; past this, it is not checked any more.
_CHECKED_MAX = 1024


class PathNotFound(MemostoreError, FileNotFoundError):
    """A parameter declared in ``@memo(files=...)`` names a path that does not exist."""


class KeyedPath(str):
    """A path argument as the call key sees it: the path's text, keyed by its content.

    It is a ``str`` so that listings (``memostore log``, the argument summary
    of ``memostore show``) still show the path the call was given.

    Attributes:
        content: the content digest of the file or tree at the time of the call.
    """

    content: ContentDigest

    def __new__(cls, text: str, content: ContentDigest) -> KeyedPath:
        self = super().__new__(cls, text)
        self.content = content
        return self


class KeyedPaths(str):
    """A list or tuple of path arguments, keyed by their contents in order.

    Attributes:
        contents: one content digest per path.
        sequence: ``"list"`` or ``"tuple"`` (as the call passed them; they key differently).
    """

    contents: tuple[ContentDigest, ...]
    sequence: str

    def __new__(
        cls, texts: Sequence[str], contents: tuple[ContentDigest, ...], sequence: str
    ) -> KeyedPaths:
        shown = list(texts) if sequence == "list" else tuple(texts)
        self = super().__new__(cls, repr(shown))
        self.contents = contents
        self.sequence = sequence
        return self

    def __repr__(self) -> str:
        return str(self)


class PathArguments:
    """What ``@memo`` does with one function's path arguments.

    Args:
        symbol: the function's name, for messages.
        parameters: the names of its parameters.
        files: the parameters keyed by content.
        ignore: the parameters left out of the key (none may also be in *files*).

    Raises:
        MemostoreError: *files* names something that is not a parameter, or an
            ignored one.
    """

    def __init__(
        self,
        symbol: str,
        parameters: Sequence[str],
        files: Iterable[str] = (),
        ignore: Iterable[str] = (),
    ) -> None:
        names = (files,) if isinstance(files, str) else tuple(files)
        unknown = sorted({n for n in names if n.partition(".")[0] not in parameters})
        if unknown:
            raise MemostoreError(
                f"@memo(files=...) names {unknown}, which {symbol} does not take; "
                f"its parameters are {list(parameters)}"
            )
        both = sorted({n for n in names if n.partition(".")[0] in set(ignore)})
        if both:
            raise MemostoreError(
                f"@memo names {both} in both files= and ignore=: an ignored parameter is not "
                "part of the key at all; keep it in one of them"
            )
        self.symbol = symbol
        self.declared = frozenset(n for n in names if "." not in n)
        # parameter -> the dotted names declared inside it ("cfg.path": ["path"])
        self.inside: dict[str, list[tuple[str, list[str]]]] = {}
        for name in names:
            if "." in name:
                param, _, rest = name.partition(".")
                self.inside.setdefault(param, []).append((name, rest.split(".")))
        self._hint_pending = True
        self._checked: set[str] = set()

    def apply(self, items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """The call's (name, value) pairs as the key sees them; hints once if due."""
        if self.declared:
            items = [
                (name, self._keyed(name, value) if name in self.declared else value)
                for name, value in items
            ]
        if self.inside:
            out: list[tuple[str, Any]] = []
            for name, value in items:
                out.append((name, value))
                for dotted, attrs in self.inside.get(name, ()):
                    out.append((dotted, self._keyed(dotted, _reach(dotted, value, attrs))))
            items = out
        if self._hint_pending:
            self._hint(items)
        return items

    # -- declared parameters -------------------------------------------------------------
    def _keyed(self, name: str, value: Any) -> Any:
        if value is None:
            return None  # an optional path left out: keyed as None
        if isinstance(value, (list, tuple)):
            texts = [self._text(name, item) for item in value]
            contents = tuple(self._content(name, text) for text in texts)
            return KeyedPaths(texts, contents, "list" if isinstance(value, list) else "tuple")
        text = self._text(name, value)
        return KeyedPath(text, self._content(name, text))

    def _text(self, name: str, value: Any) -> str:
        if isinstance(value, (str, bytes, os.PathLike)):
            return os.fsdecode(value)
        raise MemostoreError(
            f"argument {name!r} of {self.symbol} is keyed by the content of the path it names "
            f"(@memo(files=...)), but the call passed a {type(value).__qualname__}: pass a str "
            f"or os.PathLike, or a list or tuple of them, or drop {name!r} from files="
        )

    def _content(self, name: str, text: str) -> ContentDigest:
        try:
            return content_digest(text)
        except FileNotFoundError:
            raise PathNotFound(
                f"argument {name!r} of {self.symbol} names {text!r}, which does not exist; "
                "@memo(files=...) keys it by the content of that file or directory, so it must "
                "exist when the function is called"
            ) from None
        except PathKeyError as exc:
            raise PathKeyError(f"argument {name!r} of {self.symbol}: {exc}") from None
        except OSError as exc:
            raise PathKeyError(
                f"argument {name!r} of {self.symbol}: cannot read {text!r} ({exc.strerror})"
            ) from exc

    # -- the hint ------------------------------------------------------------------------
    def _hint(self, items: list[tuple[str, Any]]) -> None:
        declared = self.declared | {d for found in self.inside.values() for d, _ in found}
        for name, value in items:
            if name in declared:
                continue
            for where, inner in _held_paths(name, value):
                if where in declared:
                    continue
                found = self._existing(inner)
                if found is None:
                    if not self._hint_pending:
                        return  # ever new strings: not paths, stop looking
                    continue
                text, kind = found
                self._hint_pending = False
                self._checked.clear()
                held = "is" if where == name else f"holds {where} ="
                warn(
                    f"argument {name!r} of {self.symbol} {held} {text!r}, the path of "
                    f"an existing {kind}; it is keyed by its name, not its content, so a changed "
                    f"{kind} still hits and the same content elsewhere misses. To key it by "
                    f"content, declare it: @memo(files=({where!r},))"
                )
                return

    def _existing(self, value: Any) -> tuple[str, str] | None:
        """(path text, "file" or "directory") when *value* names an existing one."""
        cls = type(value)
        if cls is str:
            if not value or len(value) > _PATH_MAX or value in self._checked:
                return None
            if any(c in value for c in _NOT_IN_PATHS):
                return None
            text = value
        elif getattr(cls, "__fspath__", None) is not None and not isinstance(value, Snapshot):
            try:
                text = os.fsdecode(os.fspath(value))
            except (TypeError, ValueError):
                return None
        else:
            return None
        kind = _existing_kind(text)
        if kind is None:
            if len(self._checked) >= _CHECKED_MAX:
                self._hint_pending = False
            elif cls is str:
                self._checked.add(text)
            return None
        return text, kind


# How far, and how much, the hint looks inside an argument for paths.
_HELD_DEPTH = 2
_HELD_MAX = 64


def _held_paths(name: str, value: Any) -> list[tuple[str, Any]]:
    """*value* itself, then the strs and paths it holds, as (dotted name, value).

    Looks into containers, dataclasses and plain objects' attributes, two levels
    down and 64 values at most; not into values that codecs store (tensors,
    modules, arrays), which hold no paths worth a ``stat``.
    """
    out: list[tuple[str, Any]] = [(name, value)]
    queue = [(name, value, 0)]
    while queue and len(out) < _HELD_MAX:
        where, obj, depth = queue.pop(0)
        if depth >= _HELD_DEPTH:
            continue
        for step, inner in _members(obj):
            at = f"{where}.{step}"
            if isinstance(inner, (str, os.PathLike)):
                out.append((at, inner))
            elif depth + 1 < _HELD_DEPTH:
                queue.append((at, inner, depth + 1))
            if len(out) >= _HELD_MAX:
                break
    return out


def _members(obj: Any) -> list[tuple[str, Any]]:
    cls = type(obj)
    if cls in (str, bytes, int, float, bool, type(None)) or isinstance(obj, os.PathLike):
        return []
    if cls is dict:
        return [(k, v) for k, v in list(obj.items())[:_HELD_MAX] if type(k) is str]
    if cls in (list, tuple):
        return [(str(i), v) for i, v in enumerate(obj[:_HELD_MAX])]
    if cls.__module__ != "builtins" and registry.for_type(cls) is not None:
        return []  # tensors, modules, arrays, datasets: stored by their codecs
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict) or isinstance(obj, type):
        return []
    return [(k, v) for k, v in list(attrs.items())[:_HELD_MAX] if not k.startswith("_")]


def _reach(dotted: str, value: Any, attrs: list[str]) -> Any:
    """The value a dotted ``files=`` name names inside an argument."""
    for attr in attrs:
        if isinstance(value, dict) and attr in value:
            value = value[attr]
            continue
        try:
            value = getattr(value, attr)
        except AttributeError:
            raise MemostoreError(
                f"@memo(files=({dotted!r},)) names {attr!r} inside the argument, which the call's "
                f"{type(value).__qualname__} does not have; name an attribute or key it holds"
            ) from None
    return value


def _existing_kind(text: str) -> str | None:
    try:
        st = os.stat(text)
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return "file"


def _content_node(content: ContentDigest) -> dict[str, Any]:
    return {
        "kind": content.kind,
        "digest": content.digest,
        "files": content.files,
        "bytes": content.size,
    }


def _content_of(node: dict[str, Any]) -> ContentDigest:
    return ContentDigest(node["kind"], node["digest"], node["files"], node["bytes"])


class KeyedPathCodec(Codec):
    """Encodes a declared path argument by its content digest (the bytes are not stored).

    The node holds the digest, file count and size, never the path: the same
    content under another name keys the same. Decoding gives back the
    :class:`~memostore.values.file_digests.ContentDigest` (or a list or tuple of them):
    the files themselves were never stored.
    """

    tag = "content"
    types = (KeyedPath, KeyedPaths)

    def encode(self, obj: Any, enc: Any) -> dict[str, Any]:
        if isinstance(obj, KeyedPaths):
            return {"seq": obj.sequence, "items": [_content_node(c) for c in obj.contents]}
        return _content_node(obj.content)

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        if "items" in node:
            contents = [_content_of(item) for item in node["items"]]
            return contents if node["seq"] == "list" else tuple(contents)
        return _content_of(node)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        if "items" in node:
            items = [self.summarize(item, reader) for item in node["items"]]
            return {"type": node["seq"], "len": len(items), "items": items}
        out: dict[str, Any] = {
            "type": "file" if node["kind"] == "file" else "directory",
            "bytes": node["bytes"],
        }
        if node["kind"] != "file":
            out["files"] = node["files"]
        out["digest"] = node["digest"][:16]
        return out


register_codec(KeyedPathCodec())
