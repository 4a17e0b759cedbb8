"""The fleet limiter: its errors."""

from __future__ import annotations

from ._limiter_errors import LimitError, LimitTooLargeError

__all__ = [
    "LimitError",
    "LimitTooLargeError",
]
