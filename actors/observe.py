"""Watching and steering a session: observers that see what happened, and hooks around
each LLM call and each tool call that may inspect, change, veto (raise
``HookVetoError``) or answer it themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._session._errors import HookVetoError

__all__ = [
    "HookContext",
    "HookVetoError",
    "LLMCallNext",
    "LLMHook",
    "Observer",
    "ToolCallNext",
    "ToolHook",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._session._observe import (
        HookContext,
        LLMCallNext,
        LLMHook,
        Observer,
        ToolCallNext,
        ToolHook,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._session._observe": (
                "HookContext",
                "LLMCallNext",
                "LLMHook",
                "Observer",
                "ToolCallNext",
                "ToolHook",
            ),
        },
    )
