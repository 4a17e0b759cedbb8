"""Agent tools for time: ``schedule_wakeup`` (schedule, list, cancel) and ``current_time``.

A wake-up is a durable timer owned by the calling session (an event in its own stream);
when it fires the session reads its note like a follow-up, starting a run if it was idle.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from protocols.errors import ActorNotFoundError

from ._tool import Tool, ToolContext, tool

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def wakeup_tools(
    runtime: Runtime | None = None,
) -> tuple[Tool[..., object], Tool[..., object]]:
    """The ``schedule_wakeup`` and ``current_time`` tools.

    Give them to a session (``spawn_session(tools=[*wakeup_tools(), ...])``) or put them
    in an :class:`AgentSpec`. The owner of every timer is the calling session, taken from
    the tool context, never from the model's arguments.

    Args:
        runtime (Runtime | None): the runtime whose timers and clock the tools use;
            ``None`` (the usual choice): the runtime of each call, from its
            :class:`ToolContext`, so the tools can be made before any runtime runs and
            serve every runtime (a restart, a replay, the test kit's harness).
    """

    def runtime_of(context: ToolContext) -> Runtime:
        found = runtime if runtime is not None else context.runtime
        if found is None:
            msg = f"{context.tool_name}: the tool was called outside a runtime"
            raise RuntimeError(msg)
        return found

    def own_ref(context: ToolContext) -> ActorRef[object]:
        try:
            return runtime_of(context).lookup(context.session_id)
        except ActorNotFoundError:
            msg = f"session {context.session_id!r} is not running in this runtime"
            raise RuntimeError(msg) from None

    @tool(
        parameters={
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["schedule", "list", "cancel"]},
                "delay_seconds": {
                    "type": "number",
                    "minimum": 0,
                    "description": "schedule: wake up this many seconds from now",
                },
                "at": {
                    "type": "string",
                    "description": "schedule: wake up at this ISO 8601 time (UTC if no zone)",
                },
                "every_seconds": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "schedule: then again every this many seconds",
                },
                "note": {
                    "type": "string",
                    "description": "schedule: what to remember when waking up",
                },
                "timer_id": {"type": "string", "description": "cancel: the wake-up to cancel"},
            },
            "required": ["action"],
            "additionalProperties": False,
        }
    )
    async def schedule_wakeup(context: ToolContext, action: str, **arguments: object) -> object:
        """Schedule a wake-up for yourself (once or recurring), list yours, or cancel one.

        When a wake-up is due you receive its note as a new message, even after a
        restart, and even if you were idle.
        """
        owner = own_ref(context)
        timers_service = runtime_of(context).timers
        if action == "list":
            timers = await timers_service.list_timers(owner)
            return [
                {"timer_id": t.timer_id, "due": _iso(t.due_at), "note": t.note, "every": t.every}
                for t in timers
            ]
        if action == "cancel":
            timer_id = arguments.get("timer_id")
            if not isinstance(timer_id, str):
                msg = "cancel needs timer_id (list shows the ids)"
                raise ValueError(msg)
            await timers_service.cancel_timer(timer_id, reason=f"cancelled by {context.session_id}")
            return f"cancelled {timer_id}"
        delay, at = arguments.get("delay_seconds"), arguments.get("at")
        if (delay is None) == (at is None):
            msg = "schedule needs exactly one of delay_seconds or at"
            raise ValueError(msg)
        due: float | None = None
        if isinstance(at, str):
            when = datetime.fromisoformat(at)
            due = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        note = arguments.get("note", "")
        every = arguments.get("every_seconds")
        timer_id = await timers_service.schedule(
            owner,
            at=due,
            delay=float(delay) if isinstance(delay, int | float) else None,
            note=str(note),
            every=float(every) if isinstance(every, int | float) else None,
        )
        pending = {t.timer_id: t for t in await timers_service.list_timers(owner)}
        due_at = pending[timer_id].due_at if timer_id in pending else due
        return {"timer_id": timer_id, "due": _iso(due_at) if due_at is not None else None}

    @tool
    async def current_time(context: ToolContext) -> str:  # async: the clock follows Trio's
        """The current date and time (UTC, ISO 8601)."""
        return _iso(runtime_of(context).clock.now())

    return schedule_wakeup, current_time
