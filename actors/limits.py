"""The fleet limiter toward model providers; for now, the errors of its refusals."""

from __future__ import annotations

from ._limiter._errors import LimitError, LimitTooLargeError

__all__ = [
    "LimitError",
    "LimitTooLargeError",
]
