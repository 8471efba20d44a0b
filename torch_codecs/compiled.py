"""``torch.compile``d modules: the original module, and the fact that it was compiled.

``torch.compile(model)`` returns an ``OptimizedModule`` wrapping the module
(``_orig_mod``) with a per-process compiler context: its compiled graphs and
guards are caches of this process, not part of the value. It is stored as its
original module (node ``{"module": ...}``, the module's own document, so it
keys by the module's content: a compiled and a plain model of equal weights
share every tensor blob) and restored by compiling that module again, which
is lazy: wrapping costs nothing, and compilation happens at the first call,
as it did for the value stored. The options given to ``torch.compile``
(``mode``, ``backend``, ``fullgraph``, ``dynamic``) are not stored: the
restored module is compiled with the defaults.

Registered by type name, so that storing a plain module never imports
``torch._dynamo``.
"""

from __future__ import annotations

from typing import Any

import torch

from memostore.errors import MalformedObject
from memostore.values.codecs import Codec


class CompiledModuleCodec(Codec):
    """``torch._dynamo.eval_frame.OptimizedModule``, through its ``_orig_mod``."""

    tag = "torch.compiled"
    type_names = ("torch._dynamo.eval_frame.OptimizedModule",)

    def encode(self, compiled: Any, enc: Any) -> dict[str, Any]:
        return {"module": enc.node(compiled._orig_mod)}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        module = dec.node(node["module"])
        if not isinstance(module, torch.nn.Module):
            raise MalformedObject("a stored compiled module does not hold a module")
        return torch.compile(module)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "compiled module"}

    def assign(self, target: Any, source: Any, plan: Any) -> bool:
        # The compiler's caches stay the caller's: only the module it wraps is updated.
        plan.update(target._orig_mod, source._orig_mod, "the module a compiled module wraps")
        return True
