"""Datasets: any ``torch.utils.data.Dataset``, each a document of its own.

Node (tag ``torch.dataset``, a standalone document), following the pickle
protocol (``__reduce_ex__``), so user classes, ``Subset``, ``TensorDataset``,
``ConcatDataset``, datapipes and classes made at run time are all covered::

    cls | fn      the class (``__newobj__`` reductions) or the rebuild function,
                  as digest-pinned code refs; local and ``__main__`` classes are
                  stored by value beside the result
    args          constructor arguments of the reduction
    listitems, dictitems, state   as pickle gives them

A dataset inside another (``Subset.dataset``, ``ConcatDataset.datasets``) is
a document of its own too, so a big dataset is written once and every split of
it refers to it. A long list of ints in a dataset's state (``Subset.indices``)
is stored as an int64 blob rather than as JSON.

Caching rule: the digest of a dataset is reused while its fingerprint is
unchanged; the fingerprint covers its class and its ``__dict__`` recursively
(tensors by version counter, lists and dicts by content; see
``fingerprints.py``). A dataset holding something whose changes cannot be seen
(a numpy array, an object with custom pickling) is re-hashed on every use.
"""

from __future__ import annotations

import copyreg
from collections.abc import Hashable
from typing import Any

import torch

from memostore.errors import DecodeError, EncodeError, MemostoreError
from memostore.odb.objects import canonical_json, digest_bytes
from memostore.values.codecs import Codec
from memostore.values.decoding import add_dict_items, add_list_items, write_state

from .fingerprints import fingerprint_or_none
from .summaries import summarize

_SESSION_DATASETS = "torch.datasets"
# Lists of ints at least this long in a dataset's state become an int64 blob.
INT_LIST_MIN = 1024
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class IntList(list):  # type: ignore[type-arg]
    """Marks a long list of ints to be stored as an int64 blob (restored as a list)."""


class IntListCodec(Codec):
    """A long list of ints as one int64 tensor blob."""

    tag = "torch.int_list"
    types = (IntList,)

    def encode(self, values: IntList, enc: Any) -> dict[str, Any]:
        return {"values": enc.node(torch.tensor(values, dtype=torch.int64))}

    def decode(self, node: dict[str, Any], dec: Any) -> list[int]:
        return dec.node(node["values"]).tolist()

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}


def _compact(state: Any) -> Any:
    """*state* with long int lists marked for blob storage (a shallow copy)."""
    if type(state) is not dict:
        return state
    out = {}
    for key, value in state.items():
        if (
            type(value) is list
            and len(value) >= INT_LIST_MIN
            and set(map(type, value)) == {int}
            and min(value) >= _INT64_MIN
            and max(value) <= _INT64_MAX
        ):
            value = IntList(value)
        out[key] = value
    return out


class DatasetCodec(Codec):
    """Any ``torch.utils.data.Dataset`` (map-style or iterable)."""

    tag = "torch.dataset"
    types = (torch.utils.data.Dataset,)
    standalone = True

    def encode(self, ds: Any, enc: Any) -> dict[str, Any]:
        try:
            reducer = copyreg.dispatch_table.get(type(ds))
            rv = reducer(ds) if reducer is not None else ds.__reduce_ex__(4)
        except Exception as exc:
            raise EncodeError(
                f"cannot store the dataset {type(ds).__qualname__}: it does not pickle ({exc}); "
                "hold its data in tensors or lists, or define __getstate__"
            ) from exc
        if not isinstance(rv, tuple) or not 2 <= len(rv) <= 6:
            raise EncodeError(f"{type(ds).__qualname__}.__reduce_ex__ returned {rv!r}")
        fn, args, state, listitems, dictitems = (*rv, None, None, None, None)[:5]
        node: dict[str, Any] = {}
        if fn is copyreg.__newobj__ and args and isinstance(args[0], type):
            node["cls"] = enc.code(args[0])
            node["args"] = [enc.node(a) for a in args[1:]]
        else:
            node["fn"] = enc.node(fn)
            node["args"] = [enc.node(a) for a in args]
        if listitems is not None:
            node["listitems"] = [enc.node(x) for x in listitems]
        if dictitems is not None:
            node["dictitems"] = enc.node(dict(dictitems))
        if state is not None:
            node["state"] = enc.node(_compact(state))
        return node

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        # One dataset referenced from several places (the base of two Subsets)
        # restores as one object, read once: equal content, same document.
        restored = dec.session.setdefault(_SESSION_DATASETS, {})
        key = digest_bytes(canonical_json(node))
        ds = restored.get(key)
        if ds is None:
            ds = restored[key] = self._rebuild(node, dec)
        return ds

    def _rebuild(self, node: dict[str, Any], dec: Any) -> Any:
        if "cls" in node:
            cls = dec.code(node["cls"])
            args = [dec.node(a) for a in node["args"]]
            dec.check_inert(args, "an argument of __new__")
            ds = cls.__new__(cls, *args)
        else:
            # Called only if the gate lets it be (a registry callable or a class of the
            # user's code), never a callable decoded from the value itself.
            fn = dec.callee(node["fn"])
            args = [dec.node(a) for a in node["args"]]
            dec.check_inert(args, "an argument of a call")
            try:
                ds = fn(*args)
            except MemostoreError:
                raise
            except Exception as exc:
                raise DecodeError(f"cannot rebuild a dataset with {fn!r}: {exc}") from exc
        if "listitems" in node:
            add_list_items(ds, [dec.node(item) for item in node["listitems"]])
        if "dictitems" in node:
            items = dec.node(node["dictitems"])
            if type(items) is not dict:
                raise DecodeError("a stored dataset's dict items are not a dict")
            add_dict_items(ds, list(items.items()))
        if "state" in node:
            write_state(ds, dec.node(node["state"]))
        return ds

    def fingerprint(self, ds: Any) -> Hashable | None:
        return fingerprint_or_none(ds)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}


DATA_CODECS = [DatasetCodec(), IntListCodec()]
