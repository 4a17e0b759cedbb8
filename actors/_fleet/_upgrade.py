"""``fleet upgrade --check``: replay each agent's recent runs against a new fleet file.

A run records its code version (``FleetRunStarted.code_version``); replaying its session
with the new spec and this process's tools asks the new code for every request the old
one made, and :func:`~actors.replay_session` names the first that differs (the prompt,
the tools' schemas, the model). Nothing is written: this is what would change before a
rollout.
"""

from __future__ import annotations

from typing import Literal, final

import attrs

from protocols.codec import decode_record
from protocols.errors import ConfigError, ReplayDivergenceError
from runtime import EventStore

from .._session._replay import replay_session
from ._control import read_control
from ._events import AGENT_PREFIX, FleetRunFinished, FleetRunStarted
from ._file import FleetFile, code_version

__all__ = ["AgentUpgrade", "RunCheck", "upgrade_check"]


@final
@attrs.frozen(kw_only=True)
class RunCheck:
    """One recorded run replayed against the new code."""

    run_id: str
    session_id: str
    recorded_version: str
    diverges: bool
    detail: str
    """``same requests``, or the divergence as replay names it."""


@final
@attrs.frozen(kw_only=True)
class AgentUpgrade:
    """What applying the new file would do to one agent."""

    name: str
    action: Literal["create", "change", "retire", "keep"]
    changed: tuple[str, ...]
    old_version: str | None
    new_version: str | None
    runs: tuple[RunCheck, ...]


async def upgrade_check(
    store: EventStore, fleet: FleetFile, *, sample: int = 3
) -> list[AgentUpgrade]:
    """Check ``fleet`` against the log: per agent, the action ``apply`` would take and the
    replay of its last ``sample`` finished runs with the new spec. Writes nothing."""
    control = await read_control(store)
    report: list[AgentUpgrade] = []
    for decl in fleet.agents:
        tools = decl.load_tools()
        new_hash = decl.spec_hash(tools)
        known = control.agents.get(decl.name)
        if known is None or known.retired:
            report.append(
                AgentUpgrade(
                    name=decl.name,
                    action="create",
                    changed=(),
                    old_version=None,
                    new_version=code_version(new_hash),
                    runs=(),
                )
            )
            continue
        before, after = known.decl.to_json(), decl.to_json()
        changed = tuple(k for k in after if before.get(k) != after[k])
        if not changed and known.spec_hash != new_hash:
            changed = ("tool schemas",)
        spec = decl.spec(tools)
        checks: list[RunCheck] = []
        for started in await _recent_runs(store, decl.name, sample):
            try:
                await replay_session(store, started.session_id, spec)
                checks.append(
                    RunCheck(
                        run_id=started.run_id,
                        session_id=started.session_id,
                        recorded_version=started.code_version,
                        diverges=False,
                        detail="same requests",
                    )
                )
            except (ReplayDivergenceError, ConfigError) as exc:
                checks.append(
                    RunCheck(
                        run_id=started.run_id,
                        session_id=started.session_id,
                        recorded_version=started.code_version,
                        diverges=True,
                        detail=str(exc),
                    )
                )
        report.append(
            AgentUpgrade(
                name=decl.name,
                action="change" if changed else "keep",
                changed=changed,
                old_version=code_version(known.spec_hash),
                new_version=code_version(new_hash),
                runs=tuple(checks),
            )
        )
    names = set(fleet.names())
    for name in control.live():
        if name not in names:
            report.append(
                AgentUpgrade(
                    name=name,
                    action="retire",
                    changed=(),
                    old_version=code_version(control.agents[name].spec_hash),
                    new_version=None,
                    runs=(),
                )
            )
    return report


async def _recent_runs(store: EventStore, name: str, sample: int) -> list[FleetRunStarted]:
    """The agent's last ``sample`` finished runs, oldest first."""
    started: dict[str, FleetRunStarted] = {}
    finished: list[str] = []
    for record in await store.read(AGENT_PREFIX + name):
        if record.type not in {"fleet.run_started", "fleet.run_finished"}:
            continue
        event = decode_record(record)
        if isinstance(event, FleetRunStarted):
            started[event.run_id] = event
        elif isinstance(event, FleetRunFinished) and event.run_id in started:
            finished.append(event.run_id)
    return [started[run_id] for run_id in finished[-sample:]] if sample > 0 else []
