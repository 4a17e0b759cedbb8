"""The agents: the session actor, agent specs, built-in tools, the blackboard."""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._agents import AgentSpec as AgentSpec
from ._agents import Lifecycle as Lifecycle
from ._agents import spawn_agent_tool as spawn_agent_tool
from ._blackboard import Board as Board
from ._blackboard import open_board as open_board
from ._board_events import BoardChanged as BoardChanged
from ._board_events import BoardState as BoardState
from ._board_events import BoardStatistics as BoardStatistics
from ._board_events import Entry as Entry
from ._board_events import EntryDeleted as EntryDeleted
from ._board_events import EntryPut as EntryPut
from ._board_tools import board_tools as board_tools
from ._budget import Budget as Budget
from ._budget import Price as Price
from ._observe import DeltaReceived as DeltaReceived
from ._observe import HookContext as HookContext
from ._observe import LLMCallFinished as LLMCallFinished
from ._observe import LLMCallNext as LLMCallNext
from ._observe import LLMHook as LLMHook
from ._observe import Observation as Observation
from ._observe import Observer as Observer
from ._observe import RoundBegan as RoundBegan
from ._observe import RunBegan as RunBegan
from ._observe import RunEnded as RunEnded
from ._observe import ToolCallBegan as ToolCallBegan
from ._observe import ToolCallFinished as ToolCallFinished
from ._observe import ToolCallNext as ToolCallNext
from ._observe import ToolHook as ToolHook
from ._observe import UsageUpdated as UsageUpdated
from ._replay import SessionReplay as SessionReplay
from ._replay import delete_session as delete_session
from ._replay import fork_session as fork_session
from ._replay import replay_session as replay_session
from ._session import SessionActor as SessionActor
from ._session_events import ActiveRun as ActiveRun
from ._session_events import AssistantRecorded as AssistantRecorded
from ._session_events import CancelRequested as CancelRequested
from ._session_events import ChildFinished as ChildFinished
from ._session_events import ChildSpawned as ChildSpawned
from ._session_events import FollowUpReceived as FollowUpReceived
from ._session_events import FollowUpsInjected as FollowUpsInjected
from ._session_events import HumanAnswered as HumanAnswered
from ._session_events import HumanRequested as HumanRequested
from ._session_events import HumanRequestKind as HumanRequestKind
from ._session_events import InputQueued as InputQueued
from ._session_events import OutputRejected as OutputRejected
from ._session_events import RequestHeader as RequestHeader
from ._session_events import RunFinished as RunFinished
from ._session_events import RunResult as RunResult
from ._session_events import RunStarted as RunStarted
from ._session_events import RunStatus as RunStatus
from ._session_events import SessionCreated as SessionCreated
from ._session_events import SessionState as SessionState
from ._session_events import ToolFinished as ToolFinished
from ._session_events import ToolStarted as ToolStarted
from ._session_handle import Session as Session
from ._session_spawn import spawn_agent as spawn_agent
from ._session_spawn import spawn_session as spawn_session
from ._session_steps import BusyPolicy as BusyPolicy
from ._session_steps import ask_human as ask_human
from ._tool_runner import CallWrapper as CallWrapper
from ._tool_runner import ToolRunner as ToolRunner
from ._tool_runner import open_tool_runner as open_tool_runner
from ._tool_runner import run_tool_calls as run_tool_calls
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolKind as ToolKind
from ._tools import ToolRegistry as ToolRegistry
from ._tools import tool as tool
from ._transcript import ValidTranscript as ValidTranscript
from ._transcript import is_provider_valid as is_provider_valid
from ._transcript import provider_valid as provider_valid
from ._wakeup_tools import wakeup_tools as wakeup_tools

_fixup(__name__, globals())
del _fixup
