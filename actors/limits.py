"""The fleet limiter toward model providers: requests, tokens per minute and concurrency
per provider, tenant or agent tree, granted by an actor whose grants are events.

``spawn_limiter`` starts it with a ``LimiterPolicy`` of ``Limit`` values; a session asks it
through ``limiter.hook(...)`` among its ``llm_hooks``. See ``docs/limits.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._limiter._errors import LimitError, LimitTooLargeError

__all__ = [
    "Limit",
    "LimitError",
    "LimitTooLargeError",
    "Limiter",
    "LimiterPolicy",
    "LimiterStatistics",
    "spawn_limiter",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._limiter._actor import Limiter, LimiterStatistics, spawn_limiter
    from ._limiter._core import Limit, LimiterPolicy
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._limiter._actor": (
                "Limiter",
                "LimiterStatistics",
                "spawn_limiter",
            ),
            "._limiter._core": (
                "Limit",
                "LimiterPolicy",
            ),
        },
    )
