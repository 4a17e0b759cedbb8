"""The events of a board's stream, its folded state, and the pure decisions on writes."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Final, Literal, cast, final

import attrs
import orjson

from protocols import FollowUp, JsonValue
from protocols.codec import event_type

from .._session._follow_ups import FollowUpSource
from ._errors import (
    BoardBadKeyError,
    BoardBadValueError,
    BoardConflictError,
    BoardEntryTooLargeError,
    BoardError,
    BoardFullError,
)

__all__ = [
    "BoardChanged",
    "BoardState",
    "BoardStatistics",
    "Entry",
    "EntryDeleted",
    "EntryPut",
    "WatchAdded",
    "WatchRemoved",
    "evolve",
]

KEY_MAX_LENGTH: Final = 256
"""The longest key (and watch prefix), in characters."""
KEY_PATTERN: Final = r"^[A-Za-z0-9_./:-]{1,256}$"
"""Every key matches this (the tools' JSON Schema uses it too)."""
_KEY_RULE: Final = "a key is 1 to 256 characters from A-Z a-z 0-9 and _ - . / :"
_PREFIX_RULE: Final = "a prefix is 0 to 256 characters from A-Z a-z 0-9 and _ - . / :"
_KEY_CHARS: Final = re.compile(r"[A-Za-z0-9_./:-]*")
BOARD_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""Every board id matches this in full (no ``/``: the id is one segment of an actor path)."""

DEFAULT_MAX_ENTRIES: Final = 1000
"""How many entries a board holds unless opened with another ``max_entries``."""
DEFAULT_MAX_ENTRY_BYTES: Final = 64 * 1024
"""How large an entry (key plus JSON value) may be unless opened with another limit."""


# -- values ---------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Entry:
    """One key of a board as it is now."""

    key: str
    """The key."""
    value: JsonValue
    """The JSON value (plain ``dict``/``list``/scalars); a copy of the board's."""
    version: int
    """The key's own version: 1 when first written, one more at every change.

    Deleting a key counts as a change, and writing it again continues from there, so a
    key never shows the same version twice: a compare-and-set cannot be fooled by a key
    that was deleted and written again meanwhile.
    """
    author: str
    """Who wrote this version, stamped by the runtime (``session:<id>`` for an agent)."""
    board_version: int
    """The board's stream version of the write (the board's version when it was made)."""


@final
@attrs.frozen(kw_only=True)
class BoardChanged(FollowUpSource):
    """The message a watcher receives for each change of a key it watches.

    Sent after the change is in the log, in the board's order.
    """

    board_id: str
    """The board that changed."""
    key: str
    """The key that changed."""
    version: int
    """The key's version after the change (a deletion takes a version too)."""
    value: JsonValue
    """The new value (this watcher's own copy); ``None`` for a deletion."""
    deleted: bool
    """Whether the key was deleted."""
    author: str
    """Who made the change, stamped by the runtime."""
    board_version: int
    """The board's stream version of the change."""

    def as_follow_up(self) -> FollowUp:
        """A watching session reads the change as a follow-up of kind ``board``, whose id
        is the change's (board, board version, key): taken once however often it is told."""
        if self.deleted:
            what = f"{self.key!r} was deleted"
        else:
            what = f"{self.key!r} is now {orjson.dumps(self.value).decode()}"
        return FollowUp(
            id=f"board:{self.board_id}:{self.board_version}:{self.key}",
            content=f"[board {self.board_id}] {what} (version {self.version}, by {self.author})",
            kind="board",
        )


@final
@attrs.frozen(kw_only=True)
class BoardState:
    """The fold of a board's stream: what :func:`evolve` makes of its events.

    A read-only view: its entries' values are the board's own, not copies.
    """

    entries: Mapping[str, Entry] = attrs.field(factory=dict)
    """The live entries by key."""
    deleted: Mapping[str, int] = attrs.field(factory=dict)
    """The last version of each deleted key, so writing it again continues from there."""
    version: int = 0
    """The board's stream version folded into this state."""
    watches: Mapping[str, WatchAdded] = attrs.field(factory=dict)
    """The durable watches by id (:meth:`Board.watch_session`), as their log recorded them."""
    requests: Mapping[str, Entry | bool] = attrs.field(factory=dict)
    """The answers of the latest relayed writes by request id (at most
    ``KEPT_REQUESTS``): a repeat of one is answered with them, writing nothing."""

    def version_of(self, key: str) -> int:
        """The key's current version; 0 when it does not exist (never written or deleted)."""
        entry = self.entries.get(key)
        return 0 if entry is None else entry.version


@final
@attrs.frozen(kw_only=True)
class BoardStatistics:
    """A snapshot of a board."""

    entries: int
    """Live entries."""
    version: int
    """The board's stream version."""
    watches: int
    """Watches registered now (Python channels and actors, and the durable watches of
    sessions)."""
    watches_dropped: int
    """Watches dropped because their watcher could not keep up."""


# -- events ---------------------------------------------------------------------------


@final
@event_type("board.entry_put")
@attrs.frozen(kw_only=True)
class EntryPut:
    """A key was written."""

    key: str
    """The key written."""
    value: JsonValue
    """The value written (opaque JSON: the codec stores it as is)."""
    version: int
    """The key's new version (decided by the board, never by the writer)."""
    author: str
    """The writer's identity, stamped by the runtime."""
    request: str | None = None
    """The relayed call that made it (a node's inbox message id), so a call performed
    again after its owner died unanswered is answered from the log; ``None``: local."""


@final
@event_type("board.entry_deleted")
@attrs.frozen(kw_only=True)
class EntryDeleted:
    """A key was deleted."""

    key: str
    """The key deleted."""
    version: int
    """The version the deletion took."""
    author: str
    """The writer's identity, stamped by the runtime."""
    request: str | None = None
    """The relayed call that made it (a node's inbox message id), so a call performed
    again after its owner died unanswered is answered from the log; ``None``: local."""


@final
@event_type("board.watch_added")
@attrs.frozen(kw_only=True)
class WatchAdded:
    """A session watches keys of the board; recorded, so the watch outlives any restart.

    The watcher is named by its session id, not by a live ref: whenever a change matches,
    the board finds the session's actor in the runtime running then, so a watch made in
    one process wakes the same session in the next one.
    """

    watch_id: str
    """The watch's id (what the ``board_watch`` tool returned)."""
    watcher: str
    """The watching session's id (its actor id)."""
    keys: tuple[str, ...] | None = None
    """The keys watched, sorted; ``None``: every key starting with :attr:`prefix`."""
    prefix: str = ""
    """With ``keys`` ``None``: the prefix watched (``""``: every key)."""

    def matches(self, key: str) -> bool:
        """Whether a change of ``key`` is for this watch."""
        return key in self.keys if self.keys is not None else key.startswith(self.prefix)


@final
@event_type("board.watch_removed")
@attrs.frozen(kw_only=True)
class WatchRemoved:
    """A durable watch ended (:meth:`Board.unwatch_session`)."""

    watch_id: str
    """The watch that ended."""


KEPT_REQUESTS = 1024
"""Relayed writes a board remembers the answers of. A repeat comes only while its inbox
message is unanswered (its owner died between the append and the answer), so the
latest few suffice."""


def _answered(
    requests: Mapping[str, Entry | bool], request: str | None, answer: Entry | bool
) -> Mapping[str, Entry | bool]:
    if request is None:
        return requests
    kept = {**requests, request: answer}
    while len(kept) > KEPT_REQUESTS:
        del kept[next(iter(kept))]
    return kept


def evolve(state: BoardState, event: object) -> BoardState:
    """Apply one board event (pure and total: every stored event is one stream version)."""
    version = state.version + 1
    if isinstance(event, EntryPut):
        entries = dict(state.entries)
        entries[event.key] = Entry(
            key=event.key,
            value=event.value,
            version=event.version,
            author=event.author,
            board_version=version,
        )
        deleted = state.deleted
        if event.key in deleted:
            deleted = {k: v for k, v in deleted.items() if k != event.key}
        return attrs.evolve(
            state,
            entries=entries,
            deleted=deleted,
            version=version,
            requests=_answered(state.requests, event.request, entries[event.key]),
        )
    if isinstance(event, EntryDeleted):
        entries = {k: v for k, v in state.entries.items() if k != event.key}
        return attrs.evolve(
            state,
            entries=entries,
            deleted={**state.deleted, event.key: event.version},
            version=version,
            requests=_answered(state.requests, event.request, True),
        )
    if isinstance(event, WatchAdded):
        return attrs.evolve(
            state, watches={**state.watches, event.watch_id: event}, version=version
        )
    if isinstance(event, WatchRemoved):
        watches = {k: v for k, v in state.watches.items() if k != event.watch_id}
        return attrs.evolve(state, watches=watches, version=version)
    return attrs.evolve(state, version=version)  # a later event kind this code does not fold


# -- the pure decisions ---------------------------------------------------------------


@attrs.frozen
class Limits:
    """A board's bounds (configuration, not state: they decide, the log does not hold them)."""

    max_entries: int
    """The most live entries."""
    max_entry_bytes: int
    """The largest entry: the key plus the JSON-encoded value, in bytes."""


def key_problem(key: object, *, prefix: bool = False) -> BoardBadKeyError | None:
    """Why ``key`` (or a watch prefix) breaks the key rules, or ``None``."""
    rule = _PREFIX_RULE if prefix else _KEY_RULE
    what: Literal["key", "prefix"] = "prefix" if prefix else "key"
    if not isinstance(key, str):
        return BoardBadKeyError(key, f"it is a {type(key).__name__}, not a str; {rule}", what)
    if not key and not prefix:
        return BoardBadKeyError(key, f"it is empty; {rule}", what)
    if len(key) > KEY_MAX_LENGTH:
        return BoardBadKeyError(key, f"it is {len(key)} characters long; {rule}", what)
    end = _KEY_CHARS.match(key)
    assert end is not None  # the pattern matches the empty string
    if end.end() != len(key):
        bad = key[end.end()]
        return BoardBadKeyError(
            key, f"the character {bad!r} at index {end.end()} is not allowed; {rule}", what
        )
    return None


def _not_plain_json(value: object, path: str = "$") -> str | None:
    """Where and why ``value`` is not plain JSON, or ``None``.

    orjson already refused what it cannot encode; this refuses what it encodes but would
    decode as something else (a tuple, NaN, an int or str subclass, a dataclass...), since
    the state after a restart must equal the live one.
    """
    if value is None or type(value) in (str, int, bool):
        return None
    if isinstance(value, float) and type(value) is float:
        return None if math.isfinite(value) else f"{path}: {value!r} is not a JSON number"
    if isinstance(value, list) and type(value) is list:
        for index, item in enumerate(value):
            found = _not_plain_json(item, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(value, dict) and type(value) is dict:
        for name, item in value.items():
            found = _not_plain_json(item, f"{path}.{name}")
            if found is not None:
                return found
        return None
    hint = "; use a list" if isinstance(value, tuple) else ""
    return f"{path}: a {type(value).__name__} is not a JSON value{hint}"


def _encode_value(board_id: str, key: str, value: object, limit: int) -> bytes | BoardError:
    """The value's JSON bytes, or why it cannot be stored."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        return BoardBadValueError(board_id, key, str(exc))
    problem = _not_plain_json(value)
    if problem is not None:
        return BoardBadValueError(board_id, key, problem)
    size = len(key) + len(data)  # keys are ASCII: one byte per character
    if size > limit:
        return BoardEntryTooLargeError(board_id, key, size, limit)
    return data


def detached(value: JsonValue) -> JsonValue:
    """A copy of a JSON value that shares no ``dict`` or ``list`` with it.

    Values cross the board's boundary as copies, so a caller changing a value it wrote,
    read or was sent can never change the board's state behind its log.
    """
    if isinstance(value, dict | list):
        return cast("JsonValue", orjson.loads(orjson.dumps(value)))
    return value  # scalars are immutable


def decide_put(
    state: BoardState,
    *,
    board_id: str,
    limits: Limits,
    key: object,
    value: object,
    expected_version: int | None,
    author: str,
) -> EntryPut | BoardError:
    """What a write means: the event to append, or the typed error (nothing is written).

    Checks, in order: the key, the value (plain JSON within the size limit), the expected
    version, then the entry count (only a new key can fill the board).
    """
    bad_key = key_problem(key)
    if bad_key is not None:
        return bad_key
    assert isinstance(key, str)
    data = _encode_value(board_id, key, value, limits.max_entry_bytes)
    if isinstance(data, BoardError):
        return data
    current = state.version_of(key)
    if expected_version is not None and expected_version != current:
        return BoardConflictError(board_id, key, expected_version, current)
    if current == 0 and len(state.entries) >= limits.max_entries:
        return BoardFullError(board_id, key, limits.max_entries)
    base = current or state.deleted.get(key, 0)
    # Decoded from the bytes: the board keeps its own copy, equal to what the log holds.
    stored = cast("JsonValue", orjson.loads(data))
    return EntryPut(key=key, value=stored, version=base + 1, author=author)


def decide_delete(
    state: BoardState, *, board_id: str, key: object, expected_version: int | None, author: str
) -> EntryDeleted | BoardError | None:
    """What a deletion means: the event, the typed error, or ``None`` (no such key)."""
    bad_key = key_problem(key)
    if bad_key is not None:
        return bad_key
    assert isinstance(key, str)
    current = state.version_of(key)
    if expected_version is not None and expected_version != current:
        return BoardConflictError(board_id, key, expected_version, current)
    if current == 0:
        return None
    return EntryDeleted(key=key, version=current + 1, author=author)
