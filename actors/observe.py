"""Watching and steering a session: the hook's veto."""

from __future__ import annotations

from ._session._errors import HookVetoError

__all__ = [
    "HookVetoError",
]
