"""``logging.Logger`` objects as values: by name, restored as ``logging.getLogger(name)``.

A logger is a process-wide service that ``logging.getLogger(name)`` finds or
creates: what it is (its level, its handlers) is the program's logging set-up,
not the state of the object holding it. A class that keeps ``self.log =
logging.getLogger(__name__)`` is therefore keyed by the logger's name alone,
and restores holding this process's logger of that name, as unpickling does
(``Logger.__reduce__`` names ``getLogger``), without running anything the
decoding allowlist would have to admit.

Registered by type name, so importing memostore does not import ``logging``
for it (it is imported anyway by then, in practice).
"""

from __future__ import annotations

from typing import Any

from .codecs import Codec, register_codec


class LoggerCodec(Codec):
    """``logging.Logger`` (the root logger and ``Logger`` subclasses included), by name."""

    tag = "logger"
    type_names = ("logging.Logger",)
    by_reference = True

    def encode(self, logger: Any, enc: Any) -> dict[str, Any]:
        import logging

        return {"name": None if isinstance(logger, logging.RootLogger) else logger.name}

    def decode(self, node: dict[str, Any], dec: Any) -> Any:
        import logging

        name = node.get("name")
        return logging.getLogger(name if isinstance(name, str) else None)

    def summarize(self, node: dict[str, Any], reader: Any) -> dict[str, Any]:
        return {"type": "logger", "name": node.get("name") or "root"}


register_codec(LoggerCodec())
