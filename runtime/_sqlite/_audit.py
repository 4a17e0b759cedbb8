"""The SQLite log's full audit: every row, blob and index entry checked, for ``check``.

Reads verify what they return and stop at the first damage; an audit reads everything in
one transaction and lists every problem, each with its stream, version and kind, so
``powertrio check`` can say what a file lost before anyone restores it.
"""

from __future__ import annotations

import hashlib
import sqlite3

from protocols.errors import CorruptLogError

from .._store._ops import CheckProblem, CheckReport
from ._schema import UPGRADE_CHECKSUMS_KEY, event_checksum

__all__ = ["audit_database"]

_CODE = CorruptLogError.code

# Each column and the storage classes it may hold (``typeof``); anything else is damage
# that a column's affinity let through (a version stored as text, a payload as text).
_TYPES = {
    "stream": ("text",),
    "version": ("integer",),
    "type": ("text",),
    "schema_version": ("integer",),
    "data": ("blob", "null"),
    "blob_id": ("blob", "null"),
    "metadata": ("blob", "null"),
    "recorded_at": ("real", "integer"),
    "checksum": ("integer", "null"),
}
_MISTYPED = (
    "SELECT e.position, e.stream, e.version, "
    + ", ".join(f"typeof(e.{column})" for column in _TYPES)
    + ", (SELECT i.version FROM stream_index i WHERE i.position = e.position) "
    + "FROM events e WHERE "
    + " OR ".join(
        f"typeof(e.{column}) NOT IN ({', '.join(repr(t) for t in types)})"
        for column, types in _TYPES.items()
    )
)
_SCAN = (
    "SELECT e.stream, e.version, e.position, e.type, e.schema_version, e.data, e.blob_id, "
    "b.data, e.metadata, e.checksum FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
    "WHERE typeof(e.stream) = 'text' AND typeof(e.version) = 'integer' "
    "ORDER BY e.stream, e.version, e.position"
)
_BAD_INDEX = (
    "SELECT i.stream, i.version, i.position, e.stream, e.version FROM stream_index i "
    "LEFT JOIN events e ON e.position = i.position "
    "WHERE e.position IS NULL OR e.stream IS NOT i.stream OR e.version IS NOT i.version "
    "ORDER BY i.stream, i.version"
)


class _Findings:
    """The problems found so far, at most one per (stream, version): the first found is
    the nearest to the cause (a mistyped version also leaves a gap and a stale index
    entry behind it)."""

    def __init__(self) -> None:
        self.problems: list[CheckProblem] = []
        self._seen: set[tuple[str | None, int | None]] = set()

    def add(self, stream: str | None, version: int | None, kind: str, message: str) -> None:
        key = (stream, version)
        if version is not None and key in self._seen:
            return
        self._seen.add(key)
        self.problems.append(
            CheckProblem(stream=stream, version=version, code=_CODE, kind=kind, message=message)
        )


def audit_database(conn: sqlite3.Connection, path: str) -> CheckReport:
    """Audit the whole log on a read connection, in one read transaction.

    Returns:
        CheckReport: the streams and event rows seen, the problems, and notes.
    """
    del path  # the problems name streams and versions; the caller names the file
    findings = _Findings()
    conn.execute("BEGIN")
    try:
        notes = _notes(conn)
        _mistyped(conn, findings)
        heads = {
            stream: version for stream, version in conn.execute("SELECT stream, version FROM heads")
        }
        scanned, streams = _scan(conn, findings, heads)
        for stream, version, position, found_stream, found_version in conn.execute(_BAD_INDEX):
            held = (
                "nothing" if found_stream is None else f"{found_stream!r} version {found_version!r}"
            )
            findings.add(
                stream,
                version,
                "index",
                f"the index entry of {stream!r} version {version} points at position "
                f"{position}, which holds {held}",
            )
    finally:
        conn.execute("COMMIT")
    problems = sorted(
        findings.problems, key=lambda p: (p.stream is not None, p.stream or "", p.version or 0)
    )
    return CheckReport(
        streams=len(streams | set(heads)),
        events=scanned,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def _notes(conn: sqlite3.Connection) -> list[str]:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (UPGRADE_CHECKSUMS_KEY,)).fetchone()
    if row is None:
        return []
    return [
        f"{row[0]} event rows got their checksums when this file was upgraded from storage "
        "schema 1; damage done to them before that upgrade cannot be detected"
    ]


def _mistyped(conn: sqlite3.Connection, findings: _Findings) -> None:
    for row in conn.execute(_MISTYPED):
        position, stream, version = row[:3]
        indexed_version = row[-1]
        wrong = [
            f"{column} is {kind}"
            for (column, allowed), kind in zip(_TYPES.items(), row[3:-1], strict=True)
            if kind not in allowed
        ]
        named = version if type(version) is int else indexed_version
        findings.add(
            stream if type(stream) is str else repr(stream),
            named,
            "mistyped",
            f"the event at position {position} (stored version {version!r}) has a mistyped "
            f"column: {', '.join(wrong)}",
        )


def _scan(
    conn: sqlite3.Connection, findings: _Findings, heads: dict[str, int]
) -> tuple[int, set[str]]:
    """Check every well-typed row: payload, blob address, checksum, and each stream's run
    of versions against its head. Returns the rows seen and the streams they belong to."""
    blobs_ok: dict[bytes, bool] = {}
    streams: set[str] = set()
    scanned = 0
    current: str | None = None
    last = 0

    def close_stream(stream: str, last: int) -> None:
        head = heads.get(stream, 0)
        if head > last:
            findings.add(
                stream,
                last + 1,
                "gap",
                f"{stream!r} versions {last + 1}..{head} are missing (the stream's head is "
                f"{head}, the last stored event {last})",
            )
        elif head < last:
            findings.add(
                stream,
                last,
                "head",
                f"{stream!r} has events up to version {last} but its head says {head}",
            )

    for row in conn.execute(_SCAN):
        stream, version, position = row[:3]
        scanned += 1
        if stream != current:
            if current is not None:
                close_stream(current, last)
            current, last = stream, 0
            streams.add(stream)
        if version == last:
            findings.add(
                stream,
                version,
                "duplicate",
                f"{stream!r} version {version} is stored twice (again at position {position})",
            )
            continue
        if version != last + 1:
            findings.add(
                stream,
                last + 1,
                "gap",
                f"{stream!r} version {last + 1} is missing (the next stored is {version})",
            )
        last = version
        _check_row(findings, blobs_ok, row)
    if current is not None:
        close_stream(current, last)
    for stream in sorted(set(heads) - streams):
        findings.add(stream, 1, "gap", f"{stream!r} has no events but its head is {heads[stream]}")
    return scanned, streams


def _check_row(findings: _Findings, blobs_ok: dict[bytes, bool], row: tuple[object, ...]) -> None:
    stream, version, position, type_, schema_version, data, blob_id, blob, meta, crc = row
    assert isinstance(stream, str)  # selected so by _SCAN
    assert isinstance(version, int)
    if type(blob_id) is bytes:
        if type(blob) is not bytes:
            findings.add(stream, version, "missing", f"blob {blob_id.hex()} is missing")
            return
        ok = blobs_ok.get(blob_id)
        if ok is None:
            ok = blobs_ok[blob_id] = hashlib.sha256(blob).digest() == blob_id
        if not ok:
            findings.add(
                stream,
                version,
                "blob_hash",
                f"blob {blob_id.hex()} of {stream!r} version {version} does not match its "
                "content address",
            )
            return
        data = blob
    if data is None:
        findings.add(stream, version, "missing", f"{stream!r} version {version} has no payload")
        return
    if type(data) is not bytes or type(type_) is not str or type(schema_version) is not int:
        return  # reported as mistyped, or a missing payload
    if not (meta is None or type(meta) is bytes):
        return
    if crc is None:
        findings.add(stream, version, "checksum", f"{stream!r} version {version} has no checksum")
    elif crc != event_checksum(stream, version, type_, schema_version, data, meta):
        findings.add(
            stream,
            version,
            "checksum",
            f"{stream!r} version {version} (position {position}) does not match its checksum",
        )
