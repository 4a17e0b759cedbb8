"""Pieces under the session, for those who build their own loop: the tool runner, and
the one transform that makes a transcript provider-valid.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._session._transcript import ValidTranscript, is_provider_valid, provider_valid
from ._tools._runner import CallWrapper, ToolRunner, open_tool_runner, run_tool_calls

__all__ = [
    "CallWrapper",
    "ToolRunner",
    "ValidTranscript",
    "is_provider_valid",
    "open_tool_runner",
    "provider_valid",
    "run_tool_calls",
]

_fixup(__name__, globals())
del _fixup
