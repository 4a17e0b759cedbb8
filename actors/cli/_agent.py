"""Which sessions the CLI and its console may resume: those whose recorded agent is the CLI's.

``send``, ``reply``, ``cancel`` and the console's forms resume a session in their own
process, so that process must rebuild the agent the session runs with. The CLI can rebuild
one agent only, its own (:data:`SYSTEM_PROMPT` and the tools of ``cli_tools``); the rest of
what shapes a request (the model name, ``max_tokens``, the temperature, the round limit)
is taken from the log, as ``powertrio replay`` takes it. A session an application made
with its own prompt or tools, a sub-agent (its parent's spec made it), or one whose runs
set their own tools, prompt, output format or budget, is refused with
:class:`ForeignAgentError` before anything is recorded: run with the CLI's agent, it
would ask its model something its application never asked, and its replay would diverge.
"""

# Lazy imports of the agents inside functions: `--help` stays quick.
# ruff: noqa: PLC0415

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from protocols.errors import StreamNotFoundError

from .._reading._format import shorten
from .._reading._log import SESSION_PREFIX, decode_or_none, read_stream
from .._session._errors import ForeignAgentError
from ._demo import SYSTEM_PROMPT

if TYPE_CHECKING:
    from .._reading._log import LogStore

__all__ = ["RecordedAgent", "check_cli_agent", "cli_tool_names"]

_READ = frozenset(
    {
        "session.created",
        "session.assistant",
        "session.run_started",
        "session.input_queued",
        "session.context_compacted",
    }
)
"""The events that say what agent a session runs: only these are decoded."""


def cli_tool_names(*, ask_human: bool) -> frozenset[str]:
    """The names of the tools a CLI session is offered (as ``cli_tools`` and the ``helper``
    spec give them), made without a runtime."""
    from actors import board_tools, spawn_agent_tool, wakeup_tools

    names = {t.name for t in (*wakeup_tools(), *board_tools("main"))}
    names.add(spawn_agent_tool(()).name)
    if ask_human:
        names.add("ask_human")
    return frozenset(names)


@final
@attrs.frozen(kw_only=True)
class RecordedAgent:
    """What a session's log says about the CLI agent it runs (its model parameters are
    ``recorded_setup``'s, as ``powertrio replay`` takes them)."""

    session_id: str
    max_rounds: int
    """The round limit of a new run (``session.created``)."""
    ask_human: bool
    """Its requests offered ``ask_human`` (a person was at the terminal when it ran)."""


async def check_cli_agent(store: LogStore, session_id: str, *, action: str) -> RecordedAgent:
    """The recorded agent of ``session_id``, if it is the CLI's own.

    Raises:
        ForeignAgentError: the session runs another agent (the reasons say how it
            differs; ``action`` names who asked, e.g. ``powertrio reply``).
        StreamNotFoundError: no such session.
    """
    from actors.events import AssistantRecorded, InputQueued, RunStarted, SessionCreated

    records = await read_stream(store, SESSION_PREFIX + session_id)
    if not records:
        raise StreamNotFoundError(SESSION_PREFIX + session_id)
    reasons: list[str] = []
    created: SessionCreated | None = None
    tool_sets: list[frozenset[str]] = []
    compacted = False

    def add(reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    def prompt(text: str) -> str:
        return f"system prompt {shorten(text, 60)!r}" if text else "no system prompt"

    for record in records:
        if record.type not in _READ:
            continue
        event = decode_or_none(record)
        if isinstance(event, SessionCreated):
            created = event
            if event.parent_id is not None:
                add(f"a sub-agent of {event.parent_id!r}, which runs it")
            if event.system_prompt != SYSTEM_PROMPT:
                add(prompt(event.system_prompt))
        elif isinstance(event, RunStarted | InputQueued):
            run = event.run if isinstance(event, InputQueued) else event
            own = [
                name
                for name, value in (
                    ("tools", run.tools),
                    ("system prompt", run.system_prompt),
                    ("response format", run.response_format),
                    ("budget", run.budget),
                )
                if value is not None
            ]
            if own:
                add(f"run {run.run_id} sets its own {', '.join(own)}")
        elif isinstance(event, AssistantRecorded) and event.request_header is not None:
            header = event.request_header
            if header.system != SYSTEM_PROMPT:
                add(prompt(header.system))
            names = frozenset(header.tools)
            if names not in tool_sets:
                tool_sets.append(names)
        elif record.type == "session.context_compacted":
            compacted = True
    if compacted:
        add("its context is compacted by a policy the CLI does not have")
    ask_human = any("ask_human" in names for names in tool_sets)
    expected = cli_tool_names(ask_human=ask_human)
    for names in tool_sets:
        if names != expected and names != cli_tool_names(ask_human=False):
            add(f"tools {', '.join(sorted(names)) or '(none)'}")
    if reasons:
        raise ForeignAgentError(session_id, action, tuple(reasons))
    return RecordedAgent(
        session_id=session_id,
        max_rounds=created.max_rounds if created is not None else 10,
        ask_human=ask_human,
    )
