"""The SQLite and PostgreSQL stores are one store over two dialects.

What every engine shares (appends, reads, snapshots, checkpoints, deletions,
subscriptions, statistics, closing) is written once, in ``SqlEventStore``; an engine
holds its SQL in a dialect and writes only its connections, its head follower and what
it alone has. The conformance suite (``runtime.testing.check_event_store``) judges each
engine: tests/test_event_store.py and tests/test_postgres_store.py run it.
"""

from __future__ import annotations

import inspect

import pytest

from runtime import SqliteEventStore
from runtime._postgres._dialect import PostgresDialect
from runtime._sqlite._dialect import SqliteDialect
from runtime._store._sql import SqlDialect, SqlEventStore
from runtime.postgres import PostgresEventStore

WRITTEN_ONCE = (
    "append",
    "begin_append",
    "finish_append",
    "read",
    "read_all",
    "stream_version",
    "head_position",
    "streams",
    "load_snapshot",
    "save_snapshot",
    "delete_streams",
    "load_checkpoint",
    "save_checkpoint",
    "subscribe",
    "statistics",
    "aclose",
)


@pytest.mark.parametrize("store", [SqliteEventStore, PostgresEventStore])
def test_an_engine_writes_none_of_the_shared_methods(store: type) -> None:
    """Each store is an ``SqlEventStore`` and defines none of its shared methods again."""
    assert issubclass(store, SqlEventStore)
    again = [name for name in WRITTEN_ONCE if name in vars(store)]
    assert again == []


@pytest.mark.parametrize("dialect", [SqliteDialect, PostgresDialect])
def test_a_dialect_has_every_operation_of_the_store(dialect: type) -> None:
    """Each dialect has exactly the operations ``SqlDialect`` names, with its parameters."""
    wanted = {
        name: inspect.signature(member)
        for name, member in vars(SqlDialect).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert sorted(wanted) == sorted(
        name
        for name, member in vars(dialect).items()
        if inspect.isfunction(member) and not name.startswith("_")
    )
    for name, signature in wanted.items():
        assert list(inspect.signature(getattr(dialect, name)).parameters) == list(
            signature.parameters
        ), name
