"""What a standalone run records of the script that made it: its arguments and its source.

A script that only swapped ``from torch.utils.tensorboard import
SummaryWriter`` for memostore's has no memoised call, so no call records its
arguments or code. Its run evaluation records them instead, so that ``memostore
diff`` tells two runs apart as it tells two calls apart:

* ``args``: an arguments document holding the hyper-parameters ``add_hparams``
  logged (by name) and ``argv``, the script's command-line arguments
  (``sys.argv[1:]``; a hyper-parameter named ``argv`` keeps the name);
* ``code``: a code document of the script, ``run:<script>``, whose one
  dependency is the script's source; its digest (``code_digest``) is that of
  the source file's bytes.

Both are read when the run's journal opens (its first point), so a script
edited while it runs is recorded as it started. A script whose file cannot be
read (``python -c``, a notebook) records its arguments alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from ..odb.objects import KIND_CODE, Doc, digest_bytes


class EvalContext(Protocol):
    """What this module needs of a run's context (a ``records.context.EvalContext``)."""

    store: Any
    function: str
    hparams: dict[str, Any]
    state: dict[str, Any]

    def add_finalizer(self, fn: Callable[[Any, str], dict[str, Any]]) -> None: ...


STATE_KEY = "memostore.metrics.script"
# A script bigger than this is no script: its source is not kept.
_SOURCE_MAX = 4 << 20


def _source(path: str) -> bytes | None:
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _SOURCE_MAX:
            return None
        with open(path, "rb") as f:
            return f.read(_SOURCE_MAX + 1)
    except OSError:
        return None


def begin(ctx: EvalContext) -> None:
    """Note the script's arguments and source now, and record them when *ctx* ends."""
    script = sys.argv[0] if sys.argv else ""
    ctx.state[STATE_KEY] = (script, list(sys.argv[1:]), _source(script) if script else None)
    ctx.add_finalizer(finalize)


def code_document(symbol: str, script: str, source: bytes) -> Doc:
    """The code document of a script: one dependency, its source (as ``diff`` shows it)."""
    digest = digest_bytes(source)
    text = source.decode("utf-8", errors="replace")
    dep = {"symbol": os.path.basename(script), "kind": "script", "digest": digest, "source": text}
    return Doc(KIND_CODE, {"symbol": symbol, "digest": digest, "deps": [dep]})


def finalize(ctx: EvalContext, status: str) -> dict[str, Any]:
    """The run record's ``args`` and ``code`` fields (stored now), or ``{}``."""
    noted = ctx.state.get(STATE_KEY)
    if noted is None:
        return {}
    script, argv, source = noted
    from ..values.encoding import Encoder, StoreSink

    fields: dict[str, Any] = {}
    items = [(str(k), v) for k, v in ctx.hparams.items()]
    if "argv" not in ctx.hparams:
        items.append(("argv", argv))
    sink = StoreSink(ctx.store.objects)
    try:
        fields["args"] = Encoder(sink, cache=None, lineage=None).encode_mapping(items)
        sink.finish()
    except BaseException:
        sink.abort()
        raise
    if source is not None:
        doc = code_document(ctx.function, script, source)
        fields["code"] = ctx.store.objects.add_doc(doc)
        fields["code_digest"] = doc.body["digest"]
    return fields


__all__ = ["begin", "code_document", "finalize"]
