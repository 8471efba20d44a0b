"""Path arguments: keyed by content where declared (``@memo(files=...)``), hinted otherwise.

``@memo(files=("path",))`` keys the parameter ``path`` by the content of the
file or directory tree it names (:mod:`memostore.values.file_digests`), not by the
name: the same bytes under another path hit, a changed file misses. The body
still gets the argument it was given; only the key sees its content.

An undeclared ``str`` or ``os.PathLike`` argument that names an existing file
or directory is keyed by its name. The first such call of each function in a
process warns once (:class:`MemostoreWarning`) and says how to key it by
content; after that the function's calls are not checked again.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import MemostoreError, MemostoreWarning
from .codecs import Codec, register_codec
from .file_digests import ContentDigest, PathKeyError, content_digest
from .snapshot import Snapshot

# Longer strings, or ones holding these characters, are never file names worth a stat.
_PATH_MAX = 4096
_NOT_IN_PATHS = ("\0", "\n")
# Distinct non-path strings remembered per function; past this, it is not checked any more.
_CHECKED_MAX = 1024
# warnings.warn -> _hint -> apply -> MemoizedFunction._bind -> _prepare -> __call__ -> caller
_HINT_STACKLEVEL = 6


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
        unknown = sorted(set(names) - set(parameters))
        if unknown:
            raise MemostoreError(
                f"@memo(files=...) names {unknown}, which {symbol} does not take; "
                f"its parameters are {list(parameters)}"
            )
        both = sorted(set(names) & set(ignore))
        if both:
            raise MemostoreError(
                f"@memo names {both} in both files= and ignore=: an ignored parameter is not "
                "part of the key at all; keep it in one of them"
            )
        self.symbol = symbol
        self.declared = frozenset(names)
        self._hint_pending = True
        self._checked: set[str] = set()

    def apply(self, items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """The call's (name, value) pairs as the key sees them; hints once if due."""
        if self.declared:
            items = [
                (name, self._keyed(name, value) if name in self.declared else value)
                for name, value in items
            ]
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
        for name, value in items:
            if name in self.declared:
                continue
            cls = type(value)
            if cls is str:
                if not value or len(value) > _PATH_MAX or value in self._checked:
                    continue
                if any(c in value for c in _NOT_IN_PATHS):
                    continue
                text = value
            elif getattr(cls, "__fspath__", None) is not None and not isinstance(value, Snapshot):
                try:
                    text = os.fsdecode(os.fspath(value))
                except (TypeError, ValueError):
                    continue
            else:
                continue
            kind = _existing_kind(text)
            if kind is None:
                if len(self._checked) >= _CHECKED_MAX:
                    self._hint_pending = False  # ever new strings: not paths, stop looking
                    return
                if cls is str:
                    self._checked.add(text)
                continue
            self._hint_pending = False
            self._checked.clear()
            warnings.warn(
                f"memostore: argument {name!r} of {self.symbol} is {text!r}, the path of an "
                f"existing {kind}; it is keyed by its name, not its content, so a changed {kind} "
                f"still hits and the same content elsewhere misses. To key it by content, "
                f"declare it: @memo(files=({name!r},))",
                MemostoreWarning,
                stacklevel=_HINT_STACKLEVEL,
            )
            return


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
