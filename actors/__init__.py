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
    from ._board._blackboard import Board as Board
    from ._board._blackboard import open_board as open_board
    from ._board._events import BoardChanged as BoardChanged
    from ._board._events import BoardState as BoardState
    from ._board._events import BoardStatistics as BoardStatistics
    from ._board._events import Entry as Entry
    from ._board._memory import memory_tools as memory_tools
    from ._board._tools import board_tools as board_tools
    from ._fleet._cluster import ClusterSession as ClusterSession
    from ._fleet._cluster import NodeHost as NodeHost
    from ._fleet._cluster import host_node as host_node
    from ._fleet._control import ApplyReport as ApplyReport
    from ._fleet._control import apply_fleet as apply_fleet
    from ._fleet._control import read_fleet_status as read_fleet_status
    from ._fleet._control import request_drain as request_drain
    from ._fleet._control import set_paused as set_paused
    from ._fleet._cron import CronSchedule as CronSchedule
    from ._fleet._events import AgentStatus as AgentStatus
    from ._fleet._events import FleetStatus as FleetStatus
    from ._fleet._events import NodeStatus as NodeStatus
    from ._fleet._events import fleet_status as fleet_status
    from ._fleet._file import AgentDecl as AgentDecl
    from ._fleet._file import FleetFile as FleetFile
    from ._fleet._file import ScheduleDecl as ScheduleDecl
    from ._fleet._file import code_version as code_version
    from ._fleet._file import load_tool as load_tool
    from ._fleet._file import parse_fleet_file as parse_fleet_file
    from ._fleet._node import FLEET_PLACED as FLEET_PLACED
    from ._fleet._node import FleetNode as FleetNode
    from ._fleet._node import NodeService as NodeService
    from ._limiter._actor import Limiter as Limiter
    from ._limiter._actor import LimiterStatistics as LimiterStatistics
    from ._limiter._actor import spawn_limiter as spawn_limiter
    from ._limiter._core import Limit as Limit
    from ._limiter._core import LimiterPolicy as LimiterPolicy
    from ._mcp._sources import McpServer as McpServer
    from ._mcp._sources import McpTransport as McpTransport
    from ._mcp._sources import mcp_http as mcp_http
    from ._mcp._sources import mcp_stdio as mcp_stdio
    from ._mcp._sources import mcp_tools as mcp_tools
    from ._session._agents import AgentSpec as AgentSpec
    from ._session._agents import Lifecycle as Lifecycle
    from ._session._agents import spawn_agent_tool as spawn_agent_tool
    from ._session._budget import Budget as Budget
    from ._session._budget import Price as Price
    from ._session._context import ContextPolicy as ContextPolicy
    from ._session._context import estimate_tokens as estimate_tokens
    from ._session._events import HumanRequestKind as HumanRequestKind
    from ._session._events import RunResult as RunResult
    from ._session._events import RunStatus as RunStatus
    from ._session._events import SessionState as SessionState
    from ._session._handle import Session as Session
    from ._session._observe import HookContext as HookContext
    from ._session._observe import LLMCallNext as LLMCallNext
    from ._session._observe import LLMHook as LLMHook
    from ._session._observe import Observer as Observer
    from ._session._observe import ToolCallNext as ToolCallNext
    from ._session._observe import ToolHook as ToolHook
    from ._session._recall import RecallHit as RecallHit
    from ._session._recall import recall_tool as recall_tool
    from ._session._recall import search_history as search_history
    from ._session._replay import SessionReplay as SessionReplay
    from ._session._replay import delete_session as delete_session
    from ._session._replay import fork_session as fork_session
    from ._session._replay import replay_session as replay_session
    from ._session._spawn import spawn_agent as spawn_agent
    from ._session._spawn import spawn_session as spawn_session
    from ._session._steps import BusyPolicy as BusyPolicy
    from ._session._steps import ask_human as ask_human
    from ._tools._tool import Tool as Tool
    from ._tools._tool import ToolContext as ToolContext
    from ._tools._tool import ToolKind as ToolKind
    from ._tools._tool import ToolRegistry as ToolRegistry
    from ._tools._tool import tool as tool
    from ._tools._wakeup import wakeup_tools as wakeup_tools
    from ._workflow._handle import Workflow as Workflow
    from ._workflow._handle import run_workflow as run_workflow
    from ._workflow._handle import start_workflow as start_workflow
    from ._workflow._workflow import WorkflowContext as WorkflowContext
    from ._workflow._workflow import WorkflowFunction as WorkflowFunction
    from ._workflow._workflow import workflow as workflow
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._session._agents": ("AgentSpec", "Lifecycle", "spawn_agent_tool"),
            "._board._blackboard": ("Board", "open_board"),
            "._board._events": ("BoardChanged", "BoardState", "BoardStatistics", "Entry"),
            "._board._tools": ("board_tools",),
            "._session._budget": ("Budget", "Price"),
            "._fleet._cluster": ("ClusterSession", "NodeHost", "host_node"),
            "._session._context": ("ContextPolicy", "estimate_tokens"),
            "._fleet._cron": ("CronSchedule",),
            "._fleet._control": (
                "ApplyReport",
                "apply_fleet",
                "read_fleet_status",
                "request_drain",
                "set_paused",
            ),
            "._fleet._events": ("AgentStatus", "FleetStatus", "NodeStatus", "fleet_status"),
            "._fleet._file": (
                "AgentDecl",
                "FleetFile",
                "ScheduleDecl",
                "code_version",
                "load_tool",
                "parse_fleet_file",
            ),
            "._fleet._node": ("FLEET_PLACED", "FleetNode", "NodeService"),
            "._limiter._actor": ("Limiter", "LimiterStatistics", "spawn_limiter"),
            "._limiter._core": ("Limit", "LimiterPolicy"),
            "._mcp._sources": ("McpServer", "McpTransport", "mcp_http", "mcp_stdio", "mcp_tools"),
            "._board._memory": ("memory_tools",),
            "._session._observe": (
                "HookContext",
                "LLMCallNext",
                "LLMHook",
                "Observer",
                "ToolCallNext",
                "ToolHook",
            ),
            "._session._recall": ("RecallHit", "recall_tool", "search_history"),
            "._session._replay": (
                "SessionReplay",
                "delete_session",
                "fork_session",
                "replay_session",
            ),
            "._session._events": ("HumanRequestKind", "RunResult", "RunStatus", "SessionState"),
            "._session._handle": ("Session",),
            "._session._spawn": ("spawn_agent", "spawn_session"),
            "._session._steps": ("BusyPolicy", "ask_human"),
            "._tools._tool": ("Tool", "ToolContext", "ToolKind", "ToolRegistry", "tool"),
            "._tools._wakeup": ("wakeup_tools",),
            "._workflow._workflow": ("WorkflowContext", "WorkflowFunction", "workflow"),
            "._workflow._handle": ("Workflow", "run_workflow", "start_workflow"),
        },
    )
