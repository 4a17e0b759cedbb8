"""Agent tools for time: ``schedule_wakeup`` (schedule, list, cancel) and ``current_time``.

A wake-up is a durable timer owned by the calling session (an event in its own stream);
when it fires the session reads its note like a follow-up, starting a run if it was idle.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from protocols.errors import ActorNotFoundError

from ._tools import Tool, ToolContext, tool

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def wakeup_tools(runtime: Runtime) -> tuple[Tool[..., object], Tool[..., object]]:
    """The ``schedule_wakeup`` and ``current_time`` tools, bound to ``runtime``.

    Give them to a session (``spawn_session(tools=[*wakeup_tools(runtime), ...])``). The
    owner of every timer is the calling session, taken from the tool context, never from
    the model's arguments.
    """

    def own_ref(context: ToolContext) -> ActorRef[object]:
        try:
            return runtime.lookup(context.session_id)
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
        if action == "list":
            timers = await runtime.timers.list_timers(owner)
            return [
                {"timer_id": t.timer_id, "due": _iso(t.due_at), "note": t.note, "every": t.every}
                for t in timers
            ]
        if action == "cancel":
            timer_id = arguments.get("timer_id")
            if not isinstance(timer_id, str):
                msg = "cancel needs timer_id (list shows the ids)"
                raise ValueError(msg)
            await runtime.timers.cancel_timer(timer_id, reason=f"cancelled by {context.session_id}")
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
        timer_id = await runtime.timers.schedule(
            owner,
            at=due,
            delay=float(delay) if isinstance(delay, int | float) else None,
            note=str(note),
            every=float(every) if isinstance(every, int | float) else None,
        )
        pending = {t.timer_id: t for t in await runtime.timers.list_timers(owner)}
        due_at = pending[timer_id].due_at if timer_id in pending else due
        return {"timer_id": timer_id, "due": _iso(due_at) if due_at is not None else None}

    @tool
    async def current_time() -> str:  # async: the clock follows Trio's, read in Trio
        """The current date and time (UTC, ISO 8601)."""
        return _iso(runtime.clock.now())

    return schedule_wakeup, current_time
