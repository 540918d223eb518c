"""The bookie's event log lines: ``event key=value ...``, with the fields riding on the record
as ``record.fields``. It only formats and logs; it never decides what happened or acts on it."""

from __future__ import annotations

import logging

__all__ = ["log_event"]


def log_event(logger: logging.Logger, level: int, event: str, /, **fields: object) -> None:
    """Log ``event key=value ...`` on ``logger``; the fields also ride on the record as
    ``record.fields`` (and the event as ``record.event``)."""

    def text(value: object) -> str:
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        s = str(value)
        return repr(s) if not s or any(c.isspace() for c in s) else s

    pairs = "".join(f" {key}={text(value)}" for key, value in fields.items())
    logger.log(level, "%s%s", event, pairs, extra={"event": event, "fields": fields})
