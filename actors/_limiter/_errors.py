"""Errors of the fleet limiter (``limit.*``); ``actors.limits`` exports them."""

from __future__ import annotations

from protocols.errors import PowertrioError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "LimitError",
    "LimitTooLargeError",
]


class LimitError(PowertrioError):
    """The fleet limiter refused a call."""

    code = "limit"


class LimitTooLargeError(LimitError, ValueError):
    """A call's token estimate alone exceeds a tokens-per-minute limit: no window could
    ever grant it, so it fails at once instead of waiting forever."""

    code = "limit.too_large"

    def __init__(self, bucket: str, tokens: int, limit: int) -> None:
        self.bucket = bucket
        self.tokens = tokens
        self.limit = limit
        super().__init__(
            f"a call estimated at {tokens} tokens can never fit {bucket!r}, whose limit is "
            f"{limit} tokens per minute: lower the request's max_tokens or its context, "
            "or raise the limit"
        )


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.limits", globals())
del _fixup
