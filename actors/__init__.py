"""The agents: spawn a session from an agent spec, send it work, give it tools, share a
blackboard, replay and fork what it recorded.

The package holds what the first hour needs: ``spawn_session``, ``spawn_agent``,
``AgentSpec`` and ``Session``; tools (``tool``, ``Tool``, the built-in ``board_tools``,
``wakeup_tools``, ``memory_tools``, ``recall_tool``, ``spawn_agent_tool``, ``ask_human``);
budgets and the context policy; ``open_board``; ``replay_session`` and
``fork_session``; the sessions' errors. The rest lives in named namespaces:
``actors.board`` (entries, changes, board errors), ``actors.observe`` (observers and
hooks), ``actors.workflows`` (durable workflows), ``actors.mcp`` (MCP tool servers),
``actors.fleet`` (fleet files and nodes), ``actors.limits`` (the fleet limiter),
``actors.cluster`` (sessions across nodes), ``actors.events`` (what sessions and boards
record), ``actors.lowlevel`` (the pieces under the session), ``actors.testing`` (the
agent test kit), ``actors.telemetry``, ``actors.console`` and ``actors.cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

# Names load on first use, so importing the package costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._board._blackboard import Board as Board
    from ._board._blackboard import open_board as open_board
    from ._board._memory import memory_tools as memory_tools
    from ._board._tools import board_tools as board_tools
    from ._session._agents import AgentSpec as AgentSpec
    from ._session._agents import Lifecycle as Lifecycle
    from ._session._agents import spawn_agent_tool as spawn_agent_tool
    from ._session._budget import Budget as Budget
    from ._session._budget import Price as Price
    from ._session._context import ContextPolicy as ContextPolicy
    from ._session._context import estimate_tokens as estimate_tokens
    from ._session._errors import ForeignAgentError as ForeignAgentError
    from ._session._errors import HumanRequestNotFoundError as HumanRequestNotFoundError
    from ._session._errors import NoOpenRunError as NoOpenRunError
    from ._session._errors import OutputInvalidError as OutputInvalidError
    from ._session._errors import OutputTypeError as OutputTypeError
    from ._session._errors import SessionBusyError as SessionBusyError
    from ._session._errors import SessionError as SessionError
    from ._session._events import HumanRequestKind as HumanRequestKind
    from ._session._events import RunResult as RunResult
    from ._session._events import RunStatus as RunStatus
    from ._session._events import SessionState as SessionState
    from ._session._handle import Session as Session
    from ._session._recall import recall_tool as recall_tool
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
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._board._blackboard": (
                "Board",
                "open_board",
            ),
            "._board._memory": ("memory_tools",),
            "._board._tools": ("board_tools",),
            "._session._agents": (
                "AgentSpec",
                "Lifecycle",
                "spawn_agent_tool",
            ),
            "._session._budget": (
                "Budget",
                "Price",
            ),
            "._session._context": (
                "ContextPolicy",
                "estimate_tokens",
            ),
            "._session._errors": (
                "ForeignAgentError",
                "HumanRequestNotFoundError",
                "NoOpenRunError",
                "OutputInvalidError",
                "OutputTypeError",
                "SessionBusyError",
                "SessionError",
            ),
            "._session._events": (
                "HumanRequestKind",
                "RunResult",
                "RunStatus",
                "SessionState",
            ),
            "._session._handle": ("Session",),
            "._session._recall": ("recall_tool",),
            "._session._replay": (
                "SessionReplay",
                "delete_session",
                "fork_session",
                "replay_session",
            ),
            "._session._spawn": (
                "spawn_agent",
                "spawn_session",
            ),
            "._session._steps": (
                "BusyPolicy",
                "ask_human",
            ),
            "._tools._tool": (
                "Tool",
                "ToolContext",
                "ToolKind",
                "ToolRegistry",
                "tool",
            ),
            "._tools._wakeup": ("wakeup_tools",),
        },
    )
