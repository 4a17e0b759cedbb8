"""The agents: sessions, agent specs, built-in tools, MCP tool servers, the blackboard,
durable workflows, replay and fork.

The events sessions and boards record, and what observers see live, are in
``actors.events``; the tool runner and the transcript's pairing transform in
``actors.lowlevel``; the agent test kit in ``actors.testing``; the command line in
``actors.cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

# Names load on first use, so importing the package costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._agents import AgentSpec as AgentSpec
    from ._agents import Lifecycle as Lifecycle
    from ._agents import spawn_agent_tool as spawn_agent_tool
    from ._blackboard import Board as Board
    from ._blackboard import open_board as open_board
    from ._board_events import BoardChanged as BoardChanged
    from ._board_events import BoardState as BoardState
    from ._board_events import BoardStatistics as BoardStatistics
    from ._board_events import Entry as Entry
    from ._board_tools import board_tools as board_tools
    from ._budget import Budget as Budget
    from ._budget import Price as Price
    from ._cluster import ClusterSession as ClusterSession
    from ._cluster import NodeHost as NodeHost
    from ._cluster import host_node as host_node
    from ._context import ContextPolicy as ContextPolicy
    from ._context import estimate_tokens as estimate_tokens
    from ._cron import CronSchedule as CronSchedule
    from ._fleet_control import ApplyReport as ApplyReport
    from ._fleet_control import apply_fleet as apply_fleet
    from ._fleet_control import read_fleet_status as read_fleet_status
    from ._fleet_control import request_drain as request_drain
    from ._fleet_control import set_paused as set_paused
    from ._fleet_events import AgentStatus as AgentStatus
    from ._fleet_events import FleetStatus as FleetStatus
    from ._fleet_events import NodeStatus as NodeStatus
    from ._fleet_events import fleet_status as fleet_status
    from ._fleet_file import AgentDecl as AgentDecl
    from ._fleet_file import FleetFile as FleetFile
    from ._fleet_file import ScheduleDecl as ScheduleDecl
    from ._fleet_file import code_version as code_version
    from ._fleet_file import load_tool as load_tool
    from ._fleet_file import parse_fleet_file as parse_fleet_file
    from ._fleet_node import FLEET_PLACED as FLEET_PLACED
    from ._fleet_node import FleetNode as FleetNode
    from ._fleet_node import NodeService as NodeService
    from ._limiter import Limiter as Limiter
    from ._limiter import LimiterStatistics as LimiterStatistics
    from ._limiter import spawn_limiter as spawn_limiter
    from ._limiter_core import Limit as Limit
    from ._limiter_core import LimiterPolicy as LimiterPolicy
    from ._mcp import McpServer as McpServer
    from ._mcp import McpTransport as McpTransport
    from ._mcp import mcp_http as mcp_http
    from ._mcp import mcp_stdio as mcp_stdio
    from ._mcp import mcp_tools as mcp_tools
    from ._memory_tools import memory_tools as memory_tools
    from ._observe import HookContext as HookContext
    from ._observe import LLMCallNext as LLMCallNext
    from ._observe import LLMHook as LLMHook
    from ._observe import Observer as Observer
    from ._observe import ToolCallNext as ToolCallNext
    from ._observe import ToolHook as ToolHook
    from ._recall import RecallHit as RecallHit
    from ._recall import recall_tool as recall_tool
    from ._recall import search_history as search_history
    from ._replay import SessionReplay as SessionReplay
    from ._replay import delete_session as delete_session
    from ._replay import fork_session as fork_session
    from ._replay import replay_session as replay_session
    from ._session_errors import ForeignAgentError as ForeignAgentError
    from ._session_errors import HumanRequestNotFoundError as HumanRequestNotFoundError
    from ._session_errors import NoOpenRunError as NoOpenRunError
    from ._session_errors import OutputInvalidError as OutputInvalidError
    from ._session_errors import OutputTypeError as OutputTypeError
    from ._session_errors import SessionBusyError as SessionBusyError
    from ._session_errors import SessionError as SessionError
    from ._session_events import HumanRequestKind as HumanRequestKind
    from ._session_events import RunResult as RunResult
    from ._session_events import RunStatus as RunStatus
    from ._session_events import SessionState as SessionState
    from ._session_handle import Session as Session
    from ._session_spawn import spawn_agent as spawn_agent
    from ._session_spawn import spawn_session as spawn_session
    from ._session_steps import BusyPolicy as BusyPolicy
    from ._session_steps import ask_human as ask_human
    from ._tools import Tool as Tool
    from ._tools import ToolContext as ToolContext
    from ._tools import ToolKind as ToolKind
    from ._tools import ToolRegistry as ToolRegistry
    from ._tools import tool as tool
    from ._wakeup_tools import wakeup_tools as wakeup_tools
    from ._workflow import WorkflowContext as WorkflowContext
    from ._workflow import WorkflowFunction as WorkflowFunction
    from ._workflow import workflow as workflow
    from ._workflow_handle import Workflow as Workflow
    from ._workflow_handle import run_workflow as run_workflow
    from ._workflow_handle import start_workflow as start_workflow
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._agents": ("AgentSpec", "Lifecycle", "spawn_agent_tool"),
            "._blackboard": ("Board", "open_board"),
            "._board_events": ("BoardChanged", "BoardState", "BoardStatistics", "Entry"),
            "._board_tools": ("board_tools",),
            "._budget": ("Budget", "Price"),
            "._cluster": ("ClusterSession", "NodeHost", "host_node"),
            "._context": ("ContextPolicy", "estimate_tokens"),
            "._cron": ("CronSchedule",),
            "._fleet_control": (
                "ApplyReport",
                "apply_fleet",
                "read_fleet_status",
                "request_drain",
                "set_paused",
            ),
            "._fleet_events": ("AgentStatus", "FleetStatus", "NodeStatus", "fleet_status"),
            "._fleet_file": (
                "AgentDecl",
                "FleetFile",
                "ScheduleDecl",
                "code_version",
                "load_tool",
                "parse_fleet_file",
            ),
            "._fleet_node": ("FLEET_PLACED", "FleetNode", "NodeService"),
            "._limiter": ("Limiter", "LimiterStatistics", "spawn_limiter"),
            "._limiter_core": ("Limit", "LimiterPolicy"),
            "._mcp": ("McpServer", "McpTransport", "mcp_http", "mcp_stdio", "mcp_tools"),
            "._memory_tools": ("memory_tools",),
            "._observe": (
                "HookContext",
                "LLMCallNext",
                "LLMHook",
                "Observer",
                "ToolCallNext",
                "ToolHook",
            ),
            "._recall": ("RecallHit", "recall_tool", "search_history"),
            "._replay": ("SessionReplay", "delete_session", "fork_session", "replay_session"),
            "._session_errors": (
                "ForeignAgentError",
                "HumanRequestNotFoundError",
                "NoOpenRunError",
                "OutputInvalidError",
                "OutputTypeError",
                "SessionBusyError",
                "SessionError",
            ),
            "._session_events": ("HumanRequestKind", "RunResult", "RunStatus", "SessionState"),
            "._session_handle": ("Session",),
            "._session_spawn": ("spawn_agent", "spawn_session"),
            "._session_steps": ("BusyPolicy", "ask_human"),
            "._tools": ("Tool", "ToolContext", "ToolKind", "ToolRegistry", "tool"),
            "._wakeup_tools": ("wakeup_tools",),
            "._workflow": ("WorkflowContext", "WorkflowFunction", "workflow"),
            "._workflow_handle": ("Workflow", "run_workflow", "start_workflow"),
        },
    )
