"""Structured logs: one JSON object per line, with the span of the current trace if any."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO, final

import orjson

_RESERVED = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)
_ENV = "POWERTRIO_LOG_FORMAT"


@final
class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line: time (epoch seconds), level, logger, message,
    the exception's traceback if any, and every ``extra=`` field the call gave.

    The fields of ``extra`` that JSON cannot hold are written as their ``repr``.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        return orjson.dumps(entry, default=repr).decode()


def use_json_logs(
    enabled: bool | None = None, *, level: int = logging.INFO, stream: TextIO | None = None
) -> bool:
    """Switch the root logger to JSON lines (one handler to ``stream``, stderr by default).

    Args:
        enabled (bool | None): ``None`` reads the switch from the environment:
            ``POWERTRIO_LOG_FORMAT=json``.
        level (int): the root logger's level when switched on.
        stream: where the lines go.

    Returns:
        bool: whether JSON logs are now on (nothing is changed when off).
    """
    if enabled is None:
        enabled = os.environ.get(_ENV, "").strip().lower() == "json"
    if not enabled:
        return False
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return True
