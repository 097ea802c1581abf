"""Structured logging through the standard :mod:`logging` module.

The library logs to the ``chime_consumer`` logger with lowercase messages and the facts
as ``extra`` fields (``task_id``, ``job``, ``attempt``, ``group``, ``error``, ...), never
a password. :class:`JsonFormatter` writes each record as one JSON object with those
fields, for log pipelines::

    handler = logging.StreamHandler()
    handler.setFormatter(chime_consumer.JsonFormatter())
    logging.getLogger("chime_consumer").addHandler(handler)
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any, Dict

log = logging.getLogger("chime_consumer")

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def fields_of(record: logging.LogRecord) -> Dict[str, Any]:
    """The ``extra`` fields a record carries."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``at``, ``level``, ``logger``, ``message`` and the
    record's ``extra`` fields (values that are not JSON are written as text)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: Dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(fields_of(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
