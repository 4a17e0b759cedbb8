"""Errors of the event log: storing it (``store.*``), decoding it, replaying it.

The branches that speak of streams, versions and recorded events, kept together so the
log's failure modes read as one story; ``protocols.errors`` re-exports them.
"""

from __future__ import annotations

from ._errors_base import PowertrioError

__all__ = [
    "CodecError",
    "ConcurrencyConflictError",
    "CorruptLogError",
    "EventDecodeError",
    "EventEncodeError",
    "ForeignDatabaseError",
    "FutureEventVersionError",
    "ImportConflictError",
    "ReplayDivergenceError",
    "ReplayError",
    "StoreClosedError",
    "StoreError",
    "StoreSchemaVersionError",
    "StreamNotFoundError",
    "StreamRewoundError",
    "UnknownEventTypeError",
]


# --- event store ---------------------------------------------------------------------


class StoreError(PowertrioError):
    """The event store failed or refused an operation."""

    code = "store"


class ConcurrencyConflictError(StoreError):
    """An append's expected version did not match the stream; nothing was written."""

    code = "store.conflict"

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream!r} is at version {actual}, the append expected {expected}; "
            "nothing was written (another writer owns this stream?)"
        )


class ImportConflictError(ConcurrencyConflictError):
    """An imported event differs from the event the store holds at its stream and version.

    Importing events that are already there is a no-op; this is the real clash: the same
    (stream, version) with another type, schema version, payload or metadata. Nothing
    was written.
    """

    code = "store.import_conflict"

    def __init__(self, stream: str, version: int, field: str, line: int | None = None) -> None:
        self.stream = stream
        self.expected = version - 1
        self.actual = version
        self.version = version
        self.field = field
        self.line = line
        where = "" if line is None else f" (line {line})"
        StoreError.__init__(
            self,
            f"the imported event {stream!r} version {version}{where} differs from the stored "
            f"one in its {field}; nothing was written (another log's history for this stream?)",
        )


class StreamRewoundError(StoreError):
    """An actor's stream holds fewer events than the actor had folded from it.

    Someone deleted the stream (``delete_streams``, retention, ``powertrio delete``) or
    cut it back while its actor ran, or while it was passivated. The actor stops for
    good instead of starting over on what is left: that would record a new history over
    the one it acted on, and run again what it had already run (a tool, a send).
    ``known`` is the version the actor had folded, ``found`` the version the store holds
    now (0: the stream is gone).
    """

    code = "store.stream_rewound"

    def __init__(self, stream: str, known: int, found: int) -> None:
        self.stream = stream
        self.known = known
        self.found = found
        held = "no events (it was deleted)" if found == 0 else f"only up to version {found}"
        super().__init__(
            f"stream {stream!r} holds {held}, but its actor had folded it up to version "
            f"{known}; the actor stops rather than start over on a history it lost "
            "(restore the stream from a backup, or start anew under another id)"
        )


class StoreClosedError(StoreError):
    """The store is closed."""

    code = "store.closed"

    def __init__(self, message: str = "the event store is closed") -> None:
        super().__init__(message)


class CorruptLogError(StoreError):
    """The log file is damaged; ``path`` names it, ``stream`` and ``version`` the event.

    Raised instead of returning what a damaged row claims: a checksum or content address
    that does not match, a version gap or duplicate, a mistyped column.
    """

    code = "store.corrupt"

    def __init__(
        self,
        path: str,
        detail: str,
        *,
        stream: str | None = None,
        version: int | None = None,
        kind: str | None = None,
    ) -> None:
        self.path = path
        self.detail = detail
        self.stream = stream
        self.version = version
        self.kind = kind
        super().__init__(
            f"event log {path!r} is damaged: {detail}; restore it from a backup "
            "(`powertrio export` what still reads) or move it aside"
        )


class ForeignDatabaseError(StoreError):
    """The file is a database, but not a powertrio event log."""

    code = "store.foreign"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path!r} is not a powertrio event log (it has other tables); "
            "point the store at a new or a powertrio file"
        )


class StoreSchemaVersionError(StoreError):
    """The log was written by a newer powertrio with a storage schema this one cannot read."""

    code = "store.schema_version"

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"event log {path!r} has storage schema {found}, this powertrio reads up to "
            f"{supported}; upgrade powertrio to open it"
        )


class StreamNotFoundError(StoreError, LookupError):
    """No stream has this name."""

    code = "store.stream_not_found"

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(f"no stream named {stream!r} in the event log")


# --- codec ---------------------------------------------------------------------------


class CodecError(PowertrioError):
    """An event or message could not be encoded or decoded."""

    code = "codec"


class UnknownEventTypeError(CodecError):
    """A stored event has a type name no registered class claims."""

    code = "codec.unknown_type"

    def __init__(
        self, type_name: str, stream: str | None = None, version: int | None = None
    ) -> None:
        self.type_name = type_name
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(
            f"unknown event type {type_name!r}{where}; is the module that defines it imported?"
        )


class FutureEventVersionError(CodecError):
    """A stored event has a newer schema version than this code understands."""

    code = "codec.future_version"

    def __init__(
        self,
        type_name: str,
        found: int,
        supported: int,
        stream: str | None = None,
        version: int | None = None,
    ) -> None:
        self.type_name = type_name
        self.found = found
        self.supported = supported
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(
            f"event {type_name!r}{where} has schema version {found}, this code reads up to "
            f"{supported}; upgrade the code that defines it"
        )


class EventDecodeError(CodecError):
    """A stored event's payload does not fit its class."""

    code = "codec.decode"

    def __init__(
        self, type_name: str, detail: str, stream: str | None = None, version: int | None = None
    ) -> None:
        self.type_name = type_name
        self.detail = detail
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(f"event {type_name!r}{where} does not decode: {detail}")


class EventEncodeError(CodecError, TypeError):
    """An event cannot be encoded: its class is unregistered or a field is not JSON."""

    code = "codec.encode"

    def __init__(self, type_name: str, detail: str) -> None:
        self.type_name = type_name
        self.detail = detail
        super().__init__(f"cannot encode event {type_name}: {detail}")


# --- replay --------------------------------------------------------------------------


class ReplayError(PowertrioError):
    """A replay could not confirm the recorded log."""

    code = "replay"


class ReplayDivergenceError(ReplayError):
    """The code asks for a different effect than the one recorded at this event."""

    code = "replay.divergence"

    def __init__(self, stream: str, version: int, event_type: str, difference: str) -> None:
        self.stream = stream
        self.version = version
        self.event_type = event_type
        self.difference = difference
        super().__init__(
            f"replay of {stream!r} diverges at version {version} ({event_type}):\n{difference}"
        )
