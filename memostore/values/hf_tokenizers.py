"""Hugging Face ``tokenizers``: a ``Tokenizer`` and an ``AddedToken`` as values.

Registered by type name, so importing memostore never imports ``tokenizers``.

Both are Rust objects whose pickled state is their own (a ``__setstate__``
written in Rust), so the state rule of families cannot make them. They are
stored as what the library itself writes to ``tokenizer.json``: a
``Tokenizer`` as its JSON serialisation (the same bytes in every process, so
its digest keys a call), an ``AddedToken`` as its six fields. Restoring parses
that JSON with ``Tokenizer.from_str`` and calls ``AddedToken`` with checked
fields: the library's own readers of its data format, as ``numpy.dtype`` is
numpy's. A ``PreTrainedTokenizerFast`` around one is a class of the
``transformers`` family (``memostore/trust/families.py``), restored from its
state, which holds these.
"""

from __future__ import annotations

from typing import Any

from ..errors import MalformedObject
from .codecs import Codec, register_codec

# AddedToken's constructor arguments, as its __getstate__ names them.
_ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


class TokenizerCodec(Codec):
    """``tokenizers.Tokenizer``: its ``tokenizer.json`` text."""

    tag = "hf.tokenizer"
    type_names = ("tokenizers.Tokenizer",)

    def encode(self, tokenizer: Any, enc: Any) -> dict[str, Any]:
        return {"json": enc.node(tokenizer.to_str())}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from tokenizers import Tokenizer

        text = dec.node(node["json"])
        if type(text) is not str:
            raise MalformedObject("a stored Tokenizer is not JSON text")
        return Tokenizer.from_str(text)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "Tokenizer"}


class AddedTokenCodec(Codec):
    """``tokenizers.AddedToken``: its content and flags."""

    tag = "hf.added_token"
    type_names = ("tokenizers.AddedToken",)

    def encode(self, token: Any, enc: Any) -> dict[str, Any]:
        state = token.__getstate__()
        return {"content": state["content"], **{k: bool(state[k]) for k in _ADDED_TOKEN_FLAGS}}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from tokenizers import AddedToken

        content = node.get("content")
        flags = {k: node.get(k) for k in _ADDED_TOKEN_FLAGS}
        if type(content) is not str or any(type(v) is not bool for v in flags.values()):
            raise MalformedObject("a stored AddedToken is not text with boolean flags")
        return AddedToken(content, **flags)


register_codec(TokenizerCodec())
register_codec(AddedTokenCodec())
