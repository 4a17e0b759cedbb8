"""A session's folded state as a snapshot: a cache of the fold, versioned, cheap to write.

A session snapshots itself every ``snapshot_every`` events and at the end of a run
(``SessionConfig``), so reopening it folds the tail after the snapshot, not months of
history. The state is registered with the codec as ``session.state`` at
:data:`SESSION_STATE_VERSION`; a snapshot of another version, or one that does not decode,
is ignored and the session folds its log (``EventSourcedActor.recover``): a snapshot is
never the authority.

What grows with age (the transcript, the run results, the follow-up ids) is stored in
chunks of ``CHUNK`` items, each a JSON array compressed with zlib, in base64 (see
``actors._session._persistent``); a map's chunk packs its keys apart from its values, so a
reopened session indexes the keys and decodes no value. A full chunk is encoded once, and
a reopened session decodes a chunk only when it reads an item in it.

A full chunk never changes, so it is stored apart, by content address
(``runtime.lowlevel.encode_snapshot``): the store keeps it once; the chunk still filling
is written inline. A snapshot write then costs what is new since the last one, not the
whole history (about 450 KB at 50,000 messages). The full chunks' addresses are not
listed in the snapshot either (an address per chunk made each write grow with the
session's age): they sit in an index tree of small blobs stored apart the same way, and
the snapshot holds its root. A chunk or index blob the store no longer has, or whose
bytes do not match its address, makes the snapshot not decode: the session folds its log.
Encoded with a plain ``registry.encode`` (no store at hand), every chunk is inline.
Everything else is encoded with the codec's converter.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, final

import orjson

from protocols import FollowUp, Message, Usage
from protocols.codec import default_registry
from protocols.errors import EventEncodeError
from runtime.lowlevel import TimerBook, chunk_address, snapshot_chunk, stash_chunk

from . import _persistent
from ._context import ContextCompacted
from ._events import ActiveRun, ChildSpawned, RunResult, RunStarted, SessionState
from ._persistent import GrowMap, grow_map
from ._transcript import ValidTranscript

SESSION_STATE_VERSION = 4
"""The schema version of the ``session.state`` snapshot. Bump it when ``SessionState`` or
what it holds changes shape: older snapshots are then ignored (the log is folded).
2: a map's keys travel in its chunks (a snapshot no longer lists every key).
3: a full chunk is stored apart and referenced by its address (``{"sha256": hex}``).
4: the full chunks are referenced through an index tree, by its root's address
(``{"tree": hex, "chunks": n}``): a snapshot no longer lists an address per chunk."""

T = TypeVar("T")

_converter = default_registry.converter


@final
class _Chunk:
    """A chunk as encoded: its bytes (ASCII: base64 of zlib-compressed JSON; a map's keys
    and values packed apart, separated by a space) and its content address, computed once
    (a full chunk is encoded once and referenced by every later snapshot)."""

    __slots__ = ("_address", "data")

    def __init__(self, data: bytes, address: bytes | None = None) -> None:
        self.data = data
        self._address = address

    @property
    def address(self) -> bytes:
        if self._address is None:
            self._address = chunk_address(self.data)
        return self._address


def _encoder(type_: object) -> Callable[[list[Any]], _Chunk]:
    # The hook is asked for on first use: cattrs compiles code for it, which a process
    # that imports the session but never writes a snapshot (a short run) should not pay.
    hooks: list[Callable[[Any], Any]] = []

    def encode(items: list[Any]) -> _Chunk:
        if not hooks:
            hooks.append(_converter.get_unstructure_hook(type_))
        hook = hooks[0]
        # Compressed: a chunk is stored once, and read at every restart.
        packed = zlib.compress(orjson.dumps([hook(item) for item in items]), 1)
        return _Chunk(base64.b64encode(packed))

    return encode


def _decoder(type_: object) -> Callable[[_Chunk], list[Any]]:
    hooks: list[Callable[[Any, Any], Any]] = []  # asked for on first use, as in _encoder

    def decode(chunk: _Chunk) -> list[Any]:
        if not hooks:
            hooks.append(_converter.get_structure_hook(type_))
        hook = hooks[0]
        raw = orjson.loads(zlib.decompress(base64.b64decode(chunk.data, validate=True)))
        if not isinstance(raw, list):
            msg = f"a chunk must be a JSON array, got {type(raw).__name__}"
            raise TypeError(msg)
        return [hook(item, type_) for item in raw]

    return decode


_encode_messages = _encoder(Message)
_decode_messages = _decoder(Message)
_encode_strings = _encoder(str)
_decode_strings = _decoder(str)

_PLAIN: dict[str, object] = {
    "run": ActiveRun | None,
    "queued": tuple[RunStarted, ...],
    "inbox": tuple[FollowUp, ...],
    "children": tuple[ChildSpawned, ...],
    "child_status": dict[str, str],
    "timers": TimerBook,
    "usage": Usage,
    "compacted": ContextCompacted | None,
    "prompt_report": tuple[int, int, int] | None,
}
"""The fields encoded whole: they stay small however old the session is."""

_hooks: dict[str, tuple[Any, Any]] = {}
"""Field name -> (unstructure hook, structure hook), built on first use: asking the
converter each time would build some of them again (cattrs compiles code for them)."""


def _field_hooks() -> dict[str, tuple[Any, Any]]:
    if not _hooks:
        for name, type_ in _PLAIN.items():
            _hooks[name] = (
                _converter.get_unstructure_hook(type_),
                _converter.get_structure_hook(type_),
            )
    return _hooks


def _map_encoder(type_: object) -> Callable[[list[str], list[Any]], _Chunk]:
    encode = _encoder(type_)

    def encode_chunk(keys: list[str], values: list[Any]) -> _Chunk:
        # The keys packed apart from the values: a reopened session reads every key (to
        # index the map) and decodes no value until it is read.
        return _Chunk(_encode_strings(keys).data + b" " + encode(values).data)

    return encode_chunk


def _halves(chunk: _Chunk) -> list[_Chunk]:
    halves = chunk.data.split(b" ")
    if len(halves) != 2:
        raise ValueError("a map chunk must be its packed keys and packed values")
    return [_Chunk(half) for half in halves]


def _chunk_keys(chunk: _Chunk) -> list[str]:
    keys = _decode_strings(_halves(chunk)[0])
    if not all(isinstance(key, str) for key in keys):
        raise TypeError("a map chunk's keys must be strings")
    return keys


def _map_decoder(type_: object) -> Callable[[_Chunk], list[Any]]:
    decode = _decoder(type_)

    def decode_chunk(chunk: _Chunk) -> list[Any]:
        return decode(_halves(chunk)[1])

    return decode_chunk


_encode_results = _map_encoder(RunResult)
_decode_results = _map_decoder(RunResult)
_encode_ids = _map_encoder(str)
_decode_ids = _map_decoder(str)


_FANOUT = 16
"""Addresses per index blob of a chunk tree (512 bytes of digests)."""
_DIGEST = 32


def _tree_out(addresses: list[bytes]) -> bytes:
    """The root of an index tree over ``addresses`` (full chunks, oldest first), its
    blobs stashed beside the chunks (``stash_chunk``).

    Each blob is the digests of up to ``_FANOUT`` addresses of the level below, so a
    snapshot holds one address however many chunks there are, and sealing a chunk
    rewrites only the blobs on the tree's right edge (a few hundred bytes each): what a
    snapshot write costs no longer grows with the session's age.
    """
    level = addresses
    while True:
        blobs = [b"".join(level[i : i + _FANOUT]) for i in range(0, len(level), _FANOUT)]
        level = [chunk_address(blob) for blob in blobs]
        for address, blob in zip(level, blobs, strict=True):
            stash_chunk(address, blob)
        if len(level) == 1:
            return level[0]


def _tree_in(root: bytes, count: int) -> list[bytes]:
    """The ``count`` chunk addresses under the index tree at ``root`` (see :func:`_tree_out`),
    each blob read from the snapshot's chunks and checked against its address.

    Raises:
        ValueError: a blob is missing, altered, or holds another number of addresses.
    """
    sizes = [count]
    while True:
        sizes.append(-(-sizes[-1] // _FANOUT))
        if sizes[-1] == 1:
            break
    level = [root]
    for size in reversed(sizes[:-1]):
        data = b"".join(snapshot_chunk(address) for address in level)
        if len(data) != size * _DIGEST:
            msg = f"a chunk index holds {len(data) // _DIGEST} addresses, expected {size}"
            raise ValueError(msg)
        level = [data[i : i + _DIGEST] for i in range(0, len(data), _DIGEST)]
    return level


def _chunks_out(chunks: list[_Chunk], count: int) -> list[str | dict[str, str | int]]:
    """The chunks of ``count`` items as JSON: the full ones as the root of an index tree
    (:func:`_tree_out`) when the store keeps chunks apart (``stash_chunk``), the one still
    filling (and all of them, without a store) inline as its text."""
    full = count // _persistent.CHUNK  # read at each call: tests make chunks small
    if full and all(stash_chunk(chunk.address, chunk.data) for chunk in chunks[:full]):
        root = _tree_out([chunk.address for chunk in chunks[:full]])
        tail = chunks[full:]
        return [{"tree": root.hex(), "chunks": full}, *(c.data.decode("ascii") for c in tail)]
    return [chunk.data.decode("ascii") for chunk in chunks]


def _chunks_in(raw: Any) -> list[_Chunk]:
    """The chunks :func:`_chunks_out` wrote; the full ones are read from the snapshot's
    chunks through their index tree, each checked against its address (``snapshot_chunk``).

    Raises:
        TypeError: an entry is neither a text nor, first, ``{"tree": hex, "chunks": n}``.
        ValueError: a chunk or an index blob is missing or altered, or an address is not hex.
    """
    if not isinstance(raw, list):
        raise TypeError("a map's or a transcript's chunks must be a JSON array")
    chunks: list[_Chunk] = []
    for k, entry in enumerate(raw):
        if isinstance(entry, str):
            chunks.append(_Chunk(entry.encode("ascii")))
        elif (
            k == 0
            and isinstance(entry, dict)
            and entry.keys() == {"tree", "chunks"}
            and isinstance(entry["tree"], str)
            and type(entry["chunks"]) is int
            and entry["chunks"] > 0
        ):
            for address in _tree_in(bytes.fromhex(entry["tree"]), entry["chunks"]):
                chunks.append(_Chunk(snapshot_chunk(address), address))
        else:
            raise TypeError('a chunk must be its text, or first {"tree": its index, "chunks": n}')
    return chunks


def _map_out(
    mapping: Mapping[str, T], encode: Callable[[list[str], list[T]], _Chunk]
) -> list[str | dict[str, str | int]]:
    grown = grow_map(mapping)
    return _chunks_out(grown.chunks(encode), len(grown))


def _check_unsealed(chunk: _Chunk) -> None:
    """Decompress the chunk still filling, which is stored inline, unaddressed: zlib's
    checksum fails on any byte altered, so a damaged snapshot is ignored at load (the log
    is folded), not found out when the item is read. Its items are structured only then:
    a reopened session reads few of them (structuring 200 run results took most of a
    re-activation)."""
    zlib.decompress(base64.b64decode(chunk.data, validate=True))


def _map_in(raw: Any, decode: Callable[[_Chunk], list[T]]) -> GrowMap[str, T]:
    chunks = _chunks_in(raw)
    mapping: GrowMap[str, T] = GrowMap.from_chunks(chunks, _chunk_keys, decode)
    if chunks:  # the keys of every chunk are read already; the newest one's values too
        _check_unsealed(_halves(chunks[-1])[1])
    return mapping


def unstructure_state(state: SessionState) -> dict[str, Any]:
    """``state`` as a JSON object (the converter's hook for ``SessionState``)."""
    history = state.history
    out: dict[str, Any] = {
        "session_id": state.session_id,
        "system_prompt": state.system_prompt,
        "max_rounds": state.max_rounds,
        "parent_id": state.parent_id,
        "depth": state.depth,
        "history": {
            "count": len(history),
            "chunks": _chunks_out(history.chunks(_encode_messages), len(history)),
            "pending": list(history.pending),
            "digest": history.digest,
        },
        "seen_follow_ups": _map_out(state.seen_follow_ups, _encode_ids),
        "results": _map_out(state.results, _encode_results),
    }
    for name, (unstructure, _) in _field_hooks().items():
        out[name] = unstructure(getattr(state, name))
    return out


def structure_state(raw: Any, _type: object = None) -> SessionState:
    """The state :func:`unstructure_state` encoded (the converter's hook).

    Raises:
        KeyError, TypeError, ValueError, cattrs errors: the object does not fit (the
            registry reports them as ``EventDecodeError``).
    """
    h = raw["history"]
    chunks = _chunks_in(h["chunks"])
    history = ValidTranscript.from_chunks(
        h["count"], chunks, _decode_messages, pending=tuple(h["pending"]), digest=h["digest"]
    )
    if chunks:
        _check_unsealed(chunks[-1])
    fields: dict[str, Any] = {
        name: structure(raw[name], _PLAIN[name]) for name, (_, structure) in _field_hooks().items()
    }
    return SessionState(
        session_id=raw["session_id"],
        system_prompt=raw["system_prompt"],
        max_rounds=raw["max_rounds"],
        parent_id=raw["parent_id"],
        depth=raw["depth"],
        history=history,
        seen_follow_ups=_map_in(raw["seen_follow_ups"], _decode_ids),
        results=_map_in(raw["results"], _decode_results),
        **fields,
    )


def _not_upcast(_raw: Any) -> Any:
    """A snapshot of an older version: the actor ignores it before decoding (a cache is
    rebuilt from the log, never migrated); anyone else decoding one is told so."""
    raise ValueError("an older session.state snapshot is not upcast; fold the log instead")


def register_session_state() -> None:
    """Register ``SessionState`` as ``session.state`` with the default codec (once)."""
    try:
        default_registry.name_of(SessionState)
    except EventEncodeError:
        pass
    else:
        return  # already registered
    _converter.register_unstructure_hook(SessionState, unstructure_state)
    _converter.register_structure_hook(SessionState, structure_state)
    default_registry.register(
        SessionState,
        name="session.state",
        version=SESSION_STATE_VERSION,
        upcasters=dict.fromkeys(range(1, SESSION_STATE_VERSION), _not_upcast),
    )


register_session_state()
