"""A fleet node: one process hosting the fleet's agents, their schedules and their runs.

On SQLite one node owns every agent (``powertrio serve`` holds the log's driver lock).
What a node owns is one decision, :meth:`FleetNode.owns`. On PostgreSQL (``host=``, a
:class:`NodeHost` of a runtime opened with ``node=``) an agent's stream
``fleet/agent/<name>`` is placed and fenced like a session's (``FLEET_PLACED``): the node
holding its shard hosts the agent, and nothing else changes: each agent is an actor whose
stream holds its timers and runs, so whichever node starts it next folds the same
history. A run's session is a session of the fleet like any other: it lives on the node
holding *its* shard, and the agent reaches it by id (``NodeHost.create``), so an
interrupted run resumes on whichever node takes that shard over.

Draining (SIGTERM, or ``powertrio fleet drain NODE``): the node stops taking work (due
timers are postponed in memory and stay pending in the log for the next node), asks each
running session to stop after its current turn, waits for the runs' ends to be recorded
until the deadline, then cancels what is left at once (open tool calls are closed as
interrupted: the transcripts stay valid) and records that it stopped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, final

import attrs
import trio

from protocols import LLM
from protocols.codec import encode
from protocols.errors import ActorStoppedError, ConfigError, PowertrioError
from runtime import NewEvent
from runtime.timers import Postpone

from .._session._spawn import spawn_agent
from ._agent import AgentConfig, FleetAgentActor
from ._control import ControlState, read_control
from ._errors import RemoteSessionError
from ._events import (
    AGENT_PREFIX,
    NODE_PREFIX,
    FleetAgentUnavailable,
    FleetNodeDraining,
    FleetNodeStarted,
    FleetNodeStopped,
    FleetRunStarted,
)
from ._file import AgentDecl, _package_version

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime
    from runtime.cluster import ShardChange

    from .._session._events import RunResult
    from .._session._handle import Session
    from .._tools._tool import Tool
    from ._cluster import ClusterSession, NodeHost

__all__ = ["FLEET_PLACED", "FleetNode", "NodeService"]

FLEET_PLACED = ("session", "board", AGENT_PREFIX.rstrip("/"))
"""``Node(placed=...)`` of a fleet's nodes: sessions, and each agent's own stream (by its
name), are placed on shards and fenced. Every node of a fleet must place the same."""

NodeService = Callable[["FleetNode"], Awaitable[None]]
"""Something a node runs beside its agents for as long as it serves (a metrics endpoint,
a lease keeper): started in the node's nursery, cancelled when the node stops."""


@final
class FleetNode:
    """Hosts the fleet's agents in a runtime until drained (see the module's docstring).

    Args:
        runtime: the runtime (its store is the fleet's log).
        node: this node's name (``fleet drain NODE`` names it).
        llm_for: the model of an agent's runs, from its declaration.
        drain_deadline: seconds runs get to finish their turn once draining.
        poll: seconds between reads of the control stream (other processes append to it).
        services: run beside the agents while the node serves.
        host: on a fleet of nodes (PostgreSQL), the node's session host: the node then
            hosts the agents whose shards it holds, follows them as leases move, and
            runs each run's session wherever that session's shard is.
        on_hosting: called with the agents the node hosts (:meth:`agents`) each time
            that set changes after the node started serving (leases moved, an agent was
            declared), so what a node says it hosts follows what ``fleet status`` says.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        node: str,
        llm_for: Callable[[AgentDecl], LLM],
        drain_deadline: float = 30.0,
        poll: float = 1.0,
        services: Sequence[NodeService] = (),
        host: NodeHost | None = None,
        on_hosting: Callable[[list[str]], None] | None = None,
    ) -> None:
        if host is not None and host.node.shard_of_stream(AGENT_PREFIX + "x") is None:
            msg = (
                f"a fleet node on PostgreSQL must place its agents' streams: open the "
                f"runtime with Node(placed={FLEET_PLACED!r})"
            )
            raise ConfigError(msg)
        self.runtime = runtime
        self.host = host
        self.node = node
        self._llm_for = llm_for
        self.drain_deadline = drain_deadline
        self._poll = poll
        self._services = tuple(services)
        self._control = ControlState()
        self._refs: dict[str, ActorRef[object]] = {}
        self._configs: dict[str, AgentConfig] = {}
        self._tools: dict[str, tuple[Tool[..., object], ...]] = {}
        self._loaded: dict[str, AgentDecl] = {}  # the declaration _tools were loaded for
        self._unavailable: dict[str, AgentDecl] = {}
        self._sessions: dict[str, Session | ClusterSession] = {}
        self._unrecorded: set[str] = set()
        self._on_hosting = on_hosting
        self._hosting: list[str] | None = None  # None until serving: the start is no change
        self._changed = trio.Event()
        self._reconciling = trio.Lock()
        self._drain = trio.Event()
        self._drain_reason = ""
        self._stop_now = trio.Event()
        self.cancelled_runs = 0
        self.stopped = trio.Event()
        """Set once the node has recorded that it stopped."""

    # -- what the CLI (or a signal) asks ------------------------------------------------------

    def drain(self, reason: str) -> None:
        """Stop taking work and finish (idempotent)."""
        if not self._drain.is_set():
            self._drain_reason = reason
            self._drain.set()

    def stop_now(self) -> None:
        """Cancel the runs still going at once (a second signal)."""
        self.drain("stopped at once")
        self._stop_now.set()

    @property
    def draining(self) -> bool:
        return self._drain.is_set()

    def agents(self) -> list[str]:
        """The agents this node hosts (retired ones included: their history is here)."""
        return sorted(self._refs)

    def owns(self, name: str) -> bool:
        """Whether this node hosts agent ``name``: on SQLite, every agent; on a fleet of
        nodes, the agents whose stream's shard this node holds (a surplus shard being
        handed back is no longer counted).
        """
        if self.host is None:
            return True
        node = self.host.node
        return node.shard_of_stream(AGENT_PREFIX + name) in node.held

    # -- serving ---------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until drained; returns once the node has recorded that it stopped."""
        clock = self.runtime.clock
        await self._append(
            FleetNodeStarted(
                node=self.node, pid=os.getpid(), version=_package_version(), started_at=clock.now()
            )
        )
        self._control = await read_control(self.runtime.store)
        start_version = self._control.version  # drain requests before this one are old
        await self._reconcile()
        self._hosting = self.agents()
        task_status.started()
        async with trio.open_nursery() as nursery:
            for service in self._services:
                nursery.start_soon(service, self)
            nursery.start_soon(self._follow_control, start_version)
            if self.host is not None:
                nursery.start_soon(self._follow_leases)
            await self._drain.wait()
            nursery.cancel_scope.cancel()
        await self._drain_runs()
        self.stopped.set()

    async def _follow_control(self, start_version: int) -> None:
        while True:
            await trio.sleep(self._poll)
            before = self._control.version
            self._control = await read_control(self.runtime.store, self._control)
            if self._control.version == before:
                continue
            for version, node in self._control.drains:
                if version > start_version and node == self.node:
                    self.drain(f"`powertrio fleet drain {node}`")
            if not self.draining:
                await self._reconcile()

    async def _follow_leases(self) -> None:
        """Hear the node's shard changes (:meth:`shards_changed`), and retry every
        ``poll`` an agent that could not start yet (its actor was still stopping)."""
        assert self.host is not None
        node = self.host.node
        node.add_shard_listener(self)  # tells the shards held now first
        try:
            while True:
                await trio.sleep(self._poll)
                if not self.draining:
                    await self._reconcile()
        finally:
            node.remove_shard_listener(self)

    async def shards_changed(self, change: ShardChange) -> None:
        """Host the agents of the shards that came, drop those of the shards that went
        (the node stops their actors before it hands a shard back)."""
        if not self.draining:
            await self._reconcile()

    async def _reconcile(self) -> None:
        # Two tasks reconcile (the control stream's and the leases'): one at a time, or
        # both would spawn the same agent.
        async with self._reconciling:
            await self._reconcile_now()
            hosting = self.agents()
            if self._hosting is not None and hosting != self._hosting:
                self._hosting = hosting
                if self._on_hosting is not None and not self.draining:
                    self._on_hosting(hosting)

    def _gone(self, name: str) -> bool:
        """Whether the agent's actor has stopped (its shard was lost: the cluster node
        stopped it) though this node still has its ref."""
        return not self._refs[name].alive

    async def _reconcile_now(self) -> None:
        now = self.runtime.clock.now()
        # On a fleet of nodes: agents whose shard moved on, or went and came back.
        moved = (
            []
            if self.host is None
            else [n for n in self._refs if not self.owns(n) or self._gone(n)]
        )
        for name in moved:
            self._configs.pop(name, None)
            await self.runtime.stop(self._refs.pop(name))
        for name, declared in sorted(self._control.agents.items()):
            owned = self.owns(name)
            if not owned and self.host is None:
                continue
            decl = declared.decl
            tools = self._tools.get(name)
            if tools is None or self._loaded.get(name) != decl:
                try:
                    tools = decl.load_tools()
                except ConfigError as exc:  # this node's code lacks a tool: say so, go on
                    if self._unavailable.get(name) != decl:
                        self._unavailable[name] = decl
                        await self._append(
                            FleetAgentUnavailable(
                                node=self.node, name=name, error=str(exc), error_code=exc.code
                            )
                        )
                    continue
                self._tools[name] = tools
                self._loaded[name] = decl
                if self.host is not None:  # any node may come to run its sessions
                    spec = attrs.evolve(decl.spec(tools), llm=self._llm_for(decl))
                    self.host.define(name, spec)
            if not owned:
                continue
            config = AgentConfig(
                decl=decl,
                spec_hash=decl.spec_hash(tools),
                paused=declared.paused,
                retired=declared.retired,
                node=self.node,
                now=now,
            )
            previous = self._configs.get(name)
            self._configs[name] = config
            ref = self._refs.get(name)
            if ref is None:
                try:
                    self._refs[name] = await self._spawn(config)
                except PowertrioError:  # its previous actor is still stopping: next round
                    if self.host is None:
                        raise
                    del self._configs[name]
            elif previous is None or attrs_differ(previous, config):
                await ref.tell(config)

    async def _spawn(self, config: AgentConfig) -> ActorRef[object]:
        runtime = self.runtime

        def factory() -> FleetAgentActor:
            # A restart starts from what the node knows now.
            return FleetAgentActor(
                self._configs[config.decl.name],
                self._run,
                runtime.clock.now,
                self._recorded,
                self._unrecorded.add,
            )

        return await runtime.spawn(factory, id=f"fleet-agent-{config.decl.name}", on_give_up="stop")

    # -- runs -----------------------------------------------------------------------------

    async def _run(self, decl: AgentDecl, started: FleetRunStarted) -> RunResult:
        if self.host is not None:
            # The run's session lives on the node of its shard (maybe this one): a send
            # by run id is one run, across retries and failovers.
            remote = await self.host.create(decl.name, session_id=started.session_id)
            key = started.run_id + "@" + decl.name
            self._sessions[key] = remote
            try:
                async with trio.open_nursery() as nursery:
                    if self.draining:
                        nursery.start_soon(self._cancel_after_turn, remote)
                    result = await remote.send(started.input, id=started.run_id)
                    nursery.cancel_scope.cancel()
                return result
            finally:
                del self._sessions[key]
        tools = self._tools.get(decl.name) or decl.load_tools()
        session = await spawn_agent(
            self.runtime,
            decl.spec(tools),
            llm=self._llm_for(decl),
            session_id=started.session_id,
        )
        self._sessions[started.run_id + "@" + decl.name] = session
        try:
            async with trio.open_nursery() as nursery:
                if self.draining:  # a run that began as the drain did: one turn, then stop
                    nursery.start_soon(self._cancel_after_turn, session)
                result = await session.send(started.input, id=started.run_id)
                nursery.cancel_scope.cancel()
            return result
        finally:
            del self._sessions[started.run_id + "@" + decl.name]
            # A run's session is done with its run: its actor goes (the log keeps it).
            with trio.CancelScope(shield=True):
                await self.runtime.stop(session.ref)

    async def _cancel_after_turn(self, session: Session | ClusterSession) -> None:
        # The send has just been asked for: cancel once the session has taken it (a few
        # scheduler passes; the send's end cancels this task).
        while not await session.cancel("the node is draining", mode="after_turn", by="fleet"):  # noqa: ASYNC110
            await trio.sleep(0.01)

    def _recorded(self, key: str) -> None:
        self._unrecorded.discard(key)
        self._changed.set()
        self._changed = trio.Event()

    async def _drain_runs(self) -> None:
        runtime = self.runtime
        deadline = runtime.clock.now() + self.drain_deadline
        runtime.timers.set_hook(lambda _due: Postpone(3600.0))  # first: no new work
        await self._append(
            FleetNodeDraining(node=self.node, reason=self._drain_reason, deadline=deadline)
        )
        async with self._reconciling:  # no agent comes or goes meanwhile
            for name, ref in self._refs.items():
                self._configs[name] = attrs.evolve(self._configs[name], draining=True)
                with contextlib.suppress(ActorStoppedError):  # its shard was just lost
                    await ref.tell(self._configs[name])
        for session in list(self._sessions.values()):
            # Its run may have just ended (the session stops with it), or a session on
            # another node may be moving (its new owner finishes the run).
            with contextlib.suppress(ActorStoppedError, RemoteSessionError):
                await session.cancel("the node is draining", mode="after_turn", by="fleet")
        with trio.move_on_after(self.drain_deadline):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._wait_recorded, nursery.cancel_scope)
                await self._stop_now.wait()
                nursery.cancel_scope.cancel()
        if self._unrecorded:
            self.cancelled_runs = len(self._sessions)
            for session in list(self._sessions.values()):
                with contextlib.suppress(ActorStoppedError, RemoteSessionError):
                    await session.cancel("the node stopped at once", mode="immediate", by="fleet")
            with trio.move_on_after(5.0):
                await self._wait_recorded(None)
        for ref in self._refs.values():  # the agents go with their node
            await runtime.stop(ref)
        self._refs.clear()
        runtime.timers.set_hook(None)  # the timers wait in the log for the next node
        await self._append(
            FleetNodeStopped(
                node=self.node, stopped_at=runtime.clock.now(), cancelled_runs=self.cancelled_runs
            )
        )

    async def _wait_recorded(self, done: trio.CancelScope | None) -> None:
        while self._unrecorded:
            await self._changed.wait()
        if done is not None:
            done.cancel()

    async def _append(self, event: object) -> None:
        store = self.runtime.store
        stream = NODE_PREFIX + self.node
        version = await store.stream_version(stream)
        await store.append(stream, [NewEvent.from_encoded(encode(event))], version)


def attrs_differ(before: AgentConfig, after: AgentConfig) -> bool:
    """Whether a config changed beyond the clock reading it carries."""
    return (before.decl, before.spec_hash, before.paused, before.retired) != (
        after.decl,
        after.spec_hash,
        after.paused,
        after.retired,
    )
