"""Faults stay where they happen: one session's bad log or crash loop never stops another."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio
import trio.testing

from actors import spawn_session
from actors.cli import main as cli_main
from protocols import LLMResponse, Usage
from protocols.errors import (
    ActorFailedError,
    ActorStoppedError,
    CorruptLogError,
    StoreError,
)
from runtime import RecordedEvent, open_runtime, open_sqlite_store
from runtime._sqlite._schema import event_checksum
from runtime.supervision import ActorStopped
from runtime.testing import InMemoryEventStore, ScriptedLLM


def answer(text: str) -> LLMResponse:
    return LLMResponse(
        content=text, usage=Usage(prompt_tokens=3, completion_tokens=1), model="scripted"
    )


def flip_a_byte(data: bytes) -> bytes:
    """The payload with its first quote turned into ``#``: one bit, and no longer JSON."""
    at = data.index(b'"')
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


DAMAGE = {
    "bad_json": ("UPDATE events SET data = ? WHERE position = ?", b"{not json", "codec.decode"),
    "wrong_shape": ("UPDATE events SET data = ? WHERE position = ?", b"[1, 2]", "codec.decode"),
    "wrong_field_type": (
        "UPDATE events SET data = ? WHERE position = ?",
        b'{"run_id": 7, "input": ["x"]}',
        "codec.decode",
    ),
    "unknown_type": (
        "UPDATE events SET type = ? WHERE position = ?",
        "session.no_such_event",
        "codec.unknown_type",
    ),
    "schema_version_zero": (
        "UPDATE events SET schema_version = ? WHERE position = ?",
        0,
        "codec.decode",
    ),
    "future_schema_version": (
        "UPDATE events SET schema_version = ? WHERE position = ?",
        999,
        "codec.future_version",
    ),
    "flipped_byte": ("UPDATE events SET data = ? WHERE position = ?", flip_a_byte, "codec.decode"),
    # The same byte flipped by decay, with the row's checksum left as it was.
    "decayed_byte": ("UPDATE events SET data = ? WHERE position = ?", flip_a_byte, "store.corrupt"),
}
"""Each kind of damage: the SQL that does it to one event row, and the code it must surface.

All but ``decayed_byte`` rewrite the row's checksum to match (as a buggy writer would), so
what is left to find is the codec error; ``decayed_byte`` is caught by the checksum."""


async def record_two_sessions(path: Path) -> None:
    """A log where the sessions ``bad`` and ``good`` each completed one run."""
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        for sid in ("bad", "good"):
            session = await spawn_session(runtime, llm=ScriptedLLM([answer("hi")]), session_id=sid)
            assert (await session.send("hello")).status == "completed"


def damage(path: Path, kind: str) -> None:
    """Damage the second event of ``session/bad`` (its ``RunStarted``) as ``kind`` says."""
    sql, value, _code = DAMAGE[kind]
    with sqlite3.connect(path) as db:
        position, data = db.execute(
            "SELECT position, data FROM events WHERE stream = 'session/bad' AND version = 2"
        ).fetchone()
        db.execute(sql, (value(data) if callable(value) else value, position))
        if kind != "decayed_byte":
            db.create_function("checksum", 6, event_checksum)
            db.execute(
                "UPDATE events SET checksum = checksum(stream, version, type, schema_version, "
                "data, metadata) WHERE position = ?",
                (position,),
            )
    db.close()


@pytest.mark.parametrize("kind", sorted(DAMAGE))
async def test_a_damaged_session_fails_alone_with_its_code(tmp_path: Path, kind: str) -> None:
    """The bystander completes a send in the same runtime; the damaged session's calls raise
    ``ActorFailedError`` carrying the codec error's code, it is never restarted, and the
    runtime closes without an error."""
    path = tmp_path / "log.sqlite"
    await record_two_sessions(path)
    damage(path, kind)
    expected = DAMAGE[kind][2]
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=2) as runtime:
        with runtime.subscribe() as events:
            bad = await spawn_session(runtime, llm=ScriptedLLM([answer("x")]), session_id="bad")
            good = await spawn_session(
                runtime, llm=ScriptedLLM([answer("still here")]), session_id="good"
            )
            with pytest.raises(ActorFailedError) as failed:
                await bad.send("again")
            assert expected == failed.value.cause_code
            assert expected == getattr(failed.value.__cause__, "code", None)
            assert isinstance(failed.value, ActorStoppedError)  # what callers caught before
            result = await good.send("are you there?")
            assert (result.status, result.text) == ("completed", "still here")
            with pytest.raises(ActorFailedError):
                await bad.follow_up("more")  # every later call says the same
            assert runtime.statistics().restarts == 0
            stopped = drain(events)
        assert [("bad", "failed", expected)] == [
            (e.actor_id, e.reason, e.error_code) for e in stopped if isinstance(e, ActorStopped)
        ]


@pytest.mark.parametrize("kind", ["bad_json", "unknown_type", "future_schema_version"])
def test_powertrio_sessions_shows_the_damaged_session_failed_with_its_code(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``powertrio sessions`` lists the damaged session as failed with the code, the
    bystander as it was."""
    path = tmp_path / "log.sqlite"
    trio.run(record_two_sessions, path)
    damage(path, kind)
    capsys.readouterr()
    assert cli_main(["sessions", "--db", str(path), "--json"]) == 0
    listed = {s["session_id"]: s for s in json.loads(capsys.readouterr().out)}
    assert ("failed", DAMAGE[kind][2]) == (listed["bad"]["status"], listed["bad"]["error"])
    assert (listed["good"]["status"], listed["good"]["error"]) == ("completed", None)
    assert cli_main(["sessions", "--db", str(path)]) == 0
    table = capsys.readouterr().out
    assert f"failed [{DAMAGE[kind][2]}]" in table


def drain(events: trio.MemoryReceiveChannel[object]) -> list[object]:
    seen: list[object] = []
    while True:
        try:
            seen.append(events.receive_nowait())
        except trio.WouldBlock:
            return seen


class UnreadableStream:
    """An in-memory store whose reads of one stream fail with ``error``; all else works."""

    def __init__(self, stream: str, error: Exception) -> None:
        self.inner = InMemoryEventStore()
        self.stream = stream
        self.error = error
        self.reads = 0

    async def read(
        self, stream: str, from_version: int = 1, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        if stream == self.stream:
            self.reads += 1
            await trio.lowlevel.checkpoint()
            raise self.error
        return await self.inner.read(stream, from_version, limit=limit)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_a_corrupt_store_read_fails_the_session_alone() -> None:
    """A store that finds one stream damaged (``store.corrupt``): that session fails at
    once, without a restart; the bystander runs."""
    store = UnreadableStream("session/bad", CorruptLogError("log.sqlite", "a blob is missing"))
    async with open_runtime(store=store, seed=3) as runtime:  # type: ignore[arg-type]
        bad = await spawn_session(runtime, llm=ScriptedLLM([answer("x")]), session_id="bad")
        good = await spawn_session(runtime, llm=ScriptedLLM([answer("fine")]), session_id="good")
        with pytest.raises(ActorFailedError) as failed:
            await bad.send("hello")
        assert failed.value.cause_code == "store.corrupt"
        assert (await good.send("hello")).status == "completed"
        assert store.reads == 1
        assert runtime.statistics().restarts == 0


async def test_a_crash_looping_session_stops_alone_after_its_restarts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A session that crashes at every start for a reason a restart might fix is restarted
    up to the root's intensity, then stopped alone with its last error; the root does not
    escalate and the bystander completes a send."""
    store = UnreadableStream("session/bad", StoreError("the disk hiccuped"))
    async with open_runtime(store=store, seed=4) as runtime:  # type: ignore[arg-type]
        good = await spawn_session(runtime, llm=ScriptedLLM([answer("fine")]), session_id="good")
        bad = await spawn_session(runtime, llm=ScriptedLLM([answer("x")]), session_id="bad")
        with pytest.raises(ActorFailedError) as failed:
            await bad.send("hello")
        assert failed.value.cause_code == "store"
        assert store.reads == 4  # the first start and the root's 3 restarts
        assert (await good.send("hello")).status == "completed"
        assert runtime.lookup("good").alive


async def test_a_restarted_session_resumes_after_the_log_is_repaired(tmp_path: Path) -> None:
    """A failed session leaves the registry: once its log reads again, spawning it with the
    same id folds it as usual."""
    path = tmp_path / "log.sqlite"
    await record_two_sessions(path)
    with sqlite3.connect(path) as db:
        original = db.execute(
            "SELECT type FROM events WHERE stream = 'session/bad' AND version = 2"
        ).fetchone()[0]
    db.close()
    damage(path, "unknown_type")
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=5) as runtime:
        bad = await spawn_session(runtime, llm=ScriptedLLM([]), session_id="bad")
        with pytest.raises(ActorFailedError):
            await bad.send("again")
    with sqlite3.connect(path) as db:  # the repair: the original type, its checksum again
        db.create_function("checksum", 6, event_checksum)
        db.execute(
            "UPDATE events SET type = ? WHERE stream = 'session/bad' AND version = 2", (original,)
        )
        db.execute(
            "UPDATE events SET checksum = checksum(stream, version, type, schema_version, "
            "data, metadata) WHERE stream = 'session/bad' AND version = 2"
        )
    db.close()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=6) as runtime:
        bad = await spawn_session(runtime, llm=ScriptedLLM([answer("back")]), session_id="bad")
        assert (await bad.send("again")).text == "back"
