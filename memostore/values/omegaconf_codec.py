"""OmegaConf ``DictConfig`` and ``ListConfig`` (Hydra configs, Lightning hparams) as values.

Registered by type name, so importing memostore never imports omegaconf.

A config is stored as what ``OmegaConf.to_container(resolve=False)`` gives
(plain dicts and lists, interpolations kept as their ``${...}`` text) and its
flags (``struct``, ``readonly``), and restored by ``OmegaConf.create`` of that
container with those flags: omegaconf's own builder of a config from data,
which names no code. A structured config (one typed by a dataclass or attrs
class) carries its class and validation beyond that data, and is encoded as
pickling sees it, as before: it keys all the same, and restores only where
the user allowed omegaconf's classes (``memostore.add_safe_globals``).
"""

from __future__ import annotations

from typing import Any

from ..errors import MalformedObject
from .codecs import Codec, register_codec


class OmegaConfCodec(Codec):
    tag = "omegaconf"
    type_names = ("omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig")

    def encode(self, cfg: Any, enc: Any) -> dict[str, Any]:
        from omegaconf import OmegaConf

        if _structured(cfg):
            return {"pickled": enc.node_by_reduce(cfg)}
        container = OmegaConf.to_container(cfg, resolve=False, enum_to_str=False)
        flags = {k: v for k, v in (cfg._metadata.flags or {}).items() if v is not None}
        return {"data": enc.node(container), "flags": enc.node(flags)}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        from omegaconf import OmegaConf

        if "pickled" in node:
            return dec.node(node["pickled"])
        data, flags = dec.node(node["data"]), dec.node(node["flags"])
        if type(data) not in (dict, list) or type(flags) is not dict:
            raise MalformedObject("a stored OmegaConf config is not a dict or list with flags")
        if any(type(k) is not str or type(v) is not bool for k, v in flags.items()):
            raise MalformedObject("the stored flags of an OmegaConf config are not booleans")
        return OmegaConf.create(data, flags=flags)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "OmegaConf config"}


def _structured(cfg: Any) -> bool:
    """Whether *cfg* or a config inside it is typed by a class (a structured config)."""
    from omegaconf import DictConfig, ListConfig

    stack = [cfg]
    while stack:
        item = stack.pop()
        if isinstance(item, DictConfig):
            if item._metadata.object_type not in (None, dict):
                return True
            stack.extend(item._content.values() if isinstance(item._content, dict) else ())
        elif isinstance(item, ListConfig) and isinstance(item._content, list):
            stack.extend(item._content)
    return False


register_codec(OmegaConfCodec())
