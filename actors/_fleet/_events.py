"""What a fleet's log records, and :func:`fleet_status`, the pure fold that reads it.

Three kinds of stream, each with one writer:

* ``fleet`` (the control stream): what operators decided, appended by ``fleet apply``,
  ``pause``, ``resume`` and ``drain`` with optimistic concurrency (read, fold, append at
  the version folded, again on a conflict): agents declared, changed, retired, paused,
  resumed; nodes asked to drain.
* ``fleet/agent/<name>``: one agent's life, appended by the agent's actor on the node
  hosting it: its timers (the schedules), the node it runs on, each run started (with the
  code version) and finished (status, tokens), runs skipped.
* ``fleet/node/<node>``: a node's life, appended by the node: started, draining, stopped.

The fold is a pure function over decoded events, so anything that reads the log (the
CLI, a web console, a test) computes the same status; the log is the only authority.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any, Literal, final

import attrs

from protocols.codec import event_type
from runtime.lowlevel import TimerBook, is_timer_event

__all__ = [
    "AGENT_PREFIX",
    "CONTROL_STREAM",
    "NODE_PREFIX",
    "AgentStatus",
    "FleetAgentChanged",
    "FleetAgentDeclared",
    "FleetAgentHosted",
    "FleetAgentPaused",
    "FleetAgentResumed",
    "FleetAgentRetired",
    "FleetAgentUnavailable",
    "FleetNodeDrainRequested",
    "FleetNodeDraining",
    "FleetNodeStarted",
    "FleetNodeStopped",
    "FleetRunFinished",
    "FleetRunSkipped",
    "FleetRunStarted",
    "FleetStatus",
    "NodeStatus",
    "fleet_status",
]

CONTROL_STREAM = "fleet"
AGENT_PREFIX = "fleet/agent/"
NODE_PREFIX = "fleet/node/"


# -- the control stream ----------------------------------------------------------------------


@event_type("fleet.agent_declared")
@final
@attrs.frozen(kw_only=True)
class FleetAgentDeclared:
    """An agent joined the fleet (or came back after being retired)."""

    name: str
    decl: dict[str, Any]
    """The :class:`~actors.fleet.AgentDecl` as JSON."""
    spec_hash: str


@event_type("fleet.agent_changed")
@final
@attrs.frozen(kw_only=True)
class FleetAgentChanged:
    """An agent's declaration changed; its next run uses the new one."""

    name: str
    decl: dict[str, Any]
    spec_hash: str
    previous_hash: str
    changed: tuple[str, ...] = ()
    """The fields that differ (``prompt``, ``tools``, ``schedules``...)."""


@event_type("fleet.agent_retired")
@final
@attrs.frozen(kw_only=True)
class FleetAgentRetired:
    """An agent left the fleet file: it runs no more; its history stays."""

    name: str


@event_type("fleet.agent_paused")
@final
@attrs.frozen(kw_only=True)
class FleetAgentPaused:
    """No new runs until resumed (its schedule slots pass by, recorded as skipped)."""

    name: str
    reason: str = ""


@event_type("fleet.agent_resumed")
@final
@attrs.frozen(kw_only=True)
class FleetAgentResumed:
    name: str


@event_type("fleet.node_drain_requested")
@final
@attrs.frozen(kw_only=True)
class FleetNodeDrainRequested:
    """An operator asked a node to drain (``powertrio fleet drain NODE``)."""

    node: str


# -- a node's stream -------------------------------------------------------------------------


@event_type("fleet.node_started")
@final
@attrs.frozen(kw_only=True)
class FleetNodeStarted:
    node: str
    pid: int
    version: str
    """The package version the node runs."""
    started_at: float


@event_type("fleet.node_draining")
@final
@attrs.frozen(kw_only=True)
class FleetNodeDraining:
    node: str
    reason: str
    deadline: float
    """When runs still going are cancelled at once (epoch seconds)."""


@event_type("fleet.node_stopped")
@final
@attrs.frozen(kw_only=True)
class FleetNodeStopped:
    node: str
    stopped_at: float
    cancelled_runs: int = 0
    """Runs cancelled at once (a second signal, or the drain deadline)."""


@event_type("fleet.agent_unavailable")
@final
@attrs.frozen(kw_only=True)
class FleetAgentUnavailable:
    """The node cannot host an agent: its tools do not import in this node's code."""

    node: str
    name: str
    error: str
    error_code: str


# -- an agent's stream -----------------------------------------------------------------------


@event_type("fleet.agent_hosted")
@final
@attrs.frozen(kw_only=True)
class FleetAgentHosted:
    """The agent's actor started on a node (what a lease layer will hand over)."""

    node: str
    spec_hash: str


def _run_started_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept the code version as one string, ``"powertrio 0.1.0 spec <hash>"``,
    repeating the spec hash; version 2 keeps the package version as a field of its own."""
    upgraded = dict(data)
    text = str(upgraded.pop("code_version", ""))
    words = text.split()
    fits = len(words) == 4 and words[0] == "powertrio" and words[2] == "spec"
    upgraded["package_version"] = words[1] if fits else "unknown"
    return upgraded


@event_type("fleet.run_started", version=2, upcasters={1: _run_started_v1_to_v2})
@final
@attrs.frozen(kw_only=True)
class FleetRunStarted:
    """A run of the agent started, with the code version it runs.

    Schema version 2 (version 1 had ``code_version: str`` in place of
    ``package_version``; the upcaster splits it).
    """

    run_id: str
    session_id: str
    input: str
    trigger: str
    """What started it: ``cron=0 7 * * *``, ``every=15m``..."""
    spec_hash: str
    """Of the declaration and the tools' schemas, as the node's code had them."""
    package_version: str
    """The powertrio version the node ran."""
    started_at: float

    @property
    def code_version(self) -> str:
        """The package version and the spec hash (:func:`~actors.fleet.code_version`)."""
        return f"powertrio {self.package_version} spec {self.spec_hash}"


@event_type("fleet.run_finished")
@final
@attrs.frozen(kw_only=True)
class FleetRunFinished:
    run_id: str
    status: str
    """The session's run status (``completed``, ``failed``, ``cancelled``...)."""
    tokens: int
    finished_at: float
    error: str | None = None
    error_code: str | None = None


@event_type("fleet.run_skipped")
@final
@attrs.frozen(kw_only=True)
class FleetRunSkipped:
    """A schedule slot came and no run started: ``paused``, ``busy`` (a run was still
    going) or ``budget.day`` (the day's tokens are spent)."""

    trigger: str
    reason: str
    at: float


# -- the fold ----------------------------------------------------------------------------------

AgentState = Literal["active", "running", "paused", "retired"]


@final
@attrs.frozen(kw_only=True)
class AgentStatus:
    """One agent, as the log has it."""

    name: str
    state: AgentState
    node: str | None
    """The node hosting it (``None``: never hosted yet)."""
    spec_hash: str
    """The declared spec."""
    running_hash: str | None
    """The spec of its latest run; differs from ``spec_hash`` until the next run adopts
    a change."""
    code_version: str | None
    """The code version its latest run recorded (package version and spec hash)."""
    last_run: str | None
    last_status: str | None
    last_finished_at: float | None
    next_wakeup: float | None
    runs_today: int
    tokens_today: int
    day_tokens: int | None
    errors: int
    """Runs that ended ``failed``, and times a node could not host it, ever."""
    last_error: str | None
    skipped: int


NodeState = Literal["running", "draining", "stopped", "lost"]
"""``lost``: the log says running or draining, but the node's lease lapsed unrenewed (it
was killed, or cut off from the log): it stopped without recording it."""


@final
@attrs.frozen(kw_only=True)
class NodeStatus:
    name: str
    state: NodeState
    pid: int
    version: str
    started_at: float
    drain_requested: bool


@final
@attrs.frozen(kw_only=True)
class FleetStatus:
    agents: tuple[AgentStatus, ...]
    nodes: tuple[NodeStatus, ...]

    def agent(self, name: str) -> AgentStatus | None:
        return next((a for a in self.agents if a.name == name), None)

    def with_live_nodes(self, live: Collection[str]) -> FleetStatus:
        """This status, knowing which nodes hold a lease now (``live``): a node the log
        has running or draining that is not among them is ``lost``. The log alone cannot
        tell: a node killed with SIGKILL records nothing."""
        nodes = tuple(
            attrs.evolve(n, state="lost")
            if n.state in {"running", "draining"} and n.name not in live
            else n
            for n in self.nodes
        )
        return attrs.evolve(self, nodes=nodes)


@attrs.define
class _Agent:
    name: str
    spec_hash: str = ""
    day_tokens: int | None = None
    retired: bool = False
    paused: bool = False
    node: str | None = None
    running_hash: str | None = None
    code_version: str | None = None
    open_run: str | None = None
    last_run: str | None = None
    last_status: str | None = None
    last_finished_at: float | None = None
    timers: TimerBook = attrs.Factory(TimerBook)
    """Folded as the agent's actor folds it."""
    runs_today: int = 0
    tokens_today: int = 0
    errors: int = 0
    last_error: str | None = None
    skipped: int = 0


@attrs.define
class _Node:
    name: str
    pid: int = 0
    version: str = ""
    started_at: float = 0.0
    state: Literal["running", "draining", "stopped"] = "stopped"
    drain_requested: bool = False


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).date().isoformat()


def fleet_status(events: Iterable[tuple[str, object]], *, now: float) -> FleetStatus:
    """Fold ``(stream, event)`` pairs of the fleet's streams, in log order, into the
    fleet's status at ``now`` ("today" is the UTC day of ``now``). Pure.

    Give it every event of ``fleet`` and the streams under ``fleet/``; events of other
    streams and types are ignored.
    """
    agents: dict[str, _Agent] = {}
    nodes: dict[str, _Node] = {}
    today = _day(now)

    def agent(name: str) -> _Agent:
        found = agents.get(name)
        if found is None:
            found = agents[name] = _Agent(name)
        return found

    for stream, event in events:
        if stream == CONTROL_STREAM:
            _fold_control(agent, nodes, event)
        elif stream.startswith(AGENT_PREFIX):
            _fold_agent(agent(stream[len(AGENT_PREFIX) :]), event, today)
        elif stream.startswith(NODE_PREFIX):
            name = stream[len(NODE_PREFIX) :]
            node = nodes.setdefault(name, _Node(name))
            if isinstance(event, FleetNodeStarted):
                node.pid, node.version = event.pid, event.version
                node.started_at, node.state = event.started_at, "running"
                node.drain_requested = False
            elif isinstance(event, FleetNodeDraining):
                node.state = "draining"
            elif isinstance(event, FleetNodeStopped):
                node.state = "stopped"
            elif isinstance(event, FleetAgentUnavailable):
                found = agent(event.name)
                found.errors += 1
                found.last_error = f"[{event.error_code}] {event.node}: {event.error}"
    return FleetStatus(
        agents=tuple(_agent_status(a) for a in sorted(agents.values(), key=lambda a: a.name)),
        nodes=tuple(
            NodeStatus(
                name=n.name,
                state=n.state,
                pid=n.pid,
                version=n.version,
                started_at=n.started_at,
                drain_requested=n.drain_requested,
            )
            for n in sorted(nodes.values(), key=lambda n: n.name)
        ),
    )


def _fold_control(agent: Any, nodes: dict[str, _Node], event: object) -> None:
    if isinstance(event, FleetAgentDeclared | FleetAgentChanged):
        found = agent(event.name)
        found.spec_hash = event.spec_hash
        found.day_tokens = event.decl.get("day_tokens")
        found.retired = False
    elif isinstance(event, FleetAgentRetired):
        agent(event.name).retired = True
    elif isinstance(event, FleetAgentPaused):
        agent(event.name).paused = True
    elif isinstance(event, FleetAgentResumed):
        agent(event.name).paused = False
    elif isinstance(event, FleetNodeDrainRequested):
        nodes.setdefault(event.node, _Node(event.node)).drain_requested = True


def _fold_agent(found: _Agent, event: object, today: str) -> None:
    if isinstance(event, FleetAgentHosted):
        found.node = event.node
    elif is_timer_event(event):
        found.timers = found.timers.evolve(event)
    elif isinstance(event, FleetRunStarted):
        found.open_run = event.run_id
        found.running_hash = event.spec_hash
        found.code_version = event.code_version
    elif isinstance(event, FleetRunFinished):
        found.open_run = None
        found.last_run, found.last_status = event.run_id, event.status
        found.last_finished_at = event.finished_at
        if _day(event.finished_at) == today:
            found.runs_today += 1
            found.tokens_today += event.tokens
        if event.status == "failed":
            found.errors += 1
            found.last_error = f"[{event.error_code}] {event.error}"
    elif isinstance(event, FleetRunSkipped):
        found.skipped += 1


def _agent_status(found: _Agent) -> AgentStatus:
    state: AgentState = (
        "retired"
        if found.retired
        else "paused"
        if found.paused
        else "running"
        if found.open_run
        else "active"
    )
    return AgentStatus(
        name=found.name,
        state=state,
        node=found.node,
        spec_hash=found.spec_hash,
        running_hash=found.running_hash,
        code_version=found.code_version,
        last_run=found.last_run,
        last_status=found.last_status,
        last_finished_at=found.last_finished_at,
        next_wakeup=None if found.retired else found.timers.next_due,
        runs_today=found.runs_today,
        tokens_today=found.tokens_today,
        day_tokens=found.day_tokens,
        errors=found.errors,
        last_error=found.last_error,
        skipped=found.skipped,
    )
