"""Pieces under the session, for those who build their own loop: the tool runner, the one
transform that makes a transcript provider-valid, and the search behind the recall tool
(``search_history``) for reading a session's compacted history from Python.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._session._recall import RecallHit, search_history
from ._session._transcript import ValidTranscript, is_provider_valid, provider_valid
from ._tools._runner import CallWrapper, ToolRunner, open_tool_runner, run_tool_calls

__all__ = [
    "CallWrapper",
    "RecallHit",
    "ToolRunner",
    "ValidTranscript",
    "is_provider_valid",
    "open_tool_runner",
    "provider_valid",
    "run_tool_calls",
    "search_history",
]

_fixup(__name__, globals())
del _fixup
