"""Argument binding and keyed calls: what a memoised call is looked up by.

The key of a call is a digest of the function's symbol, the digest of its
code's dependency closure, the digest of its bound arguments and its
``version`` salt (``docs/format.md``; computed by :func:`call_key`, which
lives with the evaluation records, since readers recompute it too). Binding
applies defaults the way Python does, so ``f(1)`` and ``f(1, b=2)`` with
``b=2`` the default key alike.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ..odb.objects import Doc

if TYPE_CHECKING:
    from ..effects.arguments import Watched
    from ..effects.identity import Layout
    from ..values.encoding import Encoder, HashSink


class FastBinder:
    """Binds arguments like ``inspect.Signature.bind`` + ``apply_defaults``, faster.

    Only for signatures made of plain positional-or-keyword parameters (the
    common case); anything else falls back to inspect, which also raises the
    exact TypeError Python would for a bad call.
    """

    def __init__(self, signature: inspect.Signature) -> None:
        params = list(signature.parameters.values())
        self.simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self.names = [p.name for p in params]
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.signature = signature

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if not self.simple or len(args) > len(self.names):
            return None
        bound = dict(zip(self.names, args, strict=False))
        for name, value in kwargs.items():
            if name in bound or name not in self.names:
                return None
            bound[name] = value
        if len(bound) != len(self.names):
            for name in self.names:
                if name not in bound:
                    if name not in self.defaults:
                        return None
                    bound[name] = self.defaults[name]
        return {name: bound[name] for name in self.names}

    def bind_all(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The bound arguments, defaults applied (TypeError as Python raises it)."""
        arguments = self.bind(args, kwargs)
        if arguments is None:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
        return arguments


class KeyedCall:
    """A keyed call: its arguments, the globals it reads, its code, key and hashing work.

    Attributes:
        fn: the memoised function (its ``symbol``, ``version`` and ``code_file``).
        arguments: the bound arguments in the key (``ignore``-d ones left out).
        watched: the arguments and data globals, as keyed (``effects/arguments.py``).
        sink, encoder: what hashing them produced (documents to flush on a miss).
        stored: the evaluation document once a miss has been recorded.
        layout: where the watched objects stood before the body ran (a miss
            only; ``effects/identity.py``).
        settings: the process settings in the key (``effects/process.py``).
        reads: the record of what the body read (a miss only; ``effects/reads.py``).
    """

    __slots__ = (
        "_code_doc",
        "args_id",
        "arguments",
        "code",
        "encoder",
        "fn",
        "key",
        "layout",
        "reads",
        "settings",
        "sink",
        "stored",
        "watched",
    )

    def __init__(
        self,
        fn: Any,
        arguments: list[tuple[str, Any]],
        watched: Watched,
        code: Any,
        sink: HashSink,
        encoder: Encoder,
        args_id: str,
        key: str,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.arguments = arguments
        self.watched = watched
        self.code = code
        self.sink = sink
        self.encoder = encoder
        self.args_id = args_id
        self.key = key
        self.stored: Doc | None = None
        self.layout: Layout | None = None
        self.settings = settings or {}
        self.reads: dict[str, Any] = {}
        self._code_doc: Doc | None = None

    @property
    def code_doc(self) -> Doc:
        """The code document of the function (built once: it hashes every source)."""
        if self._code_doc is None:
            from ..records.evaluation import code_doc

            self._code_doc = code_doc(self.code)
        return self._code_doc

    @property
    def args_node(self) -> Any:
        """The node of the arguments document, as hashed for the key."""
        return self.sink.docs[self.args_id].body["node"]


def call_about(call: KeyedCall) -> dict[str, Any]:
    """What a running memoised call shows before it is recorded: argument summaries and ids."""
    from ..records.evaluation import summarize

    about: dict[str, Any] = {"args": call.args_id, "code_digest": call.code.digest}
    try:
        about["code"] = call.code_doc.id
        about["args_summary"] = {name: summarize(value) for name, value in call.arguments}
    except Exception:
        pass  # an object whose attributes raise: listed without summaries, never a failed call
    return about
