"""The fleet file's agents on the fleet page: a :class:`FleetSource` read from the log.

The rows are :func:`~actors.fleet.fleet_status` (the fold of ``powertrio fleet status``) over
the control stream and every ``fleet/`` stream; this module only adds what the status
sums up: the errors by code and the session of each agent's latest run (for its link).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import final

import attrs

from actors._fleet._events import NodeStatus
from actors._fleet._leases import with_leases
from protocols.codec import decode_record
from runtime import EventStore

from .._reading._format import fmt_age, fmt_iso

__all__ = ["LogFleetSource", "RecentRun"]

RECENT_RUNS = 12
"""Runs per agent the fleet page shows at a glance."""

_COLUMNS = (
    "state",
    "node",
    "last run",
    "next wake-up",
    "runs today",
    "tokens today",
    "errors",
)


@final
@attrs.define
class RecentRun:
    """One of an agent's latest runs, as its fleet stream has it."""

    run_id: str
    session_id: str
    started_at: float
    status: str = "running"
    finished_at: float | None = None
    tokens: int = 0


@final
class LogFleetSource:
    """The agents a fleet file declared, as the log has them (one row per agent).

    Each row also carries ``session``: the session of the agent's latest run (the page
    links the row to it). ``now`` is the clock the status is taken at ("today" is its UTC
    day).
    """

    def __init__(self, store: EventStore, *, now: Callable[[], float] = time.time) -> None:
        self.store = store
        self.now = now
        self.recent: dict[str, list[RecentRun]] = {}
        """Each agent's latest runs, oldest first (as of the last :meth:`agents`)."""
        self.sessions: dict[str, set[str]] = {}
        """Each agent's sessions, one a run (as of the last :meth:`agents`)."""
        self.nodes: tuple[NodeStatus, ...] = ()
        """The fleet's nodes, a node whose lease lapsed with no recorded stop ``lost``, as
        ``powertrio fleet status`` says (as of the last :meth:`agents`)."""

    @property
    def columns(self) -> Sequence[str]:
        return _COLUMNS

    async def agents(self) -> Mapping[str, Mapping[str, str]]:
        from actors.events import (  # noqa: PLC0415
            FleetAgentUnavailable,
            FleetRunFinished,
            FleetRunStarted,
        )

        from .._fleet._events import fleet_status  # noqa: PLC0415

        pairs: list[tuple[int, str, object]] = []
        at: dict[int, float] = {}
        for record in await self.store.read("fleet"):
            pairs.append((record.position, record.stream, decode_record(record)))
        for info in await self.store.streams("fleet/"):
            for record in await self.store.read(info.stream):
                pairs.append((record.position, record.stream, decode_record(record)))
                at[record.position] = record.recorded_at
        if not pairs:
            return {}
        pairs.sort(key=lambda p: p[0])
        errors: defaultdict[str, Counter[str]] = defaultdict(Counter)
        sessions: dict[str, str] = {}
        recent: dict[str, list[RecentRun]] = {}
        for position, stream, event in pairs:
            name = stream.removeprefix("fleet/agent/")
            if isinstance(event, FleetRunStarted) and name != stream:
                sessions[name] = event.session_id
                self.sessions.setdefault(name, set()).add(event.session_id)
                runs = recent.setdefault(name, [])
                runs.append(RecentRun(event.run_id, event.session_id, at.get(position, 0.0)))
                del runs[:-RECENT_RUNS]
            elif isinstance(event, FleetRunFinished) and name != stream:
                if event.status == "failed":
                    errors[name][event.error_code or "unknown"] += 1
                for run in reversed(recent.get(name, ())):
                    if run.run_id == event.run_id:
                        run.status, run.finished_at = event.status, event.finished_at
                        run.tokens = event.tokens
                        break
            elif isinstance(event, FleetAgentUnavailable):
                errors[event.name][event.error_code] += 1
        self.recent = recent
        now = self.now()
        status = fleet_status(((stream, event) for _, stream, event in pairs), now=now)
        status = await with_leases(self.store, status)
        self.nodes = status.nodes
        lost = {n.name for n in status.nodes if n.state == "lost"}
        rows: dict[str, Mapping[str, str]] = {}
        for agent in status.agents:
            last = ""
            if agent.last_run is not None:
                last = f"{agent.last_run} {agent.last_status or ''}".strip()
                if agent.last_finished_at is not None:
                    last += f" at {fmt_iso(agent.last_finished_at)}"
            wake = ""
            if agent.next_wakeup is not None:
                due = agent.next_wakeup - now
                wake = "due" if due <= 0 else f"in {fmt_age(due)}"
            rows[agent.name] = {
                "state": agent.state,
                "node": (agent.node + " (lost)" if agent.node in lost else agent.node)
                if agent.node
                else "",
                "last run": last,
                "next wake-up": wake,
                "runs today": str(agent.runs_today),
                "tokens today": f"{agent.tokens_today:,}",
                "errors": " ".join(f"{code}×{n}" for code, n in sorted(errors[agent.name].items())),  # noqa: RUF001
                "session": sessions.get(agent.name, ""),
            }
        return rows
