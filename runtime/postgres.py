"""The PostgreSQL event store, for several nodes sharing one log.

Needs the ``postgres`` extra (psycopg 3). The same ``EventStore`` contract as the embedded
SQLite store, checked by the same conformance suite (``runtime.testing``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

__all__ = [
    "PostgresEventStore",
    "open_postgres_store",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._postgres._store import PostgresEventStore, open_postgres_store
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._postgres._store": (
                "PostgresEventStore",
                "open_postgres_store",
            ),
        },
    )
