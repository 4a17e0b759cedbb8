"""``recall`` on the PostgreSQL store: the index lives in the log's schema (full-text
search), so it survives restarts and every process on the database shares it."""

from __future__ import annotations

import psycopg

from actors import spawn_session
from actors.lowlevel import search_history
from protocols import LLMResponse
from runtime import open_runtime
from runtime.maintenance import check_store
from runtime.postgres import open_postgres_store
from runtime.testing import FunctionLLM, PostgresServer

LLM = FunctionLLM(lambda request: LLMResponse(content="noted"))


def _count(server: PostgresServer, schema: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        return conn.execute(query).fetchall()


async def test_on_postgres_the_recall_index_lives_in_the_database_and_survives_a_restart(
    postgres_server: PostgresServer, schema: str
) -> None:
    dsn = postgres_server.dsn()
    async with open_postgres_store(dsn, schema=schema) as store:
        async with open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=LLM, session_id="s")
            await session.send("the quokka ate seven leaves")
        hits = await search_history(store, "s", "quokka")
        assert [(h.version, h.kind) for h in hits] == [(2, "user")]
        assert "[quokka]" in hits[0].excerpt
    progress = _count(postgres_server, schema, "SELECT stream, version FROM recall_progress")
    assert progress == [("session/s", 4)]  # created, started, answered, finished
    async with open_postgres_store(dsn, schema=schema) as store:  # a new process's store
        async with open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=LLM, session_id="s")
            await session.send("and the quokka slept")
        async with open_postgres_store(dsn, schema=schema) as other:  # a third, at once
            hits = await search_history(store, "s", "quokka slept")
            assert [h.version for h in hits] == [5, 2]  # both words first, then one
            assert [h.version for h in await search_history(other, "s", "quokka slept")] == [5, 2]
        assert await search_history(store, "s", "nonexistentword") == []
        assert (await check_store(store)).ok  # the index's tables do not disturb the log
    rows = _count(postgres_server, schema, "SELECT count(*) FROM recall_passages")
    assert rows == [(4,)]  # each passage indexed once, across every store's searches


async def test_a_stream_deleted_and_written_again_is_indexed_afresh(
    postgres_server: PostgresServer, schema: str
) -> None:
    async with open_postgres_store(postgres_server.dsn(), schema=schema) as store:
        async with open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=LLM, session_id="d")
            await session.send("a wombat in the garden")
        assert [h.version for h in await search_history(store, "d", "wombat")] == [2]
        await store.delete_streams(["session/d"])
        async with open_runtime(store=store) as runtime:
            session = await spawn_session(runtime, llm=LLM, session_id="d")
            await session.send("an otter in the river")
        assert await search_history(store, "d", "wombat") == []
        assert [h.version for h in await search_history(store, "d", "otter")] == [2]
