"""The PostgreSQL store's tables, its SQL, and the one boundary where psycopg errors map.

All tables live in one PostgreSQL schema (``powertrio`` by default), so several logs can
share a database and tests can take a fresh schema each. Events are keyed by
``(stream, version)``: that primary key *is* the optimistic-concurrency check, whoever
writes. ``position`` (a bigint identity) orders the whole log; ``xid`` records the
writing transaction so tailing readers can wait for older transactions still in flight
(see ``READ_ALL``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, cast

from protocols.errors import (
    BadConnectionStringError,
    CorruptLogError,
    ForeignDatabaseError,
    StoreError,
    StoreNotFoundError,
    StoreRefusedError,
    StoreSchemaVersionError,
    StoreUnavailableError,
)

from .._store._contract import RecordedEvent

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import psycopg

# psycopg (the ``postgres`` extra) is imported where it is used, so ``import runtime``
# works without it; only opening a PostgreSQL store needs it.

__all__ = [
    "INSERT_BLOBS",
    "INSERT_EVENTS",
    "NETWORK_DEFAULTS",
    "LOAD_CHECKPOINT",
    "READ_ALL",
    "READ_SNAPSHOT",
    "SAVE_CHECKPOINT",
    "READ_STREAM",
    "SAVE_SNAPSHOT",
    "SCHEMA_VERSION",
    "STREAMS_LISTING",
    "STREAM_VERSION",
    "STREAM_VERSIONS",
    "check_dsn",
    "connect",
    "describe",
    "HEAD_POSITION",
    "lock_key",
    "log_channel",
    "map_errors",
    "prepare_schema",
    "replace_snapshot_chunks",
    "row_to_event",
]

SCHEMA_VERSION = 1
"""The storage schema this code writes; a log with a higher one is refused."""

_DDL = (
    "CREATE TABLE IF NOT EXISTS powertrio_meta (key text PRIMARY KEY, value text NOT NULL)",
    # COLLATE "C": names sort and compare by code point, as in the other backends.
    """CREATE TABLE IF NOT EXISTS events (
        stream text COLLATE "C" NOT NULL,
        version bigint NOT NULL,
        position bigint NOT NULL GENERATED ALWAYS AS IDENTITY UNIQUE,
        type text NOT NULL,
        schema_version integer NOT NULL,
        data bytea,
        blob_id bytea,
        metadata bytea,
        recorded_at double precision NOT NULL,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        PRIMARY KEY (stream, version)
    )""",
    "CREATE INDEX IF NOT EXISTS events_blob_id ON events (blob_id) WHERE blob_id IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS blobs (id bytea PRIMARY KEY, data bytea NOT NULL)",
    """CREATE TABLE IF NOT EXISTS snapshots (
        stream text COLLATE "C" PRIMARY KEY,
        version bigint NOT NULL,
        type text NOT NULL,
        schema_version integer NOT NULL,
        data bytea NOT NULL,
        recorded_at double precision NOT NULL
    )""",
    # A snapshot's chunks live in blobs (content-addressed, each once); this table says
    # which stream's snapshot references which (a chunk goes with its last reference).
    """CREATE TABLE IF NOT EXISTS snapshot_chunks (
        stream text COLLATE "C" NOT NULL,
        id bytea NOT NULL,
        PRIMARY KEY (stream, id)
    )""",
    "CREATE INDEX IF NOT EXISTS snapshot_chunks_id ON snapshot_chunks (id)",
)

# Projections' checkpoints (the timers index, see runtime._timers._checkpoint): a cache of a
# fold up to a log position, one row per projection. Its own statement, apart from the
# log's tables above: older code opening the schema ignores the table, and it can be
# dropped at any time (the projection then folds the whole log).
_CHECKPOINTS_DDL = """CREATE TABLE IF NOT EXISTS checkpoints (
    name text COLLATE "C" PRIMARY KEY,
    position bigint NOT NULL,
    data bytea NOT NULL
)"""

_EVENT_COLUMNS = (
    "e.stream, e.version, e.position, e.type, e.schema_version, coalesce(e.data, b.data), "
    "e.metadata, e.recorded_at, e.blob_id"
)
READ_STREAM = (
    f"SELECT {_EVENT_COLUMNS} FROM events e LEFT JOIN blobs b ON e.data IS NULL "
    "AND b.id = e.blob_id WHERE e.stream = %s AND e.version >= %s ORDER BY e.version LIMIT %s"
)
# Gap-safe tailing: positions are taken in the order transactions got their ids (see
# INSERT_EVENTS), so a row is returned only once every transaction older than the oldest
# one still in flight has ended; a reader moving past a position can never later find a
# smaller one committed.
READ_ALL = (
    f"SELECT {_EVENT_COLUMNS} FROM events e LEFT JOIN blobs b ON e.data IS NULL "
    "AND b.id = e.blob_id WHERE e.position >= %s "
    "AND e.xid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY e.position LIMIT %s"
)
# The newest position READ_ALL would return now (older transactions in flight hold it
# back as they hold READ_ALL), read backwards on the position key.
HEAD_POSITION = (
    "SELECT coalesce(max(position), 0) FROM events "
    "WHERE xid < pg_snapshot_xmin(pg_current_snapshot())"
)
STREAM_VERSION = "SELECT coalesce(max(version), 0) FROM events WHERE stream = %s"
# One index probe per name (a GROUP BY would walk every version of every stream).
STREAM_VERSIONS = (
    "SELECT s, (SELECT max(version) FROM events WHERE stream = s) FROM unnest(%s::text[]) AS s"
)
# Rows come out of unnest in array order, so identity values (and RETURNING) follow it.
INSERT_EVENTS = (
    "INSERT INTO events (stream, version, type, schema_version, data, blob_id, metadata, "
    "recorded_at) SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::int[], "
    "%s::bytea[], %s::bytea[], %s::bytea[], %s::float8[]) RETURNING position"
)
INSERT_BLOBS = (
    "INSERT INTO blobs (id, data) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) "
    "ON CONFLICT (id) DO NOTHING"
)
STREAMS_LISTING = (
    "SELECT s.stream, s.hi, f.recorded_at, l.recorded_at FROM ("
    "SELECT stream, min(version) AS lo, max(version) AS hi FROM events "
    "WHERE starts_with(stream, %s) GROUP BY stream) s "
    "JOIN events f ON f.stream = s.stream AND f.version = s.lo "
    "JOIN events l ON l.stream = s.stream AND l.version = s.hi ORDER BY s.stream"
)
READ_SNAPSHOT = (
    "SELECT version, type, schema_version, data, recorded_at FROM snapshots WHERE stream = %s"
)
# Never replaces a newer snapshot with an older one: two savers racing leave the higher.
SAVE_SNAPSHOT = (
    "INSERT INTO snapshots VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (stream) "
    "DO UPDATE SET version = excluded.version, type = excluded.type, "
    "schema_version = excluded.schema_version, data = excluded.data, "
    "recorded_at = excluded.recorded_at WHERE excluded.version >= snapshots.version"
)
LOAD_CHECKPOINT = "SELECT position, data FROM checkpoints WHERE name = %s"
SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints VALUES (%s, %s, %s) ON CONFLICT (name) "
    "DO UPDATE SET position = excluded.position, data = excluded.data"
)
DELETE_EVENTS = "DELETE FROM events WHERE stream = ANY(%s::text[])"
DELETE_SNAPSHOTS = "DELETE FROM snapshots WHERE stream = ANY(%s::text[])"
DELETE_SNAPSHOT_CHUNKS = "DELETE FROM snapshot_chunks WHERE stream = ANY(%s::text[])"
DELETE_ORPHAN_BLOBS = (
    "DELETE FROM blobs b WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.blob_id = b.id) "
    "AND NOT EXISTS (SELECT 1 FROM snapshot_chunks c WHERE c.id = b.id)"
)
READ_SNAPSHOT_CHUNKS = (
    "SELECT c.id, b.data FROM snapshot_chunks c JOIN blobs b ON b.id = c.id WHERE c.stream = %s"
)
_READ_SNAPSHOT_CHUNK_IDS = "SELECT id FROM snapshot_chunks WHERE stream = %s"
_INSERT_SNAPSHOT_CHUNKS = (
    "INSERT INTO snapshot_chunks (stream, id) SELECT %s, * FROM unnest(%s::bytea[]) "
    "ON CONFLICT DO NOTHING"
)
_DELETE_SNAPSHOT_CHUNK_IDS = (
    "DELETE FROM snapshot_chunks WHERE stream = %s AND id = ANY(%s::bytea[])"
)
# The chunks no snapshot references any more, unless an event's payload has their bytes.
_DELETE_UNREFERENCED_CHUNKS = (
    "DELETE FROM blobs b WHERE b.id = ANY(%s::bytea[]) "
    "AND NOT EXISTS (SELECT 1 FROM snapshot_chunks c WHERE c.id = b.id) "
    "AND NOT EXISTS (SELECT 1 FROM events e WHERE e.blob_id = b.id)"
)


def check_dsn(dsn: str) -> None:
    """Refuse a connection string libpq cannot parse, before trying to connect.

    Raises:
        BadConnectionStringError: it does not parse (the message does not repeat it).
    """
    import psycopg  # noqa: PLC0415  # the optional extra, see above

    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise BadConnectionStringError(_first_line(exc)) from None


def describe(dsn: str) -> str:
    """A DSN fit for messages: host, port and database, never the password."""
    import psycopg  # noqa: PLC0415  # the optional extra, see above

    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable connection string)"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def lock_key(schema: str) -> int:
    """The advisory lock number that orders position-taking in ``schema`` (signed 64 bits)."""
    digest = hashlib.sha256(b"powertrio-positions/" + schema.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def log_channel(schema: str) -> str:
    """The ``NOTIFY`` channel every commit to ``schema``'s log rings with its last
    position (``EventStore.changes`` listens to it)."""
    return "powertrio_log_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


@contextlib.contextmanager
def map_errors(server: str, *, committing: bool = False) -> Iterator[None]:
    """Turn psycopg errors into our typed errors (the one boundary for this backend).

    Args:
        server (str): the server as :func:`describe` shows it.
        committing (bool): a commit may be in flight, so a lost connection leaves the
            outcome unknown.

    Raises:
        StoreUnavailableError: the server is unreachable, the connection broke, or a
            statement timed out.
        StoreError: any other database error.
    """
    import psycopg  # noqa: PLC0415  # the optional extra, see above
    from psycopg import errors as pg_errors  # noqa: PLC0415

    try:
        yield
    except StoreError:
        raise
    except pg_errors.QueryCanceled as exc:
        raise StoreUnavailableError(server, "timeout", _first_line(exc)) from exc
    except psycopg.OperationalError as exc:
        # A failed connect never had a connection; everything else lost one.
        lost = isinstance(exc, pg_errors.AdminShutdown) or "connection" not in str(exc).lower()
        reason: Literal["connect", "lost"] = "lost" if lost or committing else "connect"
        if isinstance(exc, pg_errors.ConnectionTimeout):
            reason = "connect"
        raise StoreUnavailableError(
            server, reason, _first_line(exc), outcome_unknown=committing
        ) from exc
    except psycopg.InterfaceError as exc:  # e.g. a connection closed under us
        raise StoreUnavailableError(
            server, "lost", _first_line(exc), outcome_unknown=committing
        ) from exc
    except psycopg.Error as exc:
        raise StoreError(f"event store {server}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# A server that vanishes without closing the connection (a cut cable, a failed-over
# address) would leave a statement waiting for minutes of TCP retransmissions. These make
# the kernel give up within about ten seconds, so the loss surfaces as "lost" and the
# store's retry takes over. A connection string that sets any of them wins; libpq ignores
# them on a Unix socket.
NETWORK_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


def connect(dsn: str, schema: str, *, server: str, connect_timeout: float) -> psycopg.Connection:
    """An autocommit connection whose ``search_path`` is the log's schema.

    Raises:
        StoreUnavailableError: the server cannot be reached.
        StoreRefusedError: the server refused us (no such database or user, bad password).
        BadConnectionStringError: ``dsn`` does not parse.
    """
    import psycopg  # noqa: PLC0415  # the optional extra, see above

    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
        network = {k: v for k, v in NETWORK_DEFAULTS.items() if k not in given}
        conninfo = psycopg.conninfo.make_conninfo(
            dsn, connect_timeout=max(1, round(connect_timeout)), **network
        )
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        detail = _connect_detail(exc)
        if any(marker in detail.lower() for marker in _REFUSALS):
            raise StoreRefusedError(server, detail) from exc
        raise StoreUnavailableError(server, "connect", detail) from exc
    except psycopg.ProgrammingError as exc:  # an unparsable string (check_dsn tells first)
        raise BadConnectionStringError(_first_line(exc)) from None
    with map_errors(server):
        conn.execute("SELECT set_config('search_path', %s, false)", (_quoted(schema),))
    return conn


# What a server says when it answers but will not let us in: waiting does not fix these.
# Everything else at connect time (refused, unreachable, "starting up", "shutting down",
# "too many clients") may heal, so it is StoreUnavailableError, which the store retries.
_REFUSALS = (
    "does not exist",
    "authentication failed",
    "no pg_hba.conf entry",
    "permission denied",
    "no password supplied",
)


def _connect_detail(exc: BaseException) -> str:
    """The server's own words from a failed connect (libpq prefixes them with the address)."""
    text = " ".join(str(exc).split())
    _, fatal, said = text.partition("FATAL: ")
    return said.strip() if fatal else _first_line(exc)


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def prepare_schema(
    conn: psycopg.Connection, schema: str, *, server: str, create: bool = True
) -> int:
    """Create the schema and tables if missing, check an existing one; returns the head.

    Raises:
        StoreNotFoundError: there is no log in ``schema`` and ``create`` is false.
        ForeignDatabaseError: the schema holds other tables and is not a powertrio log.
        StoreSchemaVersionError: a newer powertrio wrote it.
        StoreError: the server refused (e.g. no right to create the schema).
    """
    from psycopg import sql  # noqa: PLC0415  # the optional extra, see above

    where = f"{server} schema {schema!r}"
    with map_errors(server), conn.transaction():
        # Two stores opening one new schema at once: one creates, the other waits.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema) ^ 1,))
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
        if tables and "powertrio_meta" not in tables:
            raise ForeignDatabaseError(where)
        if not create and not tables:
            hint = "start one there with `powertrio run`, or check the database and schema"
            raise StoreNotFoundError(where, hint)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        for statement in _DDL:
            conn.execute(statement)
        conn.execute(_CHECKPOINTS_DDL)
        conn.execute(
            "INSERT INTO powertrio_meta VALUES ('schema_version', %s) ON CONFLICT DO NOTHING",
            (str(SCHEMA_VERSION),),
        )
        row = conn.execute(
            "SELECT value FROM powertrio_meta WHERE key = 'schema_version'"
        ).fetchone()
        found = int(row[0]) if row is not None else SCHEMA_VERSION
        if found > SCHEMA_VERSION:
            raise StoreSchemaVersionError(where, found, SCHEMA_VERSION)
        head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()
    return 0 if head is None else int(head[0])


def replace_snapshot_chunks(
    conn: psycopg.Connection, stream: str, chunks: Mapping[bytes, bytes]
) -> None:
    """Make ``chunks`` the chunks of ``stream``'s snapshot (caller's transaction): write
    those its previous snapshot did not reference (checked against their address first),
    drop those it did and nothing references now.

    Raises:
        ValueError: a new chunk's bytes do not match its address.
    """
    before = {bytes(row[0]) for row in conn.execute(_READ_SNAPSHOT_CHUNK_IDS, (stream,))}
    added = [id_ for id_ in chunks if id_ not in before]
    for id_ in added:
        if hashlib.sha256(chunks[id_]).digest() != id_:
            msg = f"snapshot chunk {id_.hex()} of {stream!r} does not match its content address"
            raise ValueError(msg)
    if added:
        conn.execute(INSERT_BLOBS, (added, [chunks[id_] for id_ in added]))
        conn.execute(_INSERT_SNAPSHOT_CHUNKS, (stream, added))
    gone = [id_ for id_ in before if id_ not in chunks]
    if gone:
        conn.execute(_DELETE_SNAPSHOT_CHUNK_IDS, (stream, gone))
        conn.execute(_DELETE_UNREFERENCED_CHUNKS, (gone,))


def row_to_event(where: str, row: Sequence[object]) -> RecordedEvent:
    """Decode a row of ``READ_STREAM``/``READ_ALL``, checking a blob against its id.

    Raises:
        CorruptLogError: the payload (or the blob holding it) is missing or altered.
    """
    # The columns' types are fixed by _DDL; psycopg types its rows as tuples of Any.
    stream = cast(str, row[0])
    version = cast(int, row[1])
    data = cast("bytes | None", row[5])
    blob = cast("bytes | None", row[8])
    if blob is not None:
        if data is None:
            detail = f"blob {blob.hex()} of {stream!r} version {version} is missing"
            raise CorruptLogError(where, detail)
        if hashlib.sha256(data).digest() != blob:
            detail = f"blob {blob.hex()} of {stream!r} version {version} is altered"
            raise CorruptLogError(where, detail)
    elif data is None:
        raise CorruptLogError(where, f"event {stream!r} version {version} has no payload")
    return RecordedEvent(
        stream=stream,
        version=version,
        position=cast(int, row[2]),
        type=cast(str, row[3]),
        schema_version=cast(int, row[4]),
        data=data,
        metadata=cast("bytes | None", row[6]),
        recorded_at=cast(float, row[7]),
    )
