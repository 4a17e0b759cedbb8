"""Snapshots whose big parts are stored apart, by content address, so a write costs what changed.

A state that grows for months (a session's transcript) is encoded in sealed chunks that
never change once full. Written inline, every snapshot would carry all of them again (about
450 KB for a session of 50,000 messages, at each run's end). Instead, while the state is
encoded by :func:`encode_snapshot`, its codec hooks hand each sealed chunk to
:func:`stash_chunk` and write only its address; the store keeps each chunk once
(``EventStore.save_snapshot(chunks=)``) and a snapshot write costs the chunks that are new
since the last one. :func:`decode_snapshot` gives the hooks the chunks the store returned
with the snapshot (:func:`snapshot_chunk`), each checked against its address.

The chunks travel beside the codec, not through it (a context variable set for the one
synchronous encode or decode call), so the codec stays bytes in, object out, and a state
encoded with a plain ``registry.encode`` is whole (its hooks inline every chunk).
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocols.codec import EncodedEvent, EventRegistry

    from ._contract import Snapshot

__all__ = [
    "chunk_address",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_chunk",
    "stash_chunk",
]

_stash: contextvars.ContextVar[dict[bytes, bytes] | None] = contextvars.ContextVar(
    "powertrio_snapshot_stash", default=None
)
_chunks: contextvars.ContextVar[Mapping[bytes, bytes] | None] = contextvars.ContextVar(
    "powertrio_snapshot_chunks", default=None
)


def encode_snapshot(
    registry: EventRegistry, state: object
) -> tuple[EncodedEvent, dict[bytes, bytes]]:
    """``state`` encoded by ``registry``, and the chunks its hooks stored apart
    (:func:`stash_chunk`): pass both to ``EventStore.save_snapshot``.

    Raises:
        EventEncodeError: as ``registry.encode``.
    """
    stash: dict[bytes, bytes] = {}
    token = _stash.set(stash)
    try:
        encoded = registry.encode(state)
    finally:
        _stash.reset(token)
    return encoded, stash


def decode_snapshot(registry: EventRegistry, snapshot: Snapshot, *, stream: str) -> object:
    """The state ``snapshot`` holds, its hooks reading its chunks (:func:`snapshot_chunk`).

    Raises:
        CodecError: as ``registry.decode``; a chunk that is missing or altered is an
            ``EventDecodeError`` too (a snapshot is a cache: fold the log instead).
    """
    token = _chunks.set(snapshot.chunks)
    try:
        return registry.decode(
            snapshot.type,
            snapshot.schema_version,
            snapshot.data,
            stream=stream,
            version=snapshot.version,
        )
    finally:
        _chunks.reset(token)


def chunk_address(data: bytes) -> bytes:
    """The content address of a chunk: the sha256 digest of its bytes."""
    return hashlib.sha256(data).digest()


def stash_chunk(address: bytes, data: bytes) -> bool:
    """Store ``data`` apart under ``address`` (:func:`chunk_address` of it) if a snapshot is
    being encoded by :func:`encode_snapshot`; returns whether it was (else write it inline).

    The caller computes the address once per sealed chunk and keeps it: it is not checked
    here (the store checks the chunks it has not seen, ``save_snapshot``).
    """
    stash = _stash.get()
    if stash is None:
        return False
    stash[address] = data
    return True


def snapshot_chunk(address: bytes) -> bytes:
    """The chunk at ``address`` of the snapshot :func:`decode_snapshot` is decoding.

    Raises:
        ValueError: no snapshot is being decoded, or the store no longer has the chunk, or
            its bytes do not match the address (the registry reports an
            ``EventDecodeError``).
    """
    chunks = _chunks.get()
    if chunks is None:
        raise ValueError(
            f"snapshot chunk {address.hex()} read outside decode_snapshot (no chunks at hand)"
        )
    data = chunks.get(address)
    if data is None:
        raise ValueError(f"snapshot chunk {address.hex()} is missing from the store")
    if chunk_address(data) != address:
        raise ValueError(f"snapshot chunk {address.hex()} does not match its content address")
    return data
