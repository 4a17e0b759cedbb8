"""A blackboard on a fleet of nodes: the owner serialises, any node calls, watchers tail.

On a runtime opened with ``node=``, a board's stream ``board/<id>`` is placed on a shard
and fenced like a session's, so one node at a time owns (runs) the board actor. A
:class:`Board` handle on any node turns each call into a request: asked of the local
actor when this node holds the board's shard, else relayed through the owner's durable
inbox (``ClusterNode.post``) and performed there by :func:`perform` (``host_node``
serves the inbox). Compare-and-set holds because every write of a board, from every
node, is decided by its one owner in order, and appended under its lease: a former
owner's late write is fenced and writes nothing.

A watch on a node follows the log, not the actor: it reads the board's stream by
version (versions are gap-free: each append is checked against the one before), so it
sees every committed change in order, whichever node owned the board when it was made,
and across a failover. docs/cluster.md tells the design.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
import trio

from protocols.codec import decode_record
from protocols.errors import (
    ActorFailedError,
    ActorStoppedError,
    FencedError,
    PowertrioError,
    RuntimeClosedError,
    StoreUnavailableError,
)

from ._errors import (
    BoardBadKeyError,
    BoardBadValueError,
    BoardConflictError,
    BoardEntryTooLargeError,
    BoardError,
    BoardFullError,
    RemoteBoardError,
)
from ._events import BoardChanged, BoardState, Entry, EntryDeleted, EntryPut, evolve

if TYPE_CHECKING:
    from runtime import Runtime
    from runtime.cluster import ClusterNode

    from ._watches import Watch

__all__ = ["encode_reply", "fenced", "fold", "notify_session", "relay", "tail"]

_SETTLE_ROUNDS = 20
"""Lease rounds a local call fenced under a lease still believed held waits for the
node's view to catch up, before giving up with the error."""

_ERRORS: dict[str, type[BoardError]] = {
    cls.code: cls
    for cls in (
        BoardConflictError,
        BoardEntryTooLargeError,
        BoardFullError,
        BoardBadKeyError,
        BoardBadValueError,
    )
}
"""The board's own errors, rebuilt as themselves on the caller's node (their attributes
are their constructor's arguments)."""


def fenced(exc: BaseException) -> bool:
    """Whether a local call failed because this node's lease is gone (or going)."""
    if isinstance(exc, FencedError | ActorStoppedError | RuntimeClosedError):
        return True
    return isinstance(exc, ActorFailedError) and exc.cause_code == FencedError.code


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "value": entry.value,
        "version": entry.version,
        "author": entry.author,
        "board_version": entry.board_version,
    }


def _entry(data: dict[str, Any]) -> Entry:
    return Entry(
        key=data["key"],
        value=data["value"],
        version=data["version"],
        author=data["author"],
        board_version=data["board_version"],
    )


def _to_json(reply: object) -> object:
    """A board actor's reply as JSON (an entry, entries, a bool, a watch id, ``None``)."""
    if isinstance(reply, Entry):
        return {"entry": _entry_json(reply)}
    if isinstance(reply, tuple):
        return {"entries": [_entry_json(e) for e in reply if isinstance(e, Entry)]}
    return {"plain": reply}


def _from_json(data: dict[str, Any]) -> object:
    if "entry" in data:
        return _entry(data["entry"])
    if "entries" in data:
        return tuple(_entry(e) for e in data["entries"])
    return data["plain"]


def _encode_error(exc: BaseException) -> bytes:
    if isinstance(exc, BoardError) and exc.code in _ERRORS:
        names = list(inspect.signature(type(exc).__init__).parameters)[1:]
        fields = {name: getattr(exc, name) for name in names}
        return orjson.dumps({"error": {"code": exc.code, "fields": fields}})
    code = exc.code if isinstance(exc, PowertrioError) else type(exc).__name__
    return orjson.dumps({"error": {"code": code, "message": str(exc)}})


def _decode(board_id: str, reply: bytes) -> object:
    """The owner's answer; its error raised as the board's own, or ``RemoteBoardError``."""
    data = orjson.loads(reply)
    error = data.get("error")
    if error is None:
        return _from_json(data["ok"])
    cls = _ERRORS.get(str(error["code"]))
    if cls is not None and "fields" in error:
        return cls(**error["fields"])
    return RemoteBoardError(board_id, str(error["code"]), str(error.get("message", "")))


def encode_reply(reply: object) -> bytes:
    """The owner's answer to record for a relayed call: the actor's reply (an entry,
    entries, a bool, a watch id, ``None``) as JSON, or the error it ended with."""
    if isinstance(reply, BaseException):
        return _encode_error(reply)
    return orjson.dumps({"ok": _to_json(reply)})


async def relay(
    node: ClusterNode,
    runtime: Runtime,
    board_id: str,
    body: dict[str, Any],
    ask_here: Callable[[], Awaitable[object]],
) -> object:
    """Ask the board's owner: this node's actor if it holds the shard (``ask_here``, which
    starts the actor if it does not run), else the inbox.

    Returns the actor's reply (a ``BoardError`` is returned, not raised, as the actor
    does). A call fenced locally (the shard moved while it ran) wrote nothing, so it is
    sent again through the inbox.
    """
    stream = f"board/{board_id}"
    for _ in range(_SETTLE_ROUNDS):
        if not node.owns_target(stream):
            break
        try:
            return await ask_here()
        except Exception as exc:
            if not fenced(exc):
                raise
            if node.owns_target(stream):
                await trio.sleep(node.config.ttl / 3)
    message_id = f"{stream}/{body['op']}/{runtime.ids.new('b')}"
    # The message id goes with the call: a write performed again by the next owner (the
    # last one died before answering) finds it in the log and answers as the first time.
    reply = await node.post(stream, message_id, orjson.dumps({**body, "request": message_id}))
    return _decode(board_id, reply)


async def fold(runtime: Runtime, board_id: str) -> BoardState:
    """The board's state as its log holds it now (every acknowledged write is there)."""
    state = BoardState()
    for record in await runtime.store.read(f"board/{board_id}"):
        state = evolve(state, decode_record(record))
    return state


async def tail(  # noqa: PLR0917  # started by nursery.start_soon
    runtime: Runtime,
    board_id: str,
    watch: Watch,
    send: trio.MemorySendChannel[BoardChanged],
    after: int,
    poll: float,
) -> None:
    """Deliver to ``watch`` every change of the board after version ``after``, in order,
    by reading its stream from the log, until the watch ends or overflows.

    A read that finds the server unreachable is tried again after ``poll``: nothing is
    skipped, as the next read starts where the last one ended.
    """
    stream = f"board/{board_id}"
    version = after
    while True:
        try:
            records = await runtime.store.read(stream, version + 1)
        except StoreUnavailableError:  # the server is back soon, or the store retries
            await trio.sleep(poll)
            continue
        for record in records:
            event = decode_record(record)
            if isinstance(event, EntryPut):
                value, deleted = event.value, False
            elif isinstance(event, EntryDeleted):
                value, deleted = None, True
            else:
                continue
            change = BoardChanged(
                board_id=board_id,
                key=event.key,
                version=event.version,
                value=value,
                deleted=deleted,
                author=event.author,
                board_version=record.version,
            )
            if not watch.matches(change.key):
                continue
            try:
                send.send_nowait(change)
            except trio.WouldBlock:
                watch.overflowed = True
                send.close()  # the watcher drains what it has, then learns of the loss
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
        if records:
            version = records[-1].version
        else:
            await trio.sleep(poll)


def notify_session(node: ClusterNode, session_id: str, change: BoardChanged) -> None:
    """Tell a watching session on another node of a change: a follow-up in its owner's
    inbox, whose id is the change's (board, board version, key), so the session takes it
    once however often it is told."""
    follow_up = change.as_follow_up()
    body = {"op": "follow_up", "content": follow_up.content, "id": follow_up.id, "kind": "board"}
    node.post_soon(session_id, f"{session_id}/fu/{follow_up.id}", orjson.dumps(body))
