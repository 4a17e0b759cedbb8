"""Operations on an event store: JSON Lines export/import, retention and checking."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Sequence
from typing import TypeVar, final

import attrs
import orjson
import trio

from protocols.codec import EventRegistry, default_registry
from protocols.errors import (
    BadInputFileError,
    CodecError,
    ConcurrencyConflictError,
    CorruptLogError,
    ImportConflictError,
    InputFileNotFoundError,
    StoreError,
    StreamNotFoundError,
)

from ._contract import EventStore, NewEvent, RecordedEvent, Snapshot, StreamInfo
from ._snapshot_chunks import decode_snapshot

__all__ = [
    "CheckProblem",
    "CheckReport",
    "TransferResult",
    "apply_retention",
    "check_store",
    "export_jsonl",
    "import_jsonl",
    "in_tree",
]

S = TypeVar("S")

_PAGE = 5000


@final
@attrs.frozen(kw_only=True)
class TransferResult:
    """How much an export or an import moved."""

    streams: int
    """Distinct streams written."""
    events: int
    """Events (lines) written."""
    skipped: int = 0
    """Events an import found already stored, identical (importing them again is a no-op)."""


@final
@attrs.frozen(kw_only=True)
class CheckProblem:
    """One thing :func:`check_store` found wrong."""

    stream: str | None
    """The stream concerned (``None`` for file-level problems)."""
    version: int | None
    """The event version concerned, if one."""
    code: str
    """The error code (``codec.unknown_type``, ``store.corrupt``, ``check.fold``...)."""
    message: str
    """What is wrong, for people."""
    kind: str = ""
    """What sort of damage, within ``code``: ``checksum``, ``gap``, ``duplicate``,
    ``mistyped``, ``blob_hash``, ``index``, ``head``, ``checkpoint_failed``, ``decode``..."""


@final
@attrs.frozen(kw_only=True)
class CheckReport:
    """The outcome of :func:`check_store`."""

    streams: int
    """Streams checked."""
    events: int
    """Events decoded."""
    problems: tuple[CheckProblem, ...]
    """Everything found wrong, in stream order."""
    notes: tuple[str, ...] = ()
    """Facts worth knowing that are not problems (e.g. rows that got their checksums when
    an older file was upgraded, so their earlier content could not be verified)."""

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems


def in_tree(root: str, stream: str) -> bool:
    """Whether ``stream`` is ``root`` or below it (``root/...`` or ``root.N...``).

    A tree is an agent and its sub-agents, whose ids extend their parent's with ``.N``:
    ``session/a`` holds ``session/a.1`` and ``session/a.1.2`` (and ``session/a/x``), but
    not ``session/ab``.
    """
    base = root.rstrip("/")
    return stream == root or stream.startswith((base + "/", base + "."))


def _encode_bytes(value: bytes) -> tuple[str, object]:
    """Embed JSON payloads as JSON (readable) when that round-trips exactly, else base64."""
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        parsed = None
    else:
        if orjson.dumps(parsed) == value:
            return "json", parsed
    return "b64", base64.b64encode(value).decode("ascii")


def _line(event: RecordedEvent) -> bytes:
    record: dict[str, object] = {
        "stream": event.stream,
        "version": event.version,
        "position": event.position,
        "type": event.type,
        "schema_version": event.schema_version,
        "recorded_at": event.recorded_at,
    }
    kind, value = _encode_bytes(event.data)
    record["data" if kind == "json" else "data_b64"] = value
    if event.metadata is not None:
        kind, value = _encode_bytes(event.metadata)
        record["metadata" if kind == "json" else "metadata_b64"] = value
    return orjson.dumps(record) + b"\n"


async def _stream_events(store: EventStore, stream: str) -> list[RecordedEvent]:
    events: list[RecordedEvent] = []
    while True:
        page = await store.read(stream, len(events) + 1, limit=_PAGE)
        events.extend(page)
        if len(page) < _PAGE:
            return events


async def export_jsonl(
    store: EventStore,
    destination: str | os.PathLike[str],
    *,
    stream: str | None = None,
    tree: str | None = None,
) -> TransferResult:
    """Write events to a JSON Lines file, one event per line, in global order.

    Payloads that are canonical JSON are embedded as JSON (``"data"``) so the file is
    readable; anything else is base64 (``"data_b64"``). Either way :func:`import_jsonl`
    restores the exact bytes.

    Args:
        store (EventStore): the store to read.
        destination (str | os.PathLike): the file to (over)write.
        stream (str | None): export only this stream.
        tree (str | None): export this stream and every stream below it (``root/...``).
            Without ``stream`` or ``tree`` the whole log is exported.

    Returns:
        TransferResult: how many streams and events were written.

    Raises:
        StreamNotFoundError: ``stream`` or ``tree`` names no stream.
        ValueError: both ``stream`` and ``tree`` were given.
        StoreError: reading the store failed.
    """
    if stream is not None and tree is not None:
        raise ValueError("give stream or tree, not both")
    names: set[str] = set()
    count = 0
    async with await trio.open_file(destination, "wb") as out:
        if stream is None and tree is None:
            position = 1
            while True:
                page = await store.read_all(position, limit=_PAGE)
                if not page:
                    break
                await out.write(b"".join(_line(e) for e in page))
                names.update(e.stream for e in page)
                count += len(page)
                position = page[-1].position + 1
        else:
            root = stream if stream is not None else tree
            assert root is not None
            infos = await store.streams(root)
            chosen = [
                i.stream
                for i in infos
                if (i.stream == root if stream is not None else in_tree(root, i.stream))
            ]
            if not chosen:
                raise StreamNotFoundError(root)
            events: list[RecordedEvent] = []
            for name in chosen:
                events.extend(await _stream_events(store, name))
            events.sort(key=lambda e: e.position)
            await out.write(b"".join(_line(e) for e in events))
            names.update(chosen)
            count = len(events)
    return TransferResult(streams=len(names), events=count)


def _parse_line(path: str, number: int, raw: bytes) -> tuple[str, int, NewEvent]:
    def bad(detail: str) -> BadInputFileError:
        return BadInputFileError(path, detail, line=number)

    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise bad("not a JSON object")
    stream = record.get("stream")
    version = record.get("version")
    type_ = record.get("type")
    schema_version = record.get("schema_version")
    recorded_at = record.get("recorded_at")
    if not isinstance(stream, str) or not stream:
        raise bad("'stream' must be a non-empty string")
    for key, value in (("version", version), ("schema_version", schema_version)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(f"{key!r} must be a positive integer")
    if not isinstance(type_, str) or not type_:
        raise bad("'type' must be a non-empty string")
    if not isinstance(recorded_at, int | float) or isinstance(recorded_at, bool):
        raise bad("'recorded_at' must be a number")

    def payload(key: str, *, required: bool) -> bytes | None:
        if key in record:
            return orjson.dumps(record[key])
        if f"{key}_b64" in record:
            try:
                return base64.b64decode(record[f"{key}_b64"], validate=True)
            except (ValueError, TypeError) as exc:
                raise bad(f"{key + '_b64'!r} is not base64") from exc
        if required:
            raise bad(f"missing {key!r} (or {key + '_b64'!r})")
        return None

    data = payload("data", required=True)
    assert data is not None
    event = NewEvent(
        type=type_,
        schema_version=schema_version,  # type: ignore[arg-type]  # checked above
        data=data,
        metadata=payload("metadata", required=False),
        recorded_at=float(recorded_at),
    )
    return stream, version, event  # type: ignore[return-value]  # checked above


async def import_jsonl(store: EventStore, source: str | os.PathLike[str]) -> TransferResult:
    """Append the events of a JSON Lines export to a store, keeping bytes and times exactly.

    The whole file is parsed and every stream is checked against the store before
    anything is written, so a bad line or a clash writes nothing. Events the store already
    holds, identical (same stream, version, type, schema version, payload and metadata),
    are skipped: importing an export into the log it came from, or importing a file
    twice, is a no-op. Global positions are assigned by the target store (the relative
    order is kept).

    Args:
        store (EventStore): the target store.
        source (str | os.PathLike): a file written by :func:`export_jsonl`.

    Returns:
        TransferResult: how many streams and events were imported, and how many events
        were skipped as already there.

    Raises:
        InputFileNotFoundError: there is no file at ``source``.
        BadInputFileError: a line is malformed or versions are not contiguous; ``line``
            names it.
        ImportConflictError: an event in the file differs from the stored event at its
            stream and version (``stream``, ``version``, ``field`` and ``line`` say
            where); nothing was written.
        ConcurrencyConflictError: a stream in the file starts beyond the store's stream
            (a gap); nothing was written.
        StoreError: writing failed part-way (earlier runs of events are kept).
    """
    path = os.fspath(source)
    try:
        content = await trio.Path(path).read_bytes()
    except FileNotFoundError:
        raise InputFileNotFoundError(path) from None
    runs: list[tuple[str, int, list[NewEvent]]] = []
    expected_next: dict[str, int] = {}
    first_version: dict[str, int] = {}
    lines: dict[tuple[str, int], tuple[int, NewEvent]] = {}
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        stream, version, event = _parse_line(path, number, raw)
        want = expected_next.get(stream)
        if want is not None and version != want:
            detail = f"{stream!r} version {version} follows version {want - 1}"
            raise BadInputFileError(path, detail, line=number)
        first_version.setdefault(stream, version)
        expected_next[stream] = version + 1
        lines[stream, version] = (number, event)
        if runs and runs[-1][0] == stream:
            runs[-1][2].append(event)
        else:
            runs.append((stream, version - 1, [event]))
    present: dict[str, int] = {}
    for stream, first in first_version.items():
        current = await store.stream_version(stream)
        if current < first - 1:
            raise ConcurrencyConflictError(stream, first - 1, current)
        present[stream] = min(current, expected_next[stream] - 1)
        if present[stream] >= first:
            await _compare_stored(store, stream, first, present[stream], lines)
    skipped = 0
    imported = 0
    written: set[str] = set()
    for stream, expected, events in runs:
        # The run holds versions expected + 1 ...; the store already has up to present.
        drop = max(0, min(len(events), present[stream] - expected))
        skipped += drop
        if drop < len(events):
            await store.append(stream, events[drop:], expected + drop)
            imported += len(events) - drop
            written.add(stream)
    return TransferResult(streams=len(written), events=imported, skipped=skipped)


async def _compare_stored(
    store: EventStore,
    stream: str,
    first: int,
    last: int,
    lines: dict[tuple[str, int], tuple[int, NewEvent]],
) -> None:
    """Check that the stored events ``first..last`` of ``stream`` equal the file's."""
    version = first
    while version <= last:
        page = await store.read(stream, version, limit=min(_PAGE, last - version + 1))
        if not page:
            raise ImportConflictError(stream, version, "presence", lines[stream, version][0])
        for stored in page:
            number, event = lines[stream, stored.version]
            for field in ("type", "schema_version", "data", "metadata"):
                if getattr(stored, field) != getattr(event, field):
                    raise ImportConflictError(stream, stored.version, field, number)
            version = stored.version + 1


async def apply_retention(
    store: EventStore,
    *,
    older_than: float | None = None,
    predicate: Callable[[StreamInfo], bool] | None = None,
    prefix: str = "",
    now: float | None = None,
) -> tuple[str, ...]:
    """Delete whole streams that are idle for too long or match a predicate.

    A stream is deleted when every given condition holds: its last event is older than
    ``older_than`` seconds (before ``now``), and ``predicate(info)`` is true.

    Args:
        store (EventStore): the store.
        older_than (float | None): idle time in seconds.
        predicate (Callable[[StreamInfo], bool] | None): a custom test.
        prefix (str): only consider streams starting with this.
        now (float | None): the current time (default: ``time.time()``).

    Returns:
        tuple[str, ...]: the deleted stream names, sorted.

    Raises:
        ValueError: neither ``older_than`` nor ``predicate`` was given (that would delete
            everything under ``prefix``; pass ``predicate=lambda info: True`` to mean it).
    """
    if older_than is None and predicate is None:
        raise ValueError("give older_than or predicate; retention never deletes by default")
    cutoff = None if older_than is None else (time.time() if now is None else now) - older_than
    doomed = tuple(
        info.stream
        for info in await store.streams(prefix)
        if (cutoff is None or info.updated_at < cutoff) and (predicate is None or predicate(info))
    )
    if doomed:
        await store.delete_streams(doomed)
    return doomed


def _problem(
    stream: str | None, version: int | None, code: str, message: str, kind: str
) -> CheckProblem:
    return CheckProblem(stream=stream, version=version, code=code, message=message, kind=kind)


async def check_store(
    store: EventStore,
    *,
    registry: EventRegistry | None = None,
    initial: Callable[[str], S] | None = None,
    evolve: Callable[[S, object], S] | None = None,
    prefix: str = "",
) -> CheckReport:
    """Verify that every stream decodes (and folds), and report what does not.

    Nothing stops at the first problem: each stream is checked on its own, so one bad
    event does not hide others. With ``initial`` and ``evolve`` each stream is also folded
    and, where a snapshot of a registered type exists, its state is compared with the fold.

    Args:
        store (EventStore): the store to check.
        registry (EventRegistry | None): the codec (default: ``protocols.codec.default_registry``).
        initial (Callable[[str], S] | None): the empty state for a stream name.
        evolve (Callable[[S, object], S] | None): the fold step.
        prefix (str): only check streams starting with this.

    Returns:
        CheckReport: counts and problems.

    Raises:
        ValueError: only one of ``initial`` and ``evolve`` was given.
    """
    if (initial is None) != (evolve is None):
        raise ValueError("give both initial and evolve to fold, or neither")
    codec = registry if registry is not None else default_registry
    problems: list[CheckProblem] = []
    integrity = getattr(store, "integrity_check", None)
    if integrity is not None:
        try:
            for line in await integrity():
                problems.append(_problem(None, None, CorruptLogError.code, str(line), "sqlite"))
        except StoreError as exc:
            problems.append(_problem(None, None, exc.code, str(exc), "sqlite"))
    notes = await _audit(store, prefix, problems)
    damaged = {p.stream for p in problems}
    streams = await store.streams(prefix)
    decoded = 0
    for info in streams:
        try:
            events = await _stream_events(store, info.stream)
        except StoreError as exc:
            if info.stream not in damaged:  # else the audit has named the damage already
                version = getattr(exc, "version", None)
                kind = getattr(exc, "kind", None) or "read"
                problems.append(_problem(info.stream, version, exc.code, str(exc), kind))
            continue
        state: S | None = None if initial is None else initial(info.stream)
        folding = evolve is not None
        snapshot = await store.load_snapshot(info.stream) if folding else None
        at_snapshot: list[S] = []
        for record in events:
            try:
                event = codec.decode_record(record)
            except CodecError as exc:
                problems.append(_problem(info.stream, record.version, exc.code, str(exc), "decode"))
                folding = False
                continue
            decoded += 1
            if folding and evolve is not None:
                try:
                    state = evolve(state, event)  # type: ignore[arg-type]  # S once initial ran
                except Exception as exc:
                    problems.append(
                        _problem(
                            info.stream,
                            record.version,
                            "check.fold",
                            f"evolve raised {exc.__class__.__name__}: {exc} on {record.type!r} "
                            f"at {info.stream!r} version {record.version}",
                            "fold",
                        )
                    )
                    folding = False
                    continue
                if snapshot is not None and record.version == snapshot.version:
                    at_snapshot.append(state)
        if snapshot is not None and folding:
            problems.extend(_check_snapshot(codec, snapshot, at_snapshot))
    return CheckReport(streams=len(streams), events=decoded, problems=tuple(problems), notes=notes)


async def _audit(store: EventStore, prefix: str, problems: list[CheckProblem]) -> tuple[str, ...]:
    """Add the problems of the store's own audit (a store that can verify every row has
    ``audit()``); returns its notes."""
    audit = getattr(store, "audit", None)
    if audit is None:
        return ()
    try:
        audited: CheckReport = await audit()
    except StoreError as exc:
        problems.append(_problem(None, None, exc.code, str(exc), "audit"))
        return ()
    problems.extend(p for p in audited.problems if p.stream is None or p.stream.startswith(prefix))
    return audited.notes


def _check_snapshot(
    codec: EventRegistry, snapshot: Snapshot, folded: list[S]
) -> Sequence[CheckProblem]:
    stream = snapshot.stream
    if snapshot.type not in codec.names():
        return ()
    try:
        cached = decode_snapshot(codec, snapshot, stream=stream)
    except CodecError as exc:
        return (_problem(stream, snapshot.version, exc.code, f"snapshot: {exc}", "snapshot"),)
    if folded != [cached]:
        return (
            _problem(
                stream,
                snapshot.version,
                "check.snapshot_mismatch",
                f"the snapshot of {stream!r} at version {snapshot.version} differs from the "
                "fold of the log; delete it (snapshots are only a cache)",
                "snapshot",
            ),
        )
    return ()
