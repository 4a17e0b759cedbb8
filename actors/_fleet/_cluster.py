"""Hosting sessions on a node of a fleet, and reaching any session by id from any node.

``host_node(runtime, catalog)`` runs beside a runtime opened with ``node=``: it spawns
(and so resumes) the sessions of the shards the node takes, stops those of the shards
it loses or hands back, and serves the node's durable inbox. ``NodeHost.session(id)``
gives a :class:`ClusterSession` whose calls go straight to the local actor when this
node owns the session, and through the owner's inbox otherwise. docs/cluster.md tells
the design.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import orjson
import trio

from protocols import CancelMode
from protocols.codec import default_registry
from protocols.errors import (
    ActorFailedError,
    ActorNotFoundError,
    ActorStoppedError,
    ConfigError,
    FencedError,
    PowertrioError,
    RuntimeClosedError,
)
from runtime.cluster import ClusterNode

from .._board._blackboard import perform as perform_board_call
from .._session._agents import AgentSpec
from .._session._events import RunResult
from .._session._handle import Session
from .._session._spawn import spawn_agent
from ._errors import RemoteSessionError

if TYPE_CHECKING:
    from runtime import Runtime
    from runtime.cluster import ShardChange

__all__ = ["ClusterSession", "NodeHost", "host_node"]

logger = logging.getLogger("powertrio.cluster")


_SETTLE_ROUNDS = 20
"""Lease rounds a local call fenced by a lease still believed held waits for the node's
view to catch up, before giving up with the error."""


def _fenced(exc: BaseException) -> bool:
    """Whether a local call failed because this node's lease is gone (or going)."""
    if isinstance(exc, FencedError | ActorStoppedError | RuntimeClosedError):
        return True
    return isinstance(exc, ActorFailedError) and exc.cause_code == FencedError.code


def _encode(value: object) -> bytes:
    return orjson.dumps({"ok": default_registry.converter.unstructure(value)})


def _encode_error(exc: BaseException) -> bytes:
    code = exc.code if isinstance(exc, PowertrioError) else type(exc).__name__
    return orjson.dumps({"error": {"code": code, "message": str(exc)}})


def _decode(session_id: str, reply: bytes) -> Any:  # JSON
    data = orjson.loads(reply)
    if "error" in data:
        error = data["error"]
        raise RemoteSessionError(session_id, str(error["code"]), str(error["message"]))
    return data["ok"]


def _run_result(value: object) -> RunResult:
    return default_registry.converter.structure(value, RunResult)


@final
class ClusterSession:
    """A session by id, wherever it runs in the fleet: made by :meth:`NodeHost.session`.

    Each call goes to the local actor when this node holds the session's shard, else it
    is put in the owner's durable inbox (a ``NOTIFY`` rings the owner; a bounded poll
    is the backstop) and the call waits for the answer, across a failover of the owner.
    A send with the same ``id`` is one run, however often it is retried, from any node.
    """

    __slots__ = ("_host", "_id")

    def __init__(self, host: NodeHost, session_id: str) -> None:
        self._host = host
        self._id = session_id

    def __repr__(self) -> str:
        return f"<ClusterSession {self._id!r}>"

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    async def send(self, input: str, *, id: str | None = None) -> RunResult:
        """Run the agent on ``input`` and return how the run ended (see ``Session.send``).

        Raises:
            RemoteSessionError: the owner refused or failed (``remote_code`` says why).
            ValueError: ``input`` or ``id`` is empty.
        """
        if not input:
            msg = "input must not be empty: a model needs something to answer"
            raise ValueError(msg)
        if id is not None and not id:
            msg = "id must not be empty: leave it None for a new run id"
            raise ValueError(msg)
        run_id = id or self._host.runtime.ids.new("run")
        return _run_result(
            await self._call(f"send/{run_id}", {"op": "send", "input": input, "id": run_id})
        )

    async def follow_up(self, content: str, *, id: str | None = None, kind: str = "user") -> bool:
        """Give the session more input (see ``Session.follow_up``); ``False``: a repeat."""
        fu_id = id or self._host.runtime.ids.new("fu")
        body = {"op": "follow_up", "content": content, "id": fu_id, "kind": kind}
        return bool(await self._call(f"fu/{fu_id}", body))

    async def cancel(
        self, reason: str = "", *, mode: CancelMode = "immediate", by: str = "python"
    ) -> bool:
        """Cancel the active run (see ``Session.cancel``); ``False``: no run was active."""
        body = {"op": "cancel", "reason": reason, "mode": mode, "by": by}
        return bool(await self._call(f"cancel/{self._host.runtime.ids.new('c')}", body))

    async def reply(self, request_id: str, answer: str, *, by: str = "human") -> RunResult:
        """Answer a question the run asked and wait for its next result."""
        body = {"op": "reply", "request": request_id, "answer": answer, "by": by}
        return _run_result(await self._call(f"reply/{request_id}", body))

    async def approve(self, request_id: str, *, by: str = "human") -> RunResult:
        """Allow a tool call waiting for approval and wait for the run's next result."""
        body = {"op": "approve", "request": request_id, "by": by}
        return _run_result(await self._call(f"reply/{request_id}", body))

    async def deny(self, request_id: str, reason: str = "", *, by: str = "human") -> RunResult:
        """Refuse a tool call waiting for approval; the model reads ``reason``."""
        body = {"op": "deny", "request": request_id, "answer": reason, "by": by}
        return _run_result(await self._call(f"reply/{request_id}", body))

    async def _call(self, key: str, body: Mapping[str, object]) -> object:
        host = self._host
        node = host.node
        for _ in range(_SETTLE_ROUNDS):
            if not node.owns(self._id):
                break
            try:
                return await host.perform(self._id, body)
            except Exception as exc:
                if not _fenced(exc):
                    raise
                if node.owns(self._id):
                    # Fenced while this node still believes it holds the shard: its
                    # next lease round tells (the sends are idempotent by id).
                    await trio.sleep(node.config.ttl / 3)
        else:
            if node.owns(self._id):
                return await host.perform(self._id, body)
        # Another node owns the session (or it moved while the call ran): its inbox.
        reply = await host.node.post(self._id, f"{self._id}/{key}", orjson.dumps(body))
        return _decode(self._id, reply)


@final
class NodeHost:
    """The sessions of one node: spawned for its shards, stopped when the shards move.

    Made by :func:`host_node`.
    """

    def __init__(
        self, runtime: Runtime, node: ClusterNode, catalog: Mapping[str, AgentSpec]
    ) -> None:
        self.runtime = runtime
        self.node = node
        self._catalog = dict(catalog)
        self._agents: dict[str, str] = {}  # session id -> agent name, as placed
        self._local: dict[str, Session] = {}
        self._spawning = trio.Lock()
        self._serving: set[str] = set()  # inbox messages being handled now
        self.resumed = 0
        """Sessions spawned because their shard came to this node."""

    def __repr__(self) -> str:
        return f"<NodeHost {self.node.name!r}: {len(self._local)} sessions>"

    @property
    def sessions(self) -> tuple[str, ...]:
        """Ids of the sessions running on this node now."""
        return tuple(sorted(self._local))

    async def create(
        self, agent: str, *, session_id: str | None = None, traceparent: str | None = None
    ) -> ClusterSession:
        """Place a new session running ``agent`` (or find it, if ``session_id`` exists).

        ``traceparent`` is the W3C trace context of the work the session is created for
        (in a tool, ``ToolContext.traceparent``): it travels with the placement, so the
        session's runs join that trace on whichever node runs them. A session that exists
        keeps the trace context it was created with.

        Raises:
            ConfigError: ``agent`` is not in the catalog, or the session runs another agent.
        """
        if agent not in self._catalog:
            raise ConfigError(self._unknown(agent))
        session_id = session_id or self.runtime.ids.new("ses")
        recorded = await self.node.place(session_id, agent, traceparent=traceparent)
        if recorded != agent:
            msg = f"session {session_id!r} runs agent {recorded!r}, not {agent!r}"
            raise ConfigError(msg)
        self._agents[session_id] = agent
        return ClusterSession(self, session_id)

    async def session(self, session_id: str) -> ClusterSession:
        """The session ``session_id``, wherever it runs.

        Raises:
            LookupError: no node placed a session with this id.
        """
        if session_id not in self._agents:
            agent = await self.node.placement(session_id)
            if agent is None:
                msg = f"no session {session_id!r} in this fleet (create it with NodeHost.create)"
                raise LookupError(msg)
            self._agents[session_id] = agent
        return ClusterSession(self, session_id)

    def define(self, agent: str, spec: AgentSpec) -> None:
        """Add ``agent`` to the catalog, or give it a new spec (a fleet's agents change
        with ``powertrio fleet apply``): sessions spawned from now on run ``spec``."""
        self._catalog[agent] = spec

    def _unknown(self, agent: str) -> str:
        known = ", ".join(sorted(self._catalog)) or "none"
        return f"agent {agent!r} is not in this node's catalog (known: {known})"

    # -- local sessions ---------------------------------------------------------------

    def _running(self, session_id: str) -> Session | None:
        """The local handle, if its actor is registered (running, or restarting after a
        crash: its handle's calls wait for the restart)."""
        session = self._local.get(session_id)
        if session is None:
            return None
        try:
            self.runtime.lookup(session_id)
        except ActorNotFoundError:
            return None
        return session

    async def _session(self, session_id: str) -> Session:
        """The local session's handle, spawning (resuming) its actor if needed."""
        session = self._running(session_id)
        if session is not None:
            return session
        async with self._spawning:
            session = self._running(session_id)
            if session is not None:
                return session
            # One read gives the agent and the trace context the session was placed with,
            # which its first event records, on whichever node starts it.
            placed = await self.node.placed_with(session_id)
            agent, traceparent = placed if placed is not None else (None, None)
            if agent is None or agent not in self._catalog:
                raise ConfigError(self._unknown(str(agent)))
            self._agents[session_id] = agent
            session = await spawn_agent(
                self.runtime, self._catalog[agent], session_id=session_id, traceparent=traceparent
            )
            self._local[session_id] = session
            return session

    async def perform(self, session_id: str, body: Mapping[str, Any]) -> object:
        """Carry out one relayed call on the local session; its JSON-able answer."""
        session = await self._session(session_id)
        op = body["op"]
        if op == "send":
            return default_registry.converter.unstructure(
                await session.send(str(body["input"]), id=str(body["id"]))
            )
        if op == "follow_up":
            return await session.follow_up(
                str(body["content"]), id=str(body["id"]), kind=str(body["kind"])
            )
        if op == "cancel":
            return await session.cancel(str(body["reason"]), mode=body["mode"], by=str(body["by"]))
        request, by = str(body["request"]), str(body["by"])
        if op == "reply":
            result = await session.reply(request, str(body["answer"]), by=by)
        elif op == "approve":
            result = await session.approve(request, by=by)
        elif op == "deny":
            result = await session.deny(request, str(body["answer"]), by=by)
        else:
            msg = f"unknown operation {op!r} in a relayed message"
            raise ValueError(msg)
        return default_registry.converter.unstructure(result)

    async def _stop_shards(self, shards: set[int]) -> None:
        for session_id in [s for s in self._local if self.node.shard_of_session(s) in shards]:
            session = self._local.pop(session_id)
            await self.runtime.stop(session.ref)
        # And every other actor owning a placed stream there (a board, a fleet agent).
        await self.node.stop_owners(shards)

    async def _resume_shards(self, shards: set[int]) -> None:
        """Spawn every session placed in ``shards``: each folds its log and resumes an
        interrupted run."""
        for session_id, agent in await self.node.placements(sorted(shards)):
            self._agents[session_id] = agent
            if not self.node.owns(session_id):
                continue  # moved on meanwhile
            try:
                await self._session(session_id)
                self.resumed += 1
            except PowertrioError as exc:  # that session alone; a call retries it
                logger.warning("node %s cannot resume %s: %s", self.node.name, session_id, exc)

    async def shards_changed(self, change: ShardChange) -> None:
        """Stop the sessions of the shards that went (the node then hands the surplus
        back), spawn those of the shards that came (a ``ShardListener``)."""
        if change.gone:
            await self._stop_shards(set(change.gone))
        if change.came:
            await self._resume_shards(set(change.came))

    async def _serve_inbox(self, nursery: trio.Nursery) -> None:
        while True:
            for message_id, session_id, body in await self.node.messages(skip=self._serving):
                if message_id not in self._serving and self.node.owns_target(session_id):
                    self._serving.add(message_id)
                    nursery.start_soon(self._serve_one, message_id, session_id, body)

    async def _serve_one(self, message_id: str, session_id: str, body: bytes) -> None:
        try:
            try:
                if session_id.startswith("board/"):  # a placed stream, not a session
                    reply = await perform_board_call(self.runtime, session_id, body)
                else:
                    reply = _encode(await self.perform(session_id, orjson.loads(body)))
            except Exception as exc:
                if not self.node.owns_target(session_id) or _fenced(exc):
                    return  # the shard moved on (or is moving): whoever owns it answers
                logger.warning("node %s: %s failed: %r", self.node.name, message_id, exc)
                reply = _encode_error(exc)
            await self.node.answer(message_id, reply)
        finally:
            self._serving.discard(message_id)


@asynccontextmanager
async def host_node(runtime: Runtime, catalog: Mapping[str, AgentSpec]) -> AsyncIterator[NodeHost]:
    """Host the sessions of this node's shards while the block lasts.

    ``catalog`` maps an agent name (recorded with each session when it is created) to
    the spec its sessions run: every node of a fleet should have the same catalog, as
    any of them may come to own any session. A session is spawned from its spec when its
    shard comes to this node (so an interrupted run resumes from the log) or when a call
    reaches it, and stopped when the shard moves on.

    Raises:
        ConfigError: the runtime was not opened with ``node=``.
    """
    node = ClusterNode.of(runtime)
    if node is None:
        msg = "host_node needs a runtime opened with node=Node(...) on a PostgreSQL store"
        raise ConfigError(msg)
    host = NodeHost(runtime, node, catalog)
    node.add_shard_listener(host)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(host._serve_inbox, nursery)
        try:
            yield host
        finally:
            node.remove_shard_listener(host)
            nursery.cancel_scope.cancel()
