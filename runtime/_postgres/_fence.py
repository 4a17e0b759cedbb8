"""The fence a PostgreSQL store offers: appends checked against leases someone else keeps.

The store knows nothing of leases, shards or nodes; whoever keeps leases over its
streams (a node of a fleet, ``runtime._cluster``) installs a :class:`Fence` with
``PostgresEventStore.install_fence``. The store then asks it twice per append: before
queueing (:meth:`Fence.claim`: under which lease is this stream written, if any), and
in the append's own transaction, before its rows go in (:meth:`Fence.admitted`: which
of the claims the database still finds held). What the fence does not admit is refused
with ``store.fenced`` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import psycopg

__all__ = ["Claim", "Fence"]

Claim = tuple[int, int]
"""``(shard, epoch)``: the lease an append is made under."""


class Fence(Protocol):
    """Leases over a store's streams, as its appends are checked against them."""

    @property
    def name(self) -> str:
        """Who holds the leases (named in a ``store.fenced`` error)."""
        ...

    def claim(self, stream: str) -> Claim | None:
        """The lease ``stream`` is written under; ``None``: the stream is not fenced.

        Raises:
            FencedError: no lease of this holder covers the stream; write nothing.
        """
        ...

    def admitted(self, conn: psycopg.Connection, claims: Collection[Claim]) -> Collection[Claim]:
        """Of ``claims``, those still held, read in the append's open transaction on
        ``conn`` (the writer thread's): the rows read there must stay locked until it
        commits, so no lease moves between this check and the commit."""
        ...
