"""The tables and SQL a fleet of nodes shares in the log's schema: leases, placements, inboxes.

Kept apart from ``_postgres._schema`` (the log itself): a store opened without a node
never creates or reads these tables. Every function here runs in a worker thread on a
connection of the store (autocommit; each takes its own transaction), and times come
from the server's clock (``clock_timestamp()``), so nodes never compare their own clocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from protocols.errors import ConfigError

from ._placement import fair_share, to_take

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

__all__ = [
    "CHECK_LEASES",
    "INBOX_CHANNEL",
    "LeaseTick",
    "answer_message",
    "lease_tick",
    "live_nodes",
    "pending_messages",
    "placed_with",
    "placements_in",
    "post_message",
    "prepare_cluster_schema",
    "read_replies",
    "record_placement",
    "release_shards",
]

INBOX_CHANNEL = "powertrio_inbox"
"""The ``NOTIFY`` channel (suffixed with the schema): ``i<shard>`` for a new message,
``r<id>`` for an answer."""

_CLUSTER_DDL = (
    """CREATE TABLE IF NOT EXISTS shard_leases (
        shard integer PRIMARY KEY,
        node text,
        epoch bigint NOT NULL DEFAULT 0,
        expires_at timestamptz NOT NULL DEFAULT '-infinity'
    )""",
    "CREATE TABLE IF NOT EXISTS cluster_nodes "
    "(node text PRIMARY KEY, expires_at timestamptz NOT NULL)",
    """CREATE TABLE IF NOT EXISTS placements (
        session_id text COLLATE "C" PRIMARY KEY,
        shard integer NOT NULL,
        agent text NOT NULL,
        traceparent text
    )""",
    # A fleet's table from before sessions were placed with their caller's trace context:
    # its placements have none (NULL), and their sessions start traces of their own.
    "ALTER TABLE placements ADD COLUMN IF NOT EXISTS traceparent text",
    "CREATE INDEX IF NOT EXISTS placements_shard ON placements (shard)",
    """CREATE TABLE IF NOT EXISTS inbox (
        id text COLLATE "C" PRIMARY KEY,
        target text NOT NULL,
        shard integer NOT NULL,
        body bytea NOT NULL,
        reply bytea,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        answered_at timestamptz
    )""",
    "CREATE INDEX IF NOT EXISTS inbox_pending ON inbox (shard, created_at) WHERE reply IS NULL",
    "CREATE INDEX IF NOT EXISTS inbox_answered ON inbox (answered_at) WHERE reply IS NOT NULL",
)


# The append's fence, in the append's own transaction: FOR KEY SHARE holds the rows, so
# neither a takeover nor the node's own hand-back (both lock the row FOR UPDATE SKIP
# LOCKED first) can land between this check and the commit. Not FOR SHARE: the node's
# own renewal (an UPDATE of expires_at, FOR NO KEY UPDATE) must not wait for its
# appends, which may wait a TTL for the position lock a paused node holds; the lease
# would lapse meanwhile and every append after it be fenced.
CHECK_LEASES = (
    "SELECT shard, epoch FROM shard_leases WHERE node = %s AND shard = ANY(%s::int[]) "
    "AND expires_at > clock_timestamp() FOR KEY SHARE"
)


_PLACEMENT = "SELECT agent, traceparent FROM placements WHERE session_id = %s"


def prepare_cluster_schema(conn: psycopg.Connection, shards: int) -> None:
    """Create the fleet's tables and shard rows; check every node agrees on ``shards``.

    Raises:
        ConfigError: the log was set up with another number of shards.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('powertrio-cluster-ddl'))")
        for statement in _CLUSTER_DDL:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO powertrio_meta VALUES ('shards', %s) ON CONFLICT DO NOTHING",
            (str(shards),),
        )
        row = conn.execute("SELECT value FROM powertrio_meta WHERE key = 'shards'").fetchone()
        found = int(row[0]) if row is not None else shards
        if found != shards:
            msg = (
                f"this log is split into {found} shards, the node asks for {shards}: "
                f"every node of a fleet must use the same number (Node(shards={found}))"
            )
            raise ConfigError(msg)
        conn.execute(
            "INSERT INTO shard_leases (shard) SELECT generate_series(0, %s - 1) "
            "ON CONFLICT DO NOTHING",
            (shards,),
        )


@attrs.frozen
class LeaseTick:
    """What one round of renewing and taking leases found."""

    held: dict[int, int]
    """Shard -> epoch this node holds after the round."""
    fair_share: int
    """How many shards this node should hold (all shards over the live nodes)."""


def lease_tick(
    conn: psycopg.Connection,
    node: str,
    held: dict[int, int],
    *,
    ttl: float,
    shards: int,
    take: bool,
) -> LeaseTick:
    """Renew this node's heartbeat and leases; take expired shards up to its fair share.

    One transaction. A lease this node held but whose epoch moved (someone took the
    shard after it expired) is not renewed and is missing from the result: lost.
    """
    interval = f"{ttl} seconds"
    with conn.transaction():
        conn.execute(
            "INSERT INTO cluster_nodes VALUES (%s, clock_timestamp() + %s::interval) "
            "ON CONFLICT (node) DO UPDATE SET expires_at = excluded.expires_at",
            (node, interval),
        )
        renewed: dict[int, int] = {}
        if held:
            rows = conn.execute(
                "UPDATE shard_leases l SET expires_at = clock_timestamp() + %s::interval "
                "FROM unnest(%s::int[], %s::bigint[]) AS h(shard, epoch) "
                "WHERE l.shard = h.shard AND l.epoch = h.epoch AND l.node = %s "
                "RETURNING l.shard, l.epoch",
                (interval, list(held), list(held.values()), node),
            ).fetchall()
            renewed = {int(shard): int(epoch) for shard, epoch in rows}
        row = conn.execute(
            "SELECT count(*) FROM cluster_nodes WHERE expires_at > clock_timestamp()"
        ).fetchone()
        fair = fair_share(shards, int(row[0]) if row is not None else 1)
        want = to_take(fair, len(renewed), take=take)
        if want > 0:
            free = [
                int(r[0])
                for r in conn.execute(
                    "SELECT shard FROM shard_leases WHERE expires_at <= clock_timestamp() "
                    "ORDER BY shard LIMIT %s FOR UPDATE SKIP LOCKED",
                    (want,),
                )
            ]
            if free:
                rows = conn.execute(
                    "UPDATE shard_leases SET node = %s, epoch = epoch + 1, "
                    "expires_at = clock_timestamp() + %s::interval WHERE shard = ANY(%s::int[]) "
                    "RETURNING shard, epoch",
                    (node, interval, free),
                ).fetchall()
                renewed.update({int(shard): int(epoch) for shard, epoch in rows})
    return LeaseTick(held=renewed, fair_share=fair)


def release_shards(conn: psycopg.Connection, node: str, held: dict[int, int]) -> dict[int, int]:
    """Give shards back at once (their actors stopped): any node may take them now.

    Returns the shards kept (shard -> epoch): those an append in flight still holds. The
    append checked the lease ``FOR KEY SHARE``, which a plain UPDATE of the row (``FOR
    NO KEY UPDATE``) does not wait for: the append would commit after its node handed
    the lease back. So the rows are locked ``FOR UPDATE SKIP LOCKED`` first, as a
    takeover does; the caller hands a kept shard back in a later round (or lets its
    lease lapse). Waiting instead would hold up the lease loop's connection, and with it
    the renewal, for as long as such an append waits (a TTL behind a paused node).
    """
    if not held:
        return {}
    rows = conn.execute(_RELEASE, (list(held), list(held.values()), node, node)).fetchall()
    return {int(shard): int(epoch) for shard, epoch in rows}


# One statement, one round trip: release the rows still leased to the node at the epochs
# it hands back that no other transaction holds (an append in flight holds its rows FOR
# KEY SHARE, a takeover FOR UPDATE); answer the others still leased to it. The final
# SELECT sees the rows as the statement began, hence the released taken out by name.
_RELEASE = """
WITH h AS (SELECT * FROM unnest(%s::int[], %s::bigint[]) AS h(shard, epoch)),
released AS (
    UPDATE shard_leases l SET node = NULL, expires_at = '-infinity' WHERE l.shard IN (
        SELECT m.shard FROM shard_leases m JOIN h USING (shard, epoch)
        WHERE m.node = %s FOR UPDATE OF m SKIP LOCKED
    ) RETURNING l.shard
)
SELECT l.shard, l.epoch FROM shard_leases l JOIN h USING (shard, epoch)
WHERE l.node = %s AND l.shard NOT IN (SELECT shard FROM released)
"""


def live_nodes(conn: psycopg.Connection) -> frozenset[str]:
    """The nodes whose heartbeat has not lapsed (none before any node ever ran here)."""
    row = conn.execute("SELECT to_regclass('cluster_nodes')").fetchone()
    if row is None or row[0] is None:
        return frozenset()
    rows = conn.execute(
        "SELECT node FROM cluster_nodes WHERE expires_at > clock_timestamp()"
    ).fetchall()
    return frozenset(str(node) for (node,) in rows)


def leave(conn: psycopg.Connection, node: str) -> None:
    """Release every shard still leased to this node and forget its heartbeat (it no
    longer counts towards the fair share).

    A row an append in flight still holds is left to lapse within a TTL, as in
    :func:`release_shards`: the leaving node hands nothing back under an append.
    """
    conn.execute(
        "UPDATE shard_leases SET node = NULL, expires_at = '-infinity' WHERE shard IN ("
        "SELECT shard FROM shard_leases WHERE node = %s FOR UPDATE SKIP LOCKED)",
        (node,),
    )
    conn.execute("DELETE FROM cluster_nodes WHERE node = %s", (node,))


def record_placement(
    conn: psycopg.Connection,
    session_id: str,
    shard: int,
    agent: str,
    traceparent: str | None = None,
) -> str:
    """Record which agent a session runs, and the trace context of the work it was created
    for (first writer wins); returns the recorded agent."""
    conn.execute(
        "INSERT INTO placements (session_id, shard, agent, traceparent) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (session_id, shard, agent, traceparent),
    )
    row = conn.execute(_PLACEMENT, (session_id,)).fetchone()
    return agent if row is None else str(row[0])


def placement_of(conn: psycopg.Connection, session_id: str) -> str | None:
    """The agent a session runs, or ``None`` if no node created it."""
    placed = placed_with(conn, session_id)
    return None if placed is None else placed[0]


def placed_with(conn: psycopg.Connection, session_id: str) -> tuple[str, str | None] | None:
    """``(agent, traceparent)`` a session was placed with (the trace context ``None`` for
    a placement made without one), or ``None`` if no node created it."""
    row = conn.execute(_PLACEMENT, (session_id,)).fetchone()
    if row is None:
        return None
    return str(row[0]), None if row[1] is None else str(row[1])


def placements_in(conn: psycopg.Connection, shards: list[int]) -> list[tuple[str, str]]:
    """``(session_id, agent)`` of every session placed in ``shards``."""
    rows = conn.execute(
        "SELECT session_id, agent FROM placements WHERE shard = ANY(%s::int[]) ORDER BY session_id",
        (shards,),
    )
    return [(str(sid), str(agent)) for sid, agent in rows]


def post_message(
    conn: psycopg.Connection, channel: str, message_id: str, *, target: str, shard: int, body: bytes
) -> None:
    """Put a message in the owner's inbox (once per id) and ring its doorbell."""
    conn.execute(
        "WITH i AS (INSERT INTO inbox (id, target, shard, body) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING RETURNING shard) SELECT pg_notify(%s, 'i' || shard) FROM i",
        (message_id, target, shard, body, channel),
    )


def pending_messages(
    conn: psycopg.Connection, shards: list[int], limit: int, skip: Sequence[str] = ()
) -> list[tuple[str, str, bytes]]:
    """``(id, target, body)`` of unanswered messages to ``shards`` but ``skip`` (those
    being performed now), oldest first."""
    rows = conn.execute(
        "SELECT id, target, body FROM inbox WHERE reply IS NULL AND shard = ANY(%s::int[]) "
        "AND id <> ALL(%s::text[]) ORDER BY created_at LIMIT %s",
        (shards, list(skip), limit),
    )
    return [(str(i), str(t), bytes(b)) for i, t, b in rows]


def answer_message(conn: psycopg.Connection, channel: str, message_id: str, reply: bytes) -> None:
    """Record the answer to a message (the first answer wins) and wake its caller."""
    conn.execute(
        "WITH a AS (UPDATE inbox SET reply = %s, answered_at = clock_timestamp() "
        "WHERE id = %s AND reply IS NULL RETURNING id) SELECT pg_notify(%s, 'r' || id) FROM a",
        (reply, message_id, channel),
    )


def prune_answers(conn: psycopg.Connection, keep: float) -> int:
    """Delete answers older than ``keep`` seconds; how many.

    Safe: a caller retrying a pruned message posts it again, and the session answers a
    known run id or follow-up id from its log, so a retry never runs anything twice.
    """
    return conn.execute(
        "DELETE FROM inbox WHERE reply IS NOT NULL "
        "AND answered_at < clock_timestamp() - %s::interval",
        (f"{keep} seconds",),
    ).rowcount


def read_replies(conn: psycopg.Connection, ids: list[str]) -> dict[str, bytes]:
    """The answers recorded so far for ``ids``."""
    rows = conn.execute(
        "SELECT id, reply FROM inbox WHERE id = ANY(%s::text[]) AND reply IS NOT NULL", (ids,)
    )
    return {str(i): bytes(r) for i, r in rows}


def check_shards(shards: int) -> int:
    """Validate a shard count (the leases' unit of placement)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 4096:
        msg = f"shards must be an int from 1 to 4096, got {shards!r}"
        raise ValueError(msg)
    return shards
