"""The blackboard actor and its handle: versioned JSON entries shared by agents."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, TypeVar, cast, final

import attrs
import orjson
import trio

from protocols import JsonValue
from protocols.errors import (
    ActorExistsError,
    ActorNotFoundError,
    ActorStoppedError,
    ConfigError,
    MailboxFullError,
)
from runtime import ActorRef, Decision, EventSourcedActor, Request, Runtime
from runtime.cluster import ClusterNode

from . import _remote as remote
from ._errors import BoardError, BoardWatchOverflowError
from ._events import (
    BOARD_ID_PATTERN,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_ENTRY_BYTES,
    BoardChanged,
    BoardState,
    BoardStatistics,
    Entry,
    EntryDeleted,
    EntryPut,
    Limits,
    WatchAdded,
    WatchRemoved,
    _encode_value,
    decide_delete,
    decide_put,
    detached,
    evolve,
    key_problem,
)
from ._requests import (
    BoardInfo,
    _AddSessionWatch,
    _AddWatch,
    _Delete,
    _Describe,
    _Get,
    _GetState,
    _List,
    _Put,
    _RemoveSessionWatch,
    request_of,
)
from ._watches import Watch, WatchTable, watch_filter

__all__ = ["Board", "open_board", "perform"]

T = TypeVar("T")

logger = logging.getLogger("powertrio.board")

DEFAULT_WATCH_BUFFER: Final = 1000
"""How many undelivered changes a Python watch buffers before it is dropped."""


@final
class _BoardActor(EventSourcedActor[BoardState]):
    """One board: the only writer of the stream ``board/<id>``."""

    def __init__(
        self, board_id: str, limits: Limits, watches: WatchTable, runtime: Runtime
    ) -> None:
        self._board_id = board_id
        self._limits = limits
        self._watches = watches
        self._runtime = runtime

    def stream_name(self) -> str:
        return f"board/{self._board_id}"

    def initial_state(self) -> BoardState:
        return BoardState()

    def evolve(self, state: BoardState, event: object) -> BoardState:
        return evolve(state, event)

    def handle(self, state: BoardState, message: object) -> Decision:
        if isinstance(message, _Put | _Delete) and message.request is not None:
            done = state.requests.get(message.request)
            if done is not None:
                return Decision(reply=done)  # a relayed write performed before: its answer
        if isinstance(message, _Put):
            put = decide_put(
                state,
                board_id=self._board_id,
                limits=self._limits,
                key=message.key,
                value=message.value,
                expected_version=message.expected_version,
                author=message.author,
            )
            if isinstance(put, BoardError):
                return Decision(reply=put)
            put = attrs.evolve(put, request=message.request)
            stored = Entry(
                key=put.key,
                value=put.value,
                version=put.version,
                author=put.author,
                board_version=state.version + 1,
            )
            return Decision(events=[put], reply=stored)
        if isinstance(message, _Delete):
            deletion = decide_delete(
                state,
                board_id=self._board_id,
                key=message.key,
                expected_version=message.expected_version,
                author=message.author,
            )
            if deletion is None:
                return Decision(reply=False)  # no such key: nothing to write
            if isinstance(deletion, BoardError):
                return Decision(reply=deletion)
            deletion = attrs.evolve(deletion, request=message.request)
            return Decision(events=[deletion], reply=True)
        if isinstance(message, _Get):
            bad = key_problem(message.key)
            if bad is not None:
                return Decision(reply=bad)
            assert isinstance(message.key, str)
            return Decision(reply=state.entries.get(message.key))
        if isinstance(message, _List):
            bad = key_problem(message.prefix, prefix=True)
            if bad is not None:
                return Decision(reply=bad)
            assert isinstance(message.prefix, str)
            prefix = message.prefix
            return Decision(
                reply=tuple(
                    state.entries[key] for key in sorted(state.entries) if key.startswith(prefix)
                )
            )
        if isinstance(message, _AddSessionWatch):
            for existing in state.watches.values():
                if (existing.watcher, existing.keys, existing.prefix) == (
                    message.watcher,
                    message.keys,
                    message.prefix,
                ):
                    return Decision(reply=existing.watch_id)  # each change arrives once
            added = WatchAdded(
                watch_id=message.watch_id,
                watcher=message.watcher,
                keys=message.keys,
                prefix=message.prefix,
            )
            return Decision(events=[added], reply=added.watch_id)
        if isinstance(message, _RemoveSessionWatch):
            if message.watch_id not in state.watches:
                return Decision(reply=False)
            return Decision(events=[WatchRemoved(watch_id=message.watch_id)], reply=True)
        if isinstance(message, _GetState):
            return Decision(reply=state)
        if isinstance(message, _Describe):
            return Decision(reply=BoardInfo(self._limits, self._watches))
        msg = f"a board takes no {type(message).__name__} messages; use the Board handle"
        raise TypeError(msg)

    async def receive(self, message: object) -> object:
        if isinstance(message, _AddWatch):
            # Through the mailbox, so the watch sees exactly the writes handled after it.
            return self._watches.add(message.watch)
        return await super().receive(message)

    def after_persist(self, events: Sequence[object]) -> None:
        watches = self._watches
        durable = self.state.watches
        if not watches.watches and not durable:
            return
        first = self.version - len(events) + 1
        for offset, event in enumerate(events):
            if isinstance(event, EntryPut):
                value, deleted = event.value, False
            elif isinstance(event, EntryDeleted):
                value, deleted = None, True
            else:
                continue
            change = BoardChanged(
                board_id=self._board_id,
                key=event.key,
                version=event.version,
                value=value,
                deleted=deleted,
                author=event.author,
                board_version=first + offset,
            )
            watches.deliver(change)
            self._deliver_to_sessions(durable, change)

    def _deliver_to_sessions(self, durable: Mapping[str, WatchAdded], change: BoardChanged) -> None:
        """Tell each session with a matching durable watch, if it runs in this runtime.

        The watcher is looked up by id at each change: a session spawned again (after a
        crash, in a new process) gets the changes of its recorded watch with no re-watch.
        A session not running now misses the change; it reads the board when it starts.
        """
        for watch in tuple(durable.values()):
            if not watch.matches(change.key):
                continue
            try:
                ref = self._runtime.lookup(watch.watcher)
                ref.tell_nowait(attrs.evolve(change, value=detached(change.value)))
            except (ActorNotFoundError, ActorStoppedError):
                node = ClusterNode.of(self._runtime)
                if node is not None and not node.owns(watch.watcher):
                    remote.notify_session(node, watch.watcher, change)
                continue  # not running now: the watch waits in the log for its session
            except MailboxFullError:
                logger.warning(
                    "board %r could not tell %s of %s v%d (watch %s): its mailbox is full",
                    self._board_id,
                    watch.watcher,
                    change.key,
                    change.version,
                    watch.watch_id,
                )


# -- the public face ------------------------------------------------------------------


def _detach(entry: Entry) -> Entry:
    return attrs.evolve(entry, value=detached(entry.value))


def _check_author(author: object) -> str:
    if not isinstance(author, str) or not author:
        msg = f"author must be a non-empty str, got {author!r}"
        raise ValueError(msg)
    return author


def _check_expected(expected_version: object) -> int | None:
    if expected_version is None:
        return None
    if (
        not isinstance(expected_version, int)
        or isinstance(expected_version, bool)
        or expected_version < 0
    ):
        msg = (
            "expected_version must be an int >= 0 (0: the key must not exist) or None, "
            f"got {expected_version!r}"
        )
        raise ValueError(msg)
    return expected_version


@final
class Board:
    """A handle on one blackboard: read, write (optionally compare-and-set), list, watch.

    Made by :func:`open_board`. Every write is an event in the board's own stream
    (``board/<id>``), appended before anyone is told, so the board after a restart is the
    fold of its log. Each write carries an ``author``: Python callers name themselves (the
    default is ``"python"``); agents write through :func:`board_tools`, which stamp
    ``session:<id>`` from the runtime, never from the model's arguments.

    Two kinds of watches. A session's watch (:meth:`watch_session`, which the
    ``board_watch`` tool uses) is recorded in the board's log as a :class:`WatchAdded`
    event naming the session by id: it outlives every restart of the board, the session
    and the process, and needs no re-watching. Python watches (:meth:`watch`,
    :meth:`watch_actor`) name a live channel or ref, which a new runtime would not have:
    they live in memory, survive a crash and restart of the board actor, but not the end
    of the runtime.
    """

    __slots__ = ("_asked", "_id", "_info", "_ref", "_runtime")
    _asked: dict[str, int | None]
    _id: str
    _info: BoardInfo
    _ref: ActorRef[object] | None
    _runtime: Runtime

    def __init__(self) -> None:
        msg = "Board is made by open_board(): `board = await open_board(runtime, 'notes')`"
        raise TypeError(msg)

    @classmethod
    def _create(
        cls,
        board_id: str,
        ref: ActorRef[object] | None,
        runtime: Runtime,
        info: BoardInfo,
        asked: dict[str, int | None],
    ) -> Board:
        self = object.__new__(cls)
        self._id = board_id
        self._ref = ref
        self._runtime = runtime
        self._info = info
        self._asked = asked
        return self

    async def _local_ask(self, message: Request[T]) -> T:
        """Ask this runtime's board actor (on a node: the caller checked it owns it)."""
        if self._ref is None:
            msg = f"board {self._id!r} does not run on this node"
            raise ActorNotFoundError(msg)
        return await self._ref.ask(message)

    async def _ask(self, message: Request[T], body: dict[str, Any]) -> T:
        """Ask the board: its actor here, or, on a node of a fleet, its owner wherever it
        runs (the owner serialises every write, so compare-and-set holds fleet-wide)."""
        node = ClusterNode.of(self._runtime)
        if node is None:
            return await self._local_ask(message)
        ask_here = partial(self._ask_here, message)
        reply = await remote.relay(node, self._runtime, self._id, {**body, **self._asked}, ask_here)
        return cast("T", reply)

    async def _ask_here(self, message: Request[T]) -> T:
        """Ask the board actor of this node, which owns the board: started with the
        limits this handle asked for if it does not run here yet."""
        try:
            ref = self._runtime.lookup(f"board:{self._id}")  # running: ask it at once
        except ActorNotFoundError:
            board = await open_board(
                self._runtime,
                self._id,
                max_entries=self._asked["max_entries"],
                max_entry_bytes=self._asked["max_entry_bytes"],
            )
            return await board._local_ask(message)
        return cast("T", await ref.ask(message))

    def __repr__(self) -> str:
        return f"<Board {self._id!r}>"

    @property
    def id(self) -> str:
        """The board id (its stream is ``board/<id>``)."""
        return self._id

    @property
    def ref(self) -> ActorRef[object]:
        """The board actor's ref.

        Raises:
            ActorNotFoundError: on a node of a fleet, the board runs on another node.
        """
        if self._runtime.node is not None:
            return self._runtime.lookup(f"board:{self._id}")
        assert self._ref is not None
        return self._ref

    @property
    def runtime(self) -> Runtime:
        """The runtime the board runs in."""
        return self._runtime

    @property
    def max_entries(self) -> int:
        """The most entries the board holds."""
        return self._info.limits.max_entries

    @property
    def max_entry_bytes(self) -> int:
        """The largest entry (key plus JSON-encoded value), in bytes."""
        return self._info.limits.max_entry_bytes

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key``, or ``None`` when there is none.

        Raises:
            BoardBadKeyError: ``key`` breaks the key rules.
            ActorStoppedError: the runtime is closing.
        """
        reply = await self._ask(_Get(key), {"op": "get", "key": key})
        if isinstance(reply, BoardError):
            raise reply
        return None if reply is None else _detach(reply)

    async def put(
        self,
        key: str,
        value: JsonValue,
        *,
        expected_version: int | None = None,
        author: str = "python",
    ) -> Entry:
        """Write ``value`` under ``key``; with ``expected_version``, only if it still holds.

        Args:
            key (str): 1 to 256 characters from ``A-Z a-z 0-9 _ - . / :``.
            value (JsonValue): plain JSON: ``dict`` (str keys), ``list``, ``str``, ``int``,
                finite ``float``, ``bool``, ``None``.
            expected_version (int | None): compare-and-set: the key's version as last read
                (0: the key must not exist); ``None`` writes whatever the version.
            author (str): who writes, recorded with the entry.

        Returns:
            Entry: the entry as written, with its new version.

        Raises:
            BoardConflictError: the key is not at ``expected_version``; nothing was written.
            BoardBadKeyError: ``key`` breaks the key rules.
            BoardBadValueError: ``value`` is not plain JSON.
            BoardEntryTooLargeError: key plus encoded value exceed ``max_entry_bytes``.
            BoardFullError: ``key`` is new and the board holds ``max_entries`` entries.
            ValueError: ``expected_version`` or ``author`` is invalid.
            ActorCrashedError: the append failed (the board restarts from its log).
        """
        message = _Put(
            key=key,
            value=value,
            expected_version=_check_expected(expected_version),
            author=_check_author(author),
        )
        if self._runtime.node is not None:
            # Refused here what JSON would silently change on its way to the owner.
            bad = key_problem(key) or _encode_value(self._id, key, value, 1 << 62)
            if isinstance(bad, BoardError):
                raise bad
        body = {
            "op": "put",
            "key": key,
            "value": value,
            "expected": message.expected_version,
            "author": message.author,
        }
        reply = await self._ask(message, body)
        if isinstance(reply, BoardError):
            raise reply
        return _detach(reply)

    async def delete(
        self, key: str, *, expected_version: int | None = None, author: str = "python"
    ) -> bool:
        """Delete ``key``; with ``expected_version``, only if it still holds.

        Args:
            key (str): the key.
            expected_version (int | None): compare-and-set, as in :meth:`put`; 0 succeeds
                (deleting nothing) when the key does not exist.
            author (str): who deletes, recorded with the deletion.

        Returns:
            bool: whether an entry was deleted (``False``: there was none, nothing written).

        Raises:
            BoardConflictError: the key is not at ``expected_version``; nothing was written.
            BoardBadKeyError: ``key`` breaks the key rules.
            ValueError: ``expected_version`` or ``author`` is invalid.
            ActorCrashedError: the append failed (the board restarts from its log).
        """
        message = _Delete(
            key=key,
            expected_version=_check_expected(expected_version),
            author=_check_author(author),
        )
        body = {
            "op": "delete",
            "key": key,
            "expected": message.expected_version,
            "author": message.author,
        }
        reply = await self._ask(message, body)
        if isinstance(reply, BoardError):
            raise reply
        return reply

    async def list(self, prefix: str = "") -> tuple[Entry, ...]:
        """The entries whose key starts with ``prefix``, sorted by key.

        Raises:
            BoardBadKeyError: ``prefix`` breaks the key rules (it may be empty).
        """
        reply = await self._ask(_List(prefix), {"op": "list", "prefix": prefix})
        if isinstance(reply, BoardError):
            raise reply
        return tuple(_detach(entry) for entry in reply)

    async def state(self) -> BoardState:
        """The board's folded state (every entry, the versions of deleted keys).

        A read-only view: unlike :meth:`get` and :meth:`list`, it does not copy values.
        On a node of a fleet it is the fold of the board's log as read now (every
        acknowledged write is there), wherever the board runs.
        """
        if self._runtime.node is not None:
            return await remote.fold(self._runtime, self._id)
        return await self._local_ask(_GetState())

    async def statistics(self) -> BoardStatistics:
        """A snapshot of the board (it asks the actor, so it is async)."""
        state = await self.state()
        watches = self._info.watches
        return BoardStatistics(
            entries=len(state.entries),
            version=state.version,
            watches=len(watches.watches) + len(state.watches),
            watches_dropped=watches.dropped,
        )

    @asynccontextmanager
    async def watch(
        self,
        *,
        keys: Iterable[str] | None = None,
        prefix: str | None = None,
        buffer: int = DEFAULT_WATCH_BUFFER,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[BoardChanged]]:
        """Receive a :class:`BoardChanged` for each change of the watched keys, in order.

        Example::

            async with board.watch(prefix="plan/") as changes:
                async for change in changes:
                    print(change.key, change.version, change.author)

        Every change the board handles after this call returns is delivered; the board
        never waits for a watcher. A watcher ``buffer`` changes behind is dropped: its
        channel ends after the changes it already has, and leaving the block raises
        :class:`BoardWatchOverflowError` (unless the block is already raising).

        Args:
            keys (Iterable[str] | None): watch exactly these keys.
            prefix (str | None): watch every key starting with it (``""``: every key).
                Neither given: every key.
            buffer (int): undelivered changes held before the watch is dropped.

        Yields:
            The receiving end; it is closed when the block ends.

        Raises:
            BoardBadKeyError: a key or the prefix breaks the key rules.
            BoardWatchOverflowError: on leaving, if the watch fell ``buffer`` changes behind.
            ValueError: both ``keys`` and ``prefix``, empty ``keys``, or ``buffer`` < 1.
            TypeError: ``keys`` is a str (wrap it in a list).
        """
        chosen, start = watch_filter(keys, prefix)
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            msg = f"buffer must be an int >= 1, got {buffer!r}"
            raise ValueError(msg)
        send, receive = trio.open_memory_channel[BoardChanged](buffer)
        watch = Watch(self._runtime.ids.new("watch"), chosen, start, send)
        node = ClusterNode.of(self._runtime)
        if node is not None:
            # On a fleet the watch follows the board's log, wherever the board runs.
            after = await self._runtime.store.stream_version(f"board/{self._id}")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    remote.tail,
                    self._runtime,
                    self._id,
                    watch,
                    send,
                    after,
                    node.config.poll_interval,
                )
                try:
                    with receive:
                        yield receive
                finally:
                    nursery.cancel_scope.cancel()
                    send.close()
        else:
            try:
                await self._local_ask(_AddWatch(watch))
                with receive:
                    yield receive
            finally:
                self._info.watches.remove(watch.id)
                send.close()
        if watch.overflowed:
            raise BoardWatchOverflowError(self._id, buffer)

    async def watch_actor(
        self,
        ref: ActorRef[object],
        *,
        keys: Iterable[str] | None = None,
        prefix: str | None = None,
    ) -> str:
        """Send a :class:`BoardChanged` message to an actor for each change it watches.

        The board never waits for the actor: if its mailbox is full (``reject`` policy) or
        it has stopped, the watch is dropped. Watching the same keys or prefix twice with
        the same actor gives the same watch, so each change arrives once.

        Args:
            ref (ActorRef): the watcher.
            keys (Iterable[str] | None): watch exactly these keys.
            prefix (str | None): watch every key starting with it (``""``: every key).

        Returns:
            str: the watch id, for :meth:`unwatch`.

        Raises:
            BoardBadKeyError: a key or the prefix breaks the key rules.
            ValueError: both ``keys`` and ``prefix``, or empty ``keys``.
            TypeError: ``keys`` is a str (wrap it in a list).
        """
        chosen, start = watch_filter(keys, prefix)
        if self._runtime.node is not None:
            msg = (
                "watch_actor names a live ref of one runtime, which a board on another node "
                "cannot reach: on a fleet, use watch() (it follows the log) or watch_session()"
            )
            raise ConfigError(msg)
        watch = Watch(self._runtime.ids.new("watch"), chosen, start, ref)
        return await self._local_ask(_AddWatch(watch))

    async def watch_session(
        self,
        session_id: str,
        *,
        keys: Iterable[str] | None = None,
        prefix: str | None = None,
    ) -> str:
        """Record that a session watches keys: each change then reaches it as a message.

        Unlike :meth:`watch_actor`, the watch is an event in the board's log
        (:class:`WatchAdded`), so it is re-established from the log after any restart: of
        the board, of the session, of the process. Whenever a change matches, the board
        tells the session's actor if it is running in the runtime then (a session not
        running misses the change; it reads the board when it starts). Watching the same
        keys or prefix twice gives the same watch.

        Args:
            session_id (str): the watching session (its actor id).
            keys (Iterable[str] | None): watch exactly these keys.
            prefix (str | None): watch every key starting with it (``""``: every key).

        Returns:
            str: the watch id, for :meth:`unwatch_session`.

        Raises:
            BoardBadKeyError: a key or the prefix breaks the key rules.
            ValueError: both ``keys`` and ``prefix``, empty ``keys``, or an empty
                ``session_id``.
            TypeError: ``keys`` is a str (wrap it in a list).
            ActorCrashedError: the append failed (the board restarts from its log).
        """
        if not isinstance(session_id, str) or not session_id:
            msg = f"session_id must be a non-empty str, got {session_id!r}"
            raise ValueError(msg)
        chosen, start = watch_filter(keys, prefix)
        message = _AddSessionWatch(
            watch_id=self._runtime.ids.new("watch"),
            watcher=session_id,
            keys=None if chosen is None else tuple(sorted(chosen)),
            prefix=start,
        )
        body = {
            "op": "watch_session",
            "watch_id": message.watch_id,
            "watcher": message.watcher,
            "keys": message.keys,
            "prefix": message.prefix,
        }
        return await self._ask(message, body)

    async def unwatch_session(self, watch_id: str) -> bool:
        """End a session's watch (:meth:`watch_session`), recording it in the log.

        Returns:
            bool: whether the watch existed (``False``: nothing was written).

        Raises:
            ActorCrashedError: the append failed (the board restarts from its log).
        """
        body = {"op": "unwatch_session", "watch_id": watch_id}
        return await self._ask(_RemoveSessionWatch(watch_id), body)

    def unwatch(self, watch_id: str) -> bool:
        """End a watch made by :meth:`watch_actor`; no change is delivered to it afterwards.

        Returns:
            bool: whether the watch existed (``False`` if it was dropped or ended already).
        """
        return self._info.watches.remove(watch_id)


def _check_limit(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{name} must be an int >= 1 or None, got {value!r}"
        raise ConfigError(msg)
    return value


async def open_board(
    runtime: Runtime,
    board_id: str,
    *,
    max_entries: int | None = None,
    max_entry_bytes: int | None = None,
) -> Board:
    """Start the board actor under the runtime's root (or find the running one).

    A board that was used before is rebuilt from its stream ``board/<id>`` in the
    runtime's event store: entries, versions and authors come back as they were.

    Args:
        runtime (Runtime): the runtime; its event store holds the board's stream.
        board_id (str): 1 to 128 characters from ``A-Z a-z 0-9 _ - . :``.
        max_entries (int | None): the most entries the board holds; ``None``: the running
            board's limit, or 1000 for a board not running yet. Lowering it below the
            number of entries a board already holds refuses new keys, nothing more.
        max_entry_bytes (int | None): the largest entry (key plus JSON-encoded value);
            ``None``: the running board's limit, or 64 KiB.

    Returns:
        Board: the handle; any number of handles may share one board.

    Raises:
        ConfigError: ``board_id`` or a limit is invalid, or a limit differs from the one
            the running board was opened with.
        RuntimeClosedError: the runtime is closing.
    """
    if not isinstance(board_id, str) or BOARD_ID_PATTERN.fullmatch(board_id) is None:
        msg = f"board_id must be 1 to 128 characters from A-Z a-z 0-9 and _ - . :, got {board_id!r}"
        raise ConfigError(msg)
    entries = _check_limit("max_entries", max_entries)
    entry_bytes = _check_limit("max_entry_bytes", max_entry_bytes)
    actor_id = f"board:{board_id}"
    asked = {"max_entries": entries, "max_entry_bytes": entry_bytes}
    node = ClusterNode.of(runtime)
    if node is not None and not node.owns_target(f"board/{board_id}"):
        # Another node runs it: the handle relays each call to the owner.
        limits = Limits(
            entries if entries is not None else DEFAULT_MAX_ENTRIES,
            entry_bytes if entry_bytes is not None else DEFAULT_MAX_ENTRY_BYTES,
        )
        return Board._create(board_id, None, runtime, BoardInfo(limits, WatchTable()), asked)
    try:
        ref = runtime.lookup(actor_id)
    except ActorNotFoundError:
        limits = Limits(
            entries if entries is not None else DEFAULT_MAX_ENTRIES,
            entry_bytes if entry_bytes is not None else DEFAULT_MAX_ENTRY_BYTES,
        )
        table = WatchTable()

        def factory() -> _BoardActor:
            return _BoardActor(board_id, limits, table, runtime)

        try:
            ref = await runtime.spawn(factory, id=actor_id)
        except ActorExistsError:  # another task opened it meanwhile
            ref = runtime.lookup(actor_id)
    info = await ref.ask(_Describe())
    for name, wanted, running in (
        ("max_entries", entries, info.limits.max_entries),
        ("max_entry_bytes", entry_bytes, info.limits.max_entry_bytes),
    ):
        if wanted is not None and wanted != running:
            msg = (
                f"board {board_id!r} is running with {name}={running}, not {wanted}; "
                f"open it without {name} to share it, or restart the runtime to change it"
            )
            raise ConfigError(msg)
    return Board._create(board_id, ref, runtime, info, asked)


async def perform(runtime: Runtime, stream: str, body: bytes) -> bytes:
    """Carry out one relayed board call on this node's board actor; the answer to record.

    The board is opened with the limits the caller's handle asked for (``None``: the
    running board's), so a mismatch fails here as it would on one node.

    Raises:
        FencedError, ActorStoppedError: this node lost the board meanwhile (the caller's
            message stays pending for the next owner).
    """
    board_id = stream.partition("/")[2]
    data = orjson.loads(body)
    try:
        board = await open_board(
            runtime,
            board_id,
            max_entries=data.get("max_entries"),
            max_entry_bytes=data.get("max_entry_bytes"),
        )
        reply = await board._local_ask(request_of(data))
    except Exception as exc:
        if remote.fenced(exc):
            raise
        return remote.encode_reply(exc)
    return remote.encode_reply(reply)
