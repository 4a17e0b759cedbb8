"""The agents: the session actor, agent specs, built-in tools, the blackboard."""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

from ._session import Session as Session
from ._session import SessionActor as SessionActor
from ._session import spawn_session as spawn_session
from ._session_events import ActiveRun as ActiveRun
from ._session_events import AssistantRecorded as AssistantRecorded
from ._session_events import InputQueued as InputQueued
from ._session_events import RunFinished as RunFinished
from ._session_events import RunResult as RunResult
from ._session_events import RunStarted as RunStarted
from ._session_events import RunStatus as RunStatus
from ._session_events import SessionCreated as SessionCreated
from ._session_events import SessionState as SessionState
from ._session_events import ToolFinished as ToolFinished
from ._session_events import ToolStarted as ToolStarted
from ._tool_runner import ToolRunner as ToolRunner
from ._tool_runner import open_tool_runner as open_tool_runner
from ._tool_runner import run_tool_calls as run_tool_calls
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolKind as ToolKind
from ._tools import ToolRegistry as ToolRegistry
from ._tools import tool as tool
from ._transcript import is_provider_valid as is_provider_valid
from ._transcript import provider_valid as provider_valid

_fixup(__name__, globals())
del _fixup
