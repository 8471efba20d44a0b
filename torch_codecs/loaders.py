"""``DataLoader``: keyed by what it yields, restored with all of its settings.

Node (tag ``torch.dataloader``, inline in the document that holds it)::

    dataset          the dataset (a document of its own)
    batch_size, drop_last
    collate_fn, worker_init_fn    code refs (or null)
    sampler          {"kind": "sequential"} | {"kind": "infinite"}
                     | {"kind": "random", "replacement", "num_samples", "generator"}
                     | {"kind": "custom", "sampler": <node>}
    batch_sampler    a user batch sampler, or null when the loader made its own
    generator        the loader's explicit generator (its state), or null
    cls, extra       for DataLoader subclasses: the class and its own attributes

The digest is that of the node, so it covers exactly what changes the batches
yielded. A ``RandomSampler`` without an explicit generator draws its seed from
the global RNG at each epoch; the global RNG is not part of the digest (a
loader keys the same whatever ``torch.manual_seed`` was called with).

Settings that change how batches are produced but not which ones
(``num_workers``, ``pin_memory``, ``pin_memory_device``, ``timeout``,
``prefetch_factor``, ``persistent_workers``, ``in_order``,
``multiprocessing_context``) are kept out of the node: they travel beside the
value, in the evaluation's payloads (keyed by the node's digest), and the
restored loader gets them back. Where they are missing (e.g. two loaders that
differ only in them, in one value: the last one stored wins), the restored
loader uses DataLoader's defaults.
"""

from __future__ import annotations

import json
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from memostore.odb.objects import canonical_json, digest_bytes
from memostore.values.codecs import Codec

from .summaries import summarize

_PAYLOAD_PREFIX = "torch.dataloader:"
_RUNTIME = (
    "num_workers",
    "pin_memory",
    "pin_memory_device",
    "timeout",
    "prefetch_factor",
    "persistent_workers",
    "in_order",
)
_STANDARD_ATTRS = frozenset(
    {
        "dataset",
        "batch_size",
        "drop_last",
        "sampler",
        "batch_sampler",
        "generator",
        "collate_fn",
        "worker_init_fn",
        "_dataset_kind",
        "_IterableDataset_len_called",
        "_iterator",
        "_DataLoader__initialized",
        "_DataLoader__multiprocessing_context",
        *_RUNTIME,
    }
)


def _strip_labels(node: Any) -> Any:
    """*node* without identity labels, which the encoder may add after the fact."""
    if isinstance(node, list):
        if node and isinstance(node[0], dict) and node[0].get("$") == "label":
            node = node[1:]
        return [_strip_labels(x) for x in node]
    if isinstance(node, dict):
        return {k: _strip_labels(v) for k, v in node.items() if k not in ("&", "$")}
    return node


def _payload_key(fields: dict[str, Any]) -> str:
    return _PAYLOAD_PREFIX + digest_bytes(canonical_json(_strip_labels(fields)))


class DataLoaderCodec(Codec):
    """``torch.utils.data.DataLoader`` and its subclasses."""

    tag = "torch.dataloader"
    types = (DataLoader,)

    def encode(self, loader: DataLoader, enc: Any) -> dict[str, Any]:
        node: dict[str, Any] = {}
        if type(loader) is not DataLoader:
            node["cls"] = enc.code(type(loader))
        node["dataset"] = enc.node(loader.dataset)
        node["batch_size"] = loader.batch_size
        node["drop_last"] = loader.drop_last
        node["collate_fn"] = enc.node(loader.collate_fn)
        node["worker_init_fn"] = enc.node(loader.worker_init_fn)
        node["generator"] = enc.node(loader.generator)
        node["sampler"] = _encode_sampler(loader, enc)
        node["batch_sampler"] = _encode_batch_sampler(loader, enc)
        if "cls" in node:
            extra = {k: v for k, v in loader.__dict__.items() if k not in _STANDARD_ATTRS}
            node["extra"] = enc.node(extra)
        runtime = canonical_json(_runtime_settings(loader))
        enc.payloads[_payload_key(node)] = enc.sink.put_blob(lambda: (runtime,), len(runtime))
        return node

    def decode(self, node: dict[str, Any], dec: Any) -> DataLoader:
        cls = dec.code(node["cls"]) if "cls" in node else DataLoader
        dataset = dec.node(node["dataset"])
        collate_fn = dec.node(node["collate_fn"])
        worker_init_fn = dec.node(node["worker_init_fn"])
        generator = dec.node(node["generator"])
        sampler = _decode_sampler(node["sampler"], dataset, dec)
        batch_sampler = None if node["batch_sampler"] is None else dec.node(node["batch_sampler"])
        extra = dec.node(node["extra"]) if "extra" in node else {}
        kwargs: dict[str, Any] = {
            "collate_fn": collate_fn,
            "worker_init_fn": worker_init_fn,
            "generator": generator,
        }
        if batch_sampler is not None:
            kwargs["batch_sampler"] = batch_sampler
        else:
            kwargs.update(
                batch_size=node["batch_size"], drop_last=node["drop_last"], sampler=sampler
            )
        kwargs.update(_load_runtime(node, dec))
        loader = cls.__new__(cls)
        DataLoader.__init__(loader, dataset, **kwargs)
        loader.__dict__.update(extra)
        return loader

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return summarize(node, reader) or {"type": self.tag}


def _runtime_settings(loader: DataLoader) -> dict[str, Any]:
    out = {name: getattr(loader, name) for name in _RUNTIME if hasattr(loader, name)}
    context = loader.multiprocessing_context
    if context is not None:
        out["multiprocessing_context"] = context.get_start_method()
    return out


def _load_runtime(node: dict[str, Any], dec: Any) -> dict[str, Any]:
    key = _payload_key(node)
    blob = dec.payloads.get(key)
    if blob is None:
        return {}
    settings = json.loads(dec.blob_bytes(blob))
    if not settings.get("pin_memory_device"):
        settings.pop("pin_memory_device", None)  # deprecated: pass only when it was set
    return settings


def _encode_sampler(loader: DataLoader, enc: Any) -> dict[str, Any]:
    sampler = loader.sampler
    cls = type(sampler)
    if cls is SequentialSampler and sampler.data_source is loader.dataset:
        return {"kind": "sequential"}
    if cls is RandomSampler and sampler.data_source is loader.dataset:
        return {
            "kind": "random",
            "replacement": sampler.replacement,
            "num_samples": sampler._num_samples,
            "generator": enc.node(sampler.generator),
        }
    if cls.__name__ == "_InfiniteConstantSampler":
        return {"kind": "infinite"}
    return {"kind": "custom", "sampler": enc.node(sampler)}


def _decode_sampler(descr: dict[str, Any], dataset: Any, dec: Any) -> Any:
    kind = descr["kind"]
    if kind in ("sequential", "infinite"):
        return None
    if kind == "random":
        generator = dec.node(descr["generator"])
        return RandomSampler(
            dataset,
            replacement=descr["replacement"],
            num_samples=descr["num_samples"],
            generator=generator,
        )
    return dec.node(descr["sampler"])


def _encode_batch_sampler(loader: DataLoader, enc: Any) -> Any:
    bs = loader.batch_sampler
    if bs is None:
        return None
    made_by_loader = (
        type(bs) is BatchSampler
        and bs.sampler is loader.sampler
        and bs.batch_size == loader.batch_size
        and bs.drop_last == loader.drop_last
    )
    return None if made_by_loader else enc.node(bs)
