"""Replay and fork of sessions and their trees, from the log alone (no model, no tool)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import final

import attrs

from protocols import LLMRequest, LLMResponse, LLMStream, ResponseFormat, decode_record, encode
from protocols.errors import ConfigError, StreamNotFoundError
from runtime import EventStore, NewEvent, RecordedEvent, replay
from runtime.lowlevel import CONTINUES

from ._agents import AgentSpec
from ._budget import Budget, Price
from ._session import SessionActor
from ._session_events import ChildFinished, ChildSpawned, SessionCreated, SessionState
from ._session_steps import SessionConfig, child_config, session_config
from ._tools import ToolRegistry


@final
class _NoModel:
    """The model of a replay: never asked, since every answer comes from the log."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        msg = "replay never calls the model"
        raise AssertionError(msg)

    def stream(self, request: LLMRequest) -> LLMStream:
        msg = "replay never calls the model"
        raise AssertionError(msg)


@final
@attrs.frozen(kw_only=True)
class SessionReplay:
    """A session replayed against the current code, with its sub-agents."""

    session_id: str
    state: SessionState
    """The state folded from the log (what the live session had)."""
    version: int
    checked: int
    """Recorded model answers whose request the code asked for again, identically."""
    children: tuple[SessionReplay, ...] = ()

    @property
    def total_checked(self) -> int:
        """``checked`` over the whole tree."""
        return self.checked + sum(child.total_checked for child in self.children)


async def replay_session(
    store: EventStore,
    session_id: str,
    *,
    tools: Iterable[object] | ToolRegistry = (),
    system_prompt: str | None = None,
    model: str | None = None,
    agents: Iterable[AgentSpec] = (),
    max_tokens: int | None = None,
    temperature: float | None = None,
    response_format: ResponseFormat | None = None,
    budget: Budget | None = None,
    prices: Mapping[str, Price] | None = None,
    max_depth: int = 3,
    max_children: int = 8,
) -> SessionReplay:
    """Replay a session (and its tree) with the code as configured here, at fold speed.

    Give the same arguments the session was spawned with (``spawn_session``'s); what you
    change is what replay checks. Each recorded model answer must have been asked for by
    an identical request (model, messages, tools, parameters); sub-agents are replayed
    with their specs from ``agents``.

    Args:
        store (EventStore): the log.
        session_id (str): the session to replay.
        system_prompt (str | None): the code's system prompt; ``None`` takes the one
            recorded when the session was created.
        tools, model, agents, max_tokens, temperature, response_format, budget, prices,
            max_depth, max_children: as for ``spawn_session``.

    Returns:
        SessionReplay: the folded state of each session of the tree and what was checked.

    Raises:
        ReplayDivergenceError: the code asks for something else than the log holds; the
            message names the stream, the event version and the differences.
        StreamNotFoundError: no such session in the log.
    """
    stream = f"session/{session_id}"
    if system_prompt is None:
        first = await store.read(stream, 1, limit=1)
        if not first:
            raise StreamNotFoundError(stream)
        created = decode_record(first[0])
        assert isinstance(created, SessionCreated)
        system_prompt = created.system_prompt
    config = session_config(
        session_id=session_id,
        llm=_NoModel(),
        tools=tools,
        system_prompt=system_prompt,
        model=model,
        agents=agents,
        max_tokens=max_tokens,
        temperature=temperature,
        response_format=response_format,
        budget=budget,
        prices=prices,
        max_depth=max_depth,
        max_children=max_children,
    )
    return await _replay_tree(store, config)


async def _replay_tree(store: EventStore, config: SessionConfig) -> SessionReplay:
    actor = SessionActor(config)
    result = await replay(store, actor.stream_name(), actor)
    state = result.state
    children = []
    for spawned in state.children:
        spec = config.agents.get(spawned.agent)
        if spec is None:
            continue  # spawned from Python with a spec this configuration does not know
        child = child_config(config, spec, spawned.child_id, config.tools, state.depth + 1)
        if not await store.stream_version(f"session/{spawned.child_id}"):
            continue  # an ephemeral child, deleted after it completed
        children.append(await _replay_tree(store, child))
    return SessionReplay(
        session_id=config.session_id,
        state=state,
        version=result.version,
        checked=result.checked,
        children=tuple(children),
    )


async def fork_session(
    store: EventStore, session_id: str, *, at_version: int, new_id: str
) -> str:
    """Start a new session whose history is ``session_id``'s up to ``at_version``.

    Nothing is asked of a model: the fork's stream is a copy of the original's events
    (the original is untouched), its ``SessionCreated`` records the lineage, and its
    sub-agents are forked with it: a child that had finished by then is copied whole, a
    child still running is copied as of that moment. Spawn the fork with
    ``spawn_session(session_id=new_id, ...)`` and send it new input; a fork taken in the
    middle of a run goes on with that run when it starts.

    Args:
        store (EventStore): the log.
        session_id (str): the session to fork.
        at_version (int): the last event of the original to keep (>= 1).
        new_id (str): the fork's session id.

    Returns:
        str: ``new_id``.

    Raises:
        StreamNotFoundError: no such session.
        ConfigError: ``at_version`` is outside the stream or inside one decision (events
            appended together, such as a tool call and the sub-agent it starts), or
            ``new_id`` is taken.
    """
    stream = f"session/{session_id}"
    length = await store.stream_version(stream)
    if length == 0:
        raise StreamNotFoundError(stream)
    if not 1 <= at_version <= length:
        msg = f"{stream!r} has events 1 to {length}: fork at one of them, not at {at_version}"
        raise ConfigError(msg)
    if await store.stream_version(f"session/{new_id}"):
        msg = f"session {new_id!r} already exists; pick another id for the fork"
        raise ConfigError(msg)
    records = await store.read(stream, 1, limit=at_version)
    if records[-1].metadata == CONTINUES:
        end = at_version
        for record in await store.read(stream, at_version + 1):
            end = record.version
            if record.metadata != CONTINUES:
                break
        msg = (
            f"version {at_version} of {stream!r} is inside one decision (its events up to "
            f"version {end} were appended together); fork at a version before it or at {end}"
        )
        raise ConfigError(msg)
    await _copy(store, session_id, new_id, records, lineage=(session_id, at_version))
    return new_id


async def _copy(
    store: EventStore,
    old_id: str,
    new_id: str,
    records: list[RecordedEvent],
    *,
    lineage: tuple[str, int] | None,
    new_parent: str | None = None,
) -> None:
    """Write ``records`` of ``old_id`` as ``new_id``'s stream, children forked along."""
    events = [decode_record(r) for r in records]
    cutoff = records[-1].position
    finished = {e.child_id for e in events if isinstance(e, ChildFinished)}

    def renamed(child_id: str) -> str:
        return new_id + child_id[len(old_id) :]

    def rewritten(event: object) -> object:
        if isinstance(event, SessionCreated):
            created = attrs.evolve(event, session_id=new_id)
            if lineage is not None:
                created = attrs.evolve(created, forked_from=lineage[0], forked_at=lineage[1])
            if new_parent is not None:
                created = attrs.evolve(created, parent_id=new_parent)
            return created
        if isinstance(event, ChildSpawned | ChildFinished):
            return attrs.evolve(event, child_id=renamed(event.child_id))
        return event

    out = [rewritten(event) for event in events]
    await store.append(
        f"session/{new_id}",
        [
            NewEvent.from_encoded(encode(e), metadata=r.metadata)
            for e, r in zip(out, records, strict=True)
        ],
        0,
    )
    for event in events:
        if not isinstance(event, ChildSpawned):
            continue
        child_stream = f"session/{event.child_id}"
        child_records = await store.read(child_stream)
        if event.child_id not in finished:  # as of the fork point
            child_records = [r for r in child_records if r.position < cutoff]
        if child_records:
            await _copy(
                store,
                event.child_id,
                renamed(event.child_id),
                child_records,
                lineage=None,
                new_parent=new_id,
            )


async def delete_session(store: EventStore, session_id: str) -> list[str]:
    """Delete a session's stream with its linked and ephemeral sub-agents, recursively.

    Detached sub-agents live on (that is what detached means). Stop the sessions first: a
    running session would write its stream again.

    Args:
        store (EventStore): the log.
        session_id (str): the session to delete.

    Returns:
        list[str]: the streams deleted, parents first.

    Raises:
        StreamNotFoundError: no such session.
    """
    stream = f"session/{session_id}"
    if not await store.stream_version(stream):
        raise StreamNotFoundError(stream)
    doomed = await _linked_streams(store, session_id)
    await store.delete_streams(doomed)
    return doomed


async def _linked_streams(store: EventStore, session_id: str) -> list[str]:
    streams = [f"session/{session_id}"]
    for event in map(decode_record, await store.read(streams[0])):
        if not isinstance(event, ChildSpawned) or event.lifecycle == "detached":
            continue
        if await store.stream_version(f"session/{event.child_id}"):
            streams.extend(await _linked_streams(store, event.child_id))
    return streams
