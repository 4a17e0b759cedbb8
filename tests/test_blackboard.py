"""The blackboard: versions, compare-and-set, watches, tools, bounds, restart from the log."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors import (
    Board,
    Session,
    SessionState,
    ToolRegistry,
    board_tools,
    open_board,
    spawn_session,
)
from actors._board._events import Limits, decide_delete, decide_put, evolve
from actors.board import (
    BoardBadKeyError,
    BoardBadValueError,
    BoardChanged,
    BoardConflictError,
    BoardEntryTooLargeError,
    BoardError,
    BoardFullError,
    BoardState,
    BoardStatistics,
    BoardWatchOverflowError,
    Entry,
)
from actors.events import EntryDeleted, EntryPut
from actors.lowlevel import run_tool_calls
from protocols import JsonValue, LLMResponse, ToolCall, ToolOutcome, ToolResultMessage
from protocols.codec import decode_record, encode
from protocols.errors import ActorCrashedError, ConfigError, ToolDefinitionError
from runtime import Actor, ActorRef, EventStore, open_runtime, open_sqlite_store
from runtime.testing import InMemoryEventStore, ScriptedLLM

KEY_RULE = "a key is 1 to 256 characters from A-Z a-z 0-9 and _ - . / :"
PREFIX_RULE = "a prefix is 0 to 256 characters from A-Z a-z 0-9 and _ - . / :"


async def fold_log(store: EventStore, board_id: str) -> BoardState:
    """The board's state as the fold of its raw log, decoded record by record."""
    state = BoardState()
    for record in await store.read(f"board/{board_id}"):
        state = evolve(state, decode_record(record))
    return state


# -- reads and writes -----------------------------------------------------------------


async def test_put_get_delete_list_carry_versions_and_authors() -> None:
    """Each key counts its own versions; the board counts its stream version."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "notes")
        first = await board.put("plan/1", {"step": "research"}, author="alice")
        assert first == Entry(
            key="plan/1", value={"step": "research"}, version=1, author="alice", board_version=1
        )
        await board.put("plan/2", ["a", 1, 2.5, True, None])
        second = await board.put("plan/1", {"step": "write"}, author="bob")
        assert (second.version, second.author, second.board_version) == (2, "bob", 3)
        await board.put("other", "x")
        assert await board.get("plan/1") == second
        assert await board.get("missing") is None
        assert [e.key for e in await board.list()] == ["other", "plan/1", "plan/2"]
        assert [e.key for e in await board.list("plan/")] == ["plan/1", "plan/2"]
        assert await board.list("zzz") == ()
        assert await board.delete("plan/2") is True
        assert await board.delete("plan/2") is False  # nothing there: nothing written
        assert await board.get("plan/2") is None
        assert await board.statistics() == BoardStatistics(
            entries=2, version=5, watches=0, watches_dropped=0
        )
        assert await runtime.store.stream_version("board/notes") == 5


async def test_a_deleted_key_continues_its_versions() -> None:
    """Deleting takes a version and a new write continues from it: no version is reused."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        await board.put("k", 1)
        await board.put("k", 2)
        await board.delete("k")
        again = await board.put("k", 3)
        assert again.version == 4
        state = await board.state()
        assert state.version_of("k") == 4
        await board.delete("k")
        assert (await board.state()).deleted == {"k": 5}
        assert (await board.state()).version_of("k") == 0


async def test_compare_and_set_succeeds_at_the_expected_version() -> None:
    """A write with the version last read goes through and bumps the version."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        created = await board.put("k", "v1", expected_version=0)
        assert created.version == 1
        updated = await board.put("k", "v2", expected_version=created.version)
        assert (updated.value, updated.version) == ("v2", 2)
        assert await board.delete("k", expected_version=2) is True
        assert await board.delete("k", expected_version=0) is False  # absent, as expected
        recreated = await board.put("k", "v3", expected_version=0)
        assert recreated.version == 4


async def test_a_conflict_names_key_and_versions_and_writes_nothing() -> None:
    """A stale expected version raises a typed conflict; the log is untouched."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        await board.put("plan", "v1")
        await board.put("plan", "v2")
        with pytest.raises(BoardConflictError) as caught:
            await board.put("plan", "stale", expected_version=1)
        assert str(caught.value) == (
            "board 'b': key 'plan' is at version 2, the write expected version 1; nothing "
            "was written (read the key again, then decide and retry)"
        )
        error = caught.value
        assert (error.code, error.board_id, error.key, error.expected, error.actual) == (
            "board.conflict",
            "b",
            "plan",
            1,
            2,
        )
        with pytest.raises(BoardConflictError) as created:
            await board.put("plan", "new", expected_version=0)
        assert "key 'plan' is at version 2, the write expected version 0" in str(created.value)
        with pytest.raises(BoardConflictError) as absent:
            await board.put("nothing", "x", expected_version=3)
        assert str(absent.value) == (
            "board 'b': key 'nothing' does not exist (version 0), the write expected version "
            "3; nothing was written (read the key again, then decide and retry)"
        )
        with pytest.raises(BoardConflictError) as deleting:
            await board.delete("plan", expected_version=1)
        assert (deleting.value.expected, deleting.value.actual) == (1, 2)
        assert (await board.get("plan")) is not None
        assert (await board.get("plan")).value == "v2"  # type: ignore[union-attr]
        assert await runtime.store.stream_version("board/b") == 2


async def test_values_cross_the_boundary_as_copies() -> None:
    """Changing a value that was written, read or sent never changes the board (nor its
    agreement with the log), even in a read-modify-write whose compare-and-set fails."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        written: dict[str, JsonValue] = {"steps": ["a"]}
        async with board.watch() as first, board.watch() as second:
            returned = await board.put("plan", written)
            written["steps"] = ["changed by the writer"]
            returned.value["steps"] = ["changed via put's result"]  # type: ignore[call-overload,index]
            read = await board.get("plan")
            assert read is not None
            read.value["steps"].append("b")  # type: ignore[call-overload,index,union-attr]
            with pytest.raises(BoardConflictError):
                await board.put("plan", read.value, expected_version=0)
            (listed,) = await board.list()
            listed.value.clear()  # type: ignore[union-attr]
            (change,) = drain(first)
            change.value["steps"] = []  # type: ignore[call-overload,index]
            assert [c.value for c in drain(second)] == [{"steps": ["a"]}]
        assert (await board.get("plan")).value == {"steps": ["a"]}  # type: ignore[union-attr]
        assert await board.state() == await fold_log(runtime.store, "b")


# -- bounds and bad input -------------------------------------------------------------


async def test_an_entry_over_the_size_limit_is_refused() -> None:
    """Key plus JSON-encoded value must fit ``max_entry_bytes``; exactly the limit fits."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b", max_entry_bytes=20)
        fits = await board.put("k", "x" * 17)  # 1 + len('"' + 17 + '"') = 20
        assert fits.version == 1
        with pytest.raises(BoardEntryTooLargeError) as caught:
            await board.put("k", "x" * 18)
        assert str(caught.value) == (
            "board 'b': the entry for key 'k' is 21 bytes (key plus JSON value), over the "
            "limit of 20; nothing was written (store less, or split it across keys)"
        )
        assert (caught.value.size, caught.value.limit, caught.value.code) == (
            21,
            20,
            "board.entry_too_large",
        )
        assert isinstance(caught.value, ValueError)
        assert await runtime.store.stream_version("board/b") == 1


async def test_a_full_board_refuses_new_keys_but_updates_old_ones() -> None:
    """``max_entries`` bounds live keys; deleting one makes room again."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b", max_entries=2)
        await board.put("a", 1)
        await board.put("b", 1)
        with pytest.raises(BoardFullError) as caught:
            await board.put("c", 1)
        assert str(caught.value) == (
            "board 'b' is full (2 entries); key 'c' was not added (delete entries that are "
            "no longer needed, or open the board with a larger max_entries)"
        )
        assert (caught.value.key, caught.value.limit, caught.value.code) == ("c", 2, "board.full")
        assert (await board.put("a", 2)).version == 2
        await board.delete("b")
        assert (await board.put("c", 1)).version == 1


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", f"it is empty; {KEY_RULE}"),
        ("k" * 257, f"it is 257 characters long; {KEY_RULE}"),
        ("a b", f"the character ' ' at index 1 is not allowed; {KEY_RULE}"),
        ("plan\n", f"the character '\\n' at index 4 is not allowed; {KEY_RULE}"),
        ("é", f"the character 'é' at index 0 is not allowed; {KEY_RULE}"),
        (7, f"it is a int, not a str; {KEY_RULE}"),
    ],
    ids=["empty", "too-long", "space", "newline", "non-ascii", "not-str"],
)
async def test_bad_keys_are_refused_with_the_rule(key: object, reason: str) -> None:
    """Reads and writes refuse a bad key with a typed error stating the rule."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        for attempt in (
            board.put(key, 1),  # type: ignore[arg-type]
            board.get(key),  # type: ignore[arg-type]
            board.delete(key),  # type: ignore[arg-type]
        ):
            with pytest.raises(BoardBadKeyError) as caught:
                await attempt
            assert caught.value.reason == reason
            assert (caught.value.key, caught.value.what, caught.value.code) == (
                key,
                "key",
                "board.bad_key",
            )
        assert await runtime.store.stream_version("board/b") == 0


async def test_a_bad_key_message_shows_a_long_key_shortened() -> None:
    """The message stays readable for a very long key."""
    error = BoardBadKeyError("k" * 300, f"it is 300 characters long; {KEY_RULE}")
    assert str(error) == f"bad board key '{'k' * 59}...': it is 300 characters long; {KEY_RULE}"


async def test_keys_at_the_limits_are_accepted() -> None:
    """Every allowed character, and exactly 256 characters, make a valid key."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        await board.put("AZaz09_-./:", 1)
        await board.put("k" * 256, 2)
        assert [e.key for e in await board.list()] == ["AZaz09_-./:", "k" * 256]


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ({"a": [1, float("nan")]}, "$.a[1]: nan is not a JSON number"),
        (float("inf"), "$: inf is not a JSON number"),
        ((1, 2), "$: a tuple is not a JSON value; use a list"),
        ({1, 2}, "Type is not JSON serializable: set"),
        (2**64, "Integer exceeds 64-bit range"),
        ("\ud800", "str is not valid UTF-8: surrogates not allowed"),
        ({1: "x"}, "Dict key must be str"),
    ],
    ids=["nan", "inf", "tuple", "set", "bigint", "surrogate", "int-key"],
)
async def test_values_that_are_not_plain_json_are_refused(value: object, detail: str) -> None:
    """Only values that come back from the log exactly as written are accepted."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with pytest.raises(BoardBadValueError) as caught:
            await board.put("k", value)  # type: ignore[arg-type]
        assert str(caught.value) == (
            f"board 'b': the value for key 'k' is not plain JSON: {detail}"
        )
        assert (caught.value.detail, caught.value.code) == (detail, "board.bad_value")
        assert isinstance(caught.value, TypeError)
        assert await runtime.store.stream_version("board/b") == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"expected_version": -1},
            "expected_version must be an int >= 0 (0: the key must not exist) or None, got -1",
        ),
        (
            {"expected_version": True},
            "expected_version must be an int >= 0 (0: the key must not exist) or None, got True",
        ),
        ({"author": ""}, "author must be a non-empty str, got ''"),
        ({"author": None}, "author must be a non-empty str, got None"),
    ],
)
async def test_bad_write_options_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    """Misused options fail in the caller before anything reaches the board."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            await board.put("k", 1, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            await board.delete("k", **kwargs)  # type: ignore[arg-type]


async def test_list_refuses_a_bad_prefix() -> None:
    """A prefix follows the key rules but may be empty."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with pytest.raises(BoardBadKeyError) as caught:
            await board.list("a b")
        assert str(caught.value) == (
            f"bad board prefix 'a b': the character ' ' at index 1 is not allowed; {PREFIX_RULE}"
        )


async def test_board_methods_checkpoint() -> None:
    """Every public async method is a checkpoint, on success and on a refused write."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with trio.testing.assert_checkpoints():
            await board.put("k", 1)
        with trio.testing.assert_checkpoints():
            await board.get("k")
        with trio.testing.assert_checkpoints():
            await board.list()
        with trio.testing.assert_checkpoints():
            await board.delete("nothing")
        with trio.testing.assert_checkpoints(), pytest.raises(BoardConflictError):
            await board.put("k", 2, expected_version=7)
        with trio.testing.assert_checkpoints():
            await board.statistics()


# -- opening --------------------------------------------------------------------------


async def test_open_board_returns_the_running_board() -> None:
    """A second open (or a concurrent one) shares the actor and its limits."""
    async with open_runtime(seed=1) as runtime:
        boards: list[Board] = []

        async def opener() -> None:
            boards.append(await open_board(runtime, "shared", max_entries=5))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(opener)
        again = await open_board(runtime, "shared")
        assert {b.ref.id for b in [*boards, again]} == {"board:shared"}
        assert (again.max_entries, again.max_entry_bytes) == (5, 64 * 1024)
        await boards[0].put("k", 1)
        assert (await again.get("k")) is not None
        assert repr(again) == "<Board 'shared'>"
        assert again.id == "shared"
        assert again.runtime is runtime


async def test_open_board_refuses_a_different_limit_for_a_running_board() -> None:
    """Limits belong to the running board; asking for others is a configuration error."""
    async with open_runtime(seed=1) as runtime:
        await open_board(runtime, "b", max_entries=5)
        with pytest.raises(ConfigError) as caught:
            await open_board(runtime, "b", max_entries=6)
        assert str(caught.value) == (
            "board 'b' is running with max_entries=5, not 6; open it without max_entries to "
            "share it, or restart the runtime to change it"
        )


@pytest.mark.parametrize(
    ("board_id", "kwargs", "message"),
    [
        (
            "a/b",
            {},
            "board_id must be 1 to 128 characters from A-Z a-z 0-9 and _ - . :, got 'a/b'",
        ),
        ("", {}, "board_id must be 1 to 128 characters from A-Z a-z 0-9 and _ - . :, got ''"),
        ("b", {"max_entries": 0}, "max_entries must be an int >= 1 or None, got 0"),
        ("b", {"max_entry_bytes": 1.5}, "max_entry_bytes must be an int >= 1 or None, got 1.5"),
    ],
)
async def test_open_board_validates_its_arguments(
    board_id: str, kwargs: dict[str, object], message: str
) -> None:
    """A bad id or limit is a ConfigError naming it."""
    async with open_runtime(seed=1) as runtime:
        with pytest.raises(ConfigError) as caught:
            await open_board(runtime, board_id, **kwargs)  # type: ignore[arg-type]
        assert str(caught.value) == message


def test_board_is_made_by_open_board() -> None:
    """The handle cannot be built by hand."""
    with pytest.raises(TypeError, match="Board is made by open_board"):
        Board()


# -- watches --------------------------------------------------------------------------


def drain(channel: trio.MemoryReceiveChannel[BoardChanged]) -> list[BoardChanged]:
    """Everything already in the channel."""
    out: list[BoardChanged] = []
    while True:
        try:
            out.append(channel.receive_nowait())
        except trio.WouldBlock:
            return out


async def test_watchers_by_key_and_by_prefix_receive_changes_in_order() -> None:
    """Each watcher gets exactly its keys, in the board's order, with the author stamped."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        async with (
            board.watch(keys=["plan/1", "status"]) as by_key,
            board.watch(prefix="plan/") as by_prefix,
            board.watch() as everything,
        ):
            await board.put("plan/1", "a", author="alice")
            await board.put("plan/2", "b", author="bob")
            await board.put("status", "busy", author="carol")
            await board.put("plan/1", "c", author="bob")
            await board.delete("plan/2", author="alice")
            got_key, got_prefix, got_all = drain(by_key), drain(by_prefix), drain(everything)
            stats = await board.statistics()
        assert [(c.key, c.version, c.value, c.author) for c in got_key] == [
            ("plan/1", 1, "a", "alice"),
            ("status", 1, "busy", "carol"),
            ("plan/1", 2, "c", "bob"),
        ]
        assert [(c.key, c.version, c.deleted) for c in got_prefix] == [
            ("plan/1", 1, False),
            ("plan/2", 1, False),
            ("plan/1", 2, False),
            ("plan/2", 2, True),
        ]
        assert got_prefix[-1] == BoardChanged(
            board_id="b",
            key="plan/2",
            version=2,
            value=None,
            deleted=True,
            author="alice",
            board_version=5,
        )
        assert [c.board_version for c in got_all] == [1, 2, 3, 4, 5]
        assert stats.watches == 3
        assert (await board.statistics()).watches == 0  # leaving the blocks ended them


async def test_a_watch_sees_the_writes_after_it_and_nothing_refused() -> None:
    """Writes before the watch and refused writes are not delivered."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        await board.put("k", "before")
        async with board.watch(keys=["k"]) as changes:
            with pytest.raises(BoardConflictError):
                await board.put("k", "stale", expected_version=0)
            await board.delete("missing")
            await board.put("k", "after")
            assert [c.value for c in drain(changes)] == ["after"]


async def test_async_for_over_a_watch() -> None:
    """A watcher task iterates the channel while another task writes."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        seen: list[tuple[str, JsonValue]] = []

        async def consume(changes: trio.MemoryReceiveChannel[BoardChanged]) -> None:
            async for change in changes:
                seen.append((change.key, change.value))
                if change.value == "stop":
                    return

        async with board.watch(prefix="t/") as changes, trio.open_nursery() as nursery:
            nursery.start_soon(consume, changes)
            for value in ["a", "b", "stop"]:
                await board.put("t/x", value)
        assert seen == [("t/x", "a"), ("t/x", "b"), ("t/x", "stop")]


async def test_a_watcher_that_falls_behind_is_dropped_and_told() -> None:
    """The board never waits: a full buffer ends the watch, and leaving the block raises."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with pytest.raises(BoardWatchOverflowError) as caught:
            async with board.watch(buffer=2) as changes:
                for value in range(4):
                    await board.put("k", value)
                received = [c.value async for c in changes]  # ends after what was buffered
        assert received == [0, 1]
        assert str(caught.value) == (
            "a watch on board 'b' fell 2 changes behind and was dropped; later changes were "
            "not delivered (read the board again and watch anew, or watch with a larger "
            "buffer)"
        )
        assert (caught.value.buffer, caught.value.code) == (2, "board.watch_overflow")
        assert await board.statistics() == BoardStatistics(
            entries=1, version=4, watches=0, watches_dropped=1
        )


async def test_a_watch_whose_reader_is_closed_is_removed() -> None:
    """Closing the receiving end early ends the watch at the next change."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        async with board.watch() as changes:
            await changes.aclose()
            await board.put("k", 1)
            assert (await board.statistics()).watches == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"keys": ["a"], "prefix": "a"}, ValueError, "watch keys or a prefix, not both"),
        ({"keys": []}, ValueError, "keys is empty: pass at least one key, or a prefix"),
        (
            {"keys": "plan"},
            TypeError,
            "keys must be an iterable of keys, not the str 'plan'; wrap it: keys=['plan']",
        ),
        (
            {"keys": ["ok", "not ok"]},
            BoardBadKeyError,
            f"bad board key 'not ok': the character ' ' at index 3 is not allowed; {KEY_RULE}",
        ),
        (
            {"prefix": "p" * 257},
            BoardBadKeyError,
            f"bad board prefix '{'p' * 59}...': it is 257 characters long; {PREFIX_RULE}",
        ),
        ({"buffer": 0}, ValueError, "buffer must be an int >= 1, got 0"),
    ],
    ids=["both", "empty-keys", "str-keys", "bad-key", "long-prefix", "buffer"],
)
async def test_watch_validates_its_filter(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    """A bad filter fails before anything is registered."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        with pytest.raises(error) as caught:
            async with board.watch(**kwargs):  # type: ignore[arg-type]
                pass
        assert str(caught.value) == message
        if "buffer" not in kwargs:
            with pytest.raises(error):
                await board.watch_actor(board.ref, **kwargs)  # type: ignore[arg-type]
        assert (await board.statistics()).watches == 0


@attrs.frozen
class Ping:
    """Asked of a recorder to know it has handled everything sent before."""


class Recorder(Actor[object]):
    """Records every message; a stand-in for a watching agent."""

    def __init__(self, seen: list[object], gate: trio.Event | None = None) -> None:
        self.seen = seen
        self.gate = gate

    async def receive(self, message: object) -> object:
        if self.gate is not None:
            await self.gate.wait()
        if not isinstance(message, Ping):
            self.seen.append(message)
        return None


async def test_an_actor_watcher_gets_messages_until_unwatched() -> None:
    """watch_actor tells the actor; the same filter twice is one watch; unwatch ends it."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        seen: list[object] = []
        ref = await runtime.spawn(lambda: Recorder(seen))
        watch_id = await board.watch_actor(ref, prefix="a")
        assert await board.watch_actor(ref, prefix="a") == watch_id
        other = await board.watch_actor(ref, keys=["b"])
        assert other != watch_id
        await board.put("a1", 1, author="alice")
        await board.put("b", 2)
        await board.put("c", 3)
        await ref.ask(Ping())
        assert [(m.key, m.author) for m in seen if isinstance(m, BoardChanged)] == [
            ("a1", "alice"),
            ("b", "python"),
        ]
        assert board.unwatch(watch_id) is True
        assert board.unwatch(watch_id) is False
        await board.put("a1", 4)
        await board.put("b", 5)
        await ref.ask(Ping())
        assert [m.key for m in seen if isinstance(m, BoardChanged)] == ["a1", "b", "b"]


async def test_a_stopped_actor_loses_its_watch() -> None:
    """A watcher that stopped for good is dropped at the next change, without a fuss."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        ref = await runtime.spawn(lambda: Recorder([]))
        await board.watch_actor(ref)
        await runtime.stop(ref)
        await board.put("k", 1)
        assert await board.statistics() == BoardStatistics(
            entries=1, version=1, watches=0, watches_dropped=0
        )


async def test_an_actor_with_a_full_mailbox_loses_its_watch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The board never waits for a watcher: a full mailbox drops the watch, with a warning."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        seen: list[object] = []
        gate = trio.Event()
        ref: ActorRef[object] = await runtime.spawn(
            lambda: Recorder(seen, gate), id="slow", mailbox_capacity=1
        )
        await board.watch_actor(ref)
        await board.put("k", 1)
        await trio.testing.wait_all_tasks_blocked()  # the watcher holds change 1
        await board.put("k", 2)  # queued: the mailbox is full now
        with caplog.at_level(logging.WARNING, logger="powertrio.board"):
            await board.put("k", 3)
        gate.set()
        await ref.ask(Ping())
        assert [m.value for m in seen if isinstance(m, BoardChanged)] == [1, 2]
        assert await board.statistics() == BoardStatistics(
            entries=1, version=3, watches=0, watches_dropped=1
        )
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith("board 'b' dropped the watch watch_")
    assert message.endswith(" of /slow: its mailbox is full")


async def test_watches_survive_a_crash_of_the_board_actor() -> None:
    """The board restarts from its log and keeps its watches (they live beside the actor)."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        async with board.watch() as changes:
            await board.put("k", 1)
            with pytest.raises(ActorCrashedError) as caught:
                await board.ref.ask(Ping())  # not a board message: a programmer error
            assert isinstance(caught.value.__cause__, TypeError)
            assert str(caught.value.__cause__) == (
                "a board takes no Ping messages; use the Board handle"
            )
            await board.put("k", 2)
            assert [(c.value, c.version) for c in drain(changes)] == [(1, 1), (2, 2)]
        assert runtime.statistics().restarts == 1


# -- tools ----------------------------------------------------------------------------


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def last_tool_result(llm: ScriptedLLM, request: int) -> ToolResultMessage:
    """The newest tool result the model saw in its ``request``-th request."""
    found = [m for m in llm.requests[request].messages if isinstance(m, ToolResultMessage)]
    return found[-1]


async def test_a_session_writes_through_the_tools_as_itself() -> None:
    """The author is the calling session; the model's arguments cannot set it."""
    llm = ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[
                    call("c1", "board_write", '{"key": "plan", "value": [1], "author": "mallory"}')
                ]
            ),
            LLMResponse(tool_calls=[call("c2", "board_write", '{"key": "plan", "value": [1]}')]),
            LLMResponse(
                tool_calls=[
                    call(
                        "c3", "board_write", '{"key": "plan", "value": [2], "expected_version": 0}'
                    )
                ]
            ),
            LLMResponse(content="done"),
        ]
    )
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "team")
        session = await spawn_session(runtime, llm=llm, tools=board_tools(board))
        result = await session.send("write the plan")
        entry = await board.get("plan")
    llm.assert_complete()
    assert result.status == "completed"
    assert entry is not None
    assert (entry.value, entry.version, entry.author) == ([1], 1, f"session:{session.id}")
    forged = last_tool_result(llm, 1)
    assert forged.is_error
    assert "author" in forged.content
    written = last_tool_result(llm, 2)
    assert not written.is_error
    assert written.content == '{"key":"plan","version":1,"written":true}'
    conflict = last_tool_result(llm, 3)
    assert conflict.is_error
    assert conflict.content == (
        "BoardConflictError: board 'team': key 'plan' is at version 1, the write expected "
        "version 0; nothing was written (read the key again, then decide and retry)"
    )


async def run_calls(board: Board, session_id: str, *calls: ToolCall) -> list[ToolOutcome]:
    """Run the calls one after the other (a round would run them concurrently)."""
    registry = ToolRegistry.of(*board_tools(board, watch=True))
    outcomes: list[ToolOutcome] = []
    for one in calls:
        outcomes += await run_tool_calls([one], registry, session_id=session_id)
    return outcomes


async def test_read_list_and_delete_tools() -> None:
    """The tools answer in JSON the model can act on; errors carry their code."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b", max_entries=2)
        await board.put("notes/a", {"x": 1}, author="alice")
        await board.put("notes/b", "two")
        outcomes = await run_calls(
            board,
            "s1",
            call("1", "board_read", '{"key": "notes/a"}'),
            call("2", "board_read", '{"key": "missing"}'),
            call("3", "board_list", '{"prefix": "notes/"}'),
            call("4", "board_list", '{"include_values": true}'),
            call("5", "board_delete", '{"key": "notes/b", "expected_version": 1}'),
            call("6", "board_write", '{"key": "new", "value": 1}'),
            call("7", "board_write", '{"key": "newer", "value": 1}'),
            call("8", "board_read", '{"key": "bad key"}'),
        )
        entries = await board.list()
    assert [o.content for o in outcomes[:6]] == [
        '{"exists":true,"key":"notes/a","version":1,"author":"alice","value":{"x":1}}',
        '{"key":"missing","exists":false,"version":0}',
        '{"prefix":"notes/","count":2,"entries":[{"key":"notes/a","version":1,"author":"alice"},'
        '{"key":"notes/b","version":1,"author":"python"}]}',
        '{"prefix":"","count":2,"entries":[{"key":"notes/a","version":1,"author":"alice",'
        '"value":{"x":1}},{"key":"notes/b","version":1,"author":"python","value":"two"}]}',
        '{"key":"notes/b","deleted":true}',
        '{"key":"new","version":1,"written":true}',
    ]
    assert (outcomes[6].status, outcomes[6].error_code) == ("error", "board.full")
    assert (outcomes[7].status, outcomes[7].error_code) == (
        "invalid_arguments",
        "tool.invalid_args",
    )
    assert [(e.key, e.author) for e in entries] == [("new", "session:s1"), ("notes/a", "alice")]


async def test_the_watch_tool_subscribes_the_calling_session() -> None:
    """The watcher is the actor registered under the caller's session id."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        seen: list[object] = []
        agent = await runtime.spawn(lambda: Recorder(seen), id="ses-1")
        outcomes = await run_calls(
            board,
            "ses-1",
            call("1", "board_watch", '{"keys": ["plan", "plan"]}'),
            call("2", "board_watch", '{"prefix": "notes/"}'),
        )
        assert [o.status for o in outcomes] == ["ok", "ok"]
        assert '"keys":["plan"]' in outcomes[0].content
        assert '"prefix":"notes/"' in outcomes[1].content
        await board.put("plan", 1)
        await board.put("notes/x", 2)
        await board.put("elsewhere", 3)
        await agent.ask(Ping())
        assert [m.key for m in seen if isinstance(m, BoardChanged)] == ["plan", "notes/x"]
        # A watch names its session by id, in the log: one not running now is told of
        # the changes once it runs (after a restart, in another process).
        (later,) = await run_calls(board, "ses-404", call("3", "board_watch", "{}"))
        assert later.status == "ok"
        watchers = {w.watcher for w in (await board.state()).watches.values()}
        assert watchers == {"ses-1", "ses-404"}


async def test_a_session_can_watch_through_its_tool() -> None:
    """A real session subscribes itself; a change wakes it as a follow-up of kind board."""
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[call("c1", "board_watch", '{"prefix": ""}')]),
            LLMResponse(content="watching"),
            LLMResponse(content="still fine"),
        ]
    )
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        session = await spawn_session(runtime, llm=llm, tools=board_tools(board, watch=True))
        assert (await session.send("watch the board")).status == "completed"
        assert (await board.statistics()).watches == 1
        await board.put("k", 1)
        await trio.testing.wait_all_tasks_blocked()
        state = await session.state()
        assert (await board.statistics()).watches == 1
    llm.assert_complete()
    assert [r.text for r in state.results.values()] == ["watching", "still fine"]
    woken_by = llm.requests[-1].messages[-1]
    assert woken_by.role == "user"
    assert woken_by.text == "[board b] 'k' is now 1 (version 1, by python)"


async def test_board_tools_are_configurable() -> None:
    """Flags pick the tools and a prefix names them; all off is a mistake."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        assert [t.name for t in board_tools(board)] == [
            "board_read",
            "board_list",
            "board_write",
            "board_delete",
        ]
        assert [t.name for t in board_tools(board, write=False, watch=True)] == [
            "board_read",
            "board_list",
            "board_watch",
        ]
        assert [t.name for t in board_tools(board, read=False, name_prefix="team")] == [
            "team_write",
            "team_delete",
        ]
        all_off = "board_tools: read, write and watch are all False; switch at least one on"
        with pytest.raises(ValueError, match=f"^{re.escape(all_off)}$"):
            board_tools(board, read=False, write=False)
        with pytest.raises(ToolDefinitionError, match="no spaces_read"):
            board_tools(board, name_prefix="no spaces")
        spec = board_tools(board)[2].spec
        assert "author" not in spec.parameters["properties"]  # type: ignore[operator]


# -- restart --------------------------------------------------------------------------


async def test_a_reopened_runtime_folds_the_board_from_its_sqlite_log(tmp_path: Path) -> None:
    """Entries, versions, authors and deletions come back from the file, and versions go on."""
    path = tmp_path / "board.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=1) as runtime:
        board = await open_board(runtime, "b")
        await board.put("a", {"n": 1}, author="alice")
        await board.put("a", {"n": 2}, author="bob")
        await board.put("gone", 1)
        await board.delete("gone", author="carol")
        await board.put("z", [1.5, None, True])
        before = await board.state()
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=2) as runtime:
        board = await open_board(runtime, "b")
        after = await board.state()
        assert after == before
        assert after == await fold_log(store, "b")
        assert [(e.key, e.version, e.author) for e in await board.list()] == [
            ("a", 2, "bob"),
            ("z", 1, "python"),
        ]
        assert (await board.put("gone", 2)).version == 3
        with pytest.raises(BoardConflictError):
            await board.put("a", 3, expected_version=1)


def test_board_events_round_trip_through_the_codec() -> None:
    """Events are stored with their names and come back equal."""
    from protocols.codec import decode

    for event in (
        EntryPut(key="k", value={"a": [1, 2.5, None]}, version=3, author="session:s"),
        EntryDeleted(key="k", version=4, author="python"),
    ):
        encoded = encode(event)
        assert decode(encoded.type, encoded.schema_version, encoded.data) == event
    assert encode(EntryPut(key="k", value=1, version=1, author="a")).type == "board.entry_put"
    assert encode(EntryDeleted(key="k", version=1, author="a")).type == "board.entry_deleted"


# -- properties -----------------------------------------------------------------------

KEYS = ["a", "b", "a/1", "a/2", "b/x"]
LIMITS = Limits(max_entries=3, max_entry_bytes=48)
EXPECTED = st.sampled_from([None, None, -1, -1, -1, 0, 1, 2, 3])
"""An expected version: none, the one just read (-1), or a guess (often a conflict)."""

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
values = st.integers(0, 9) | json_values
"""Mostly small values, so that writes fill the board more often than they overflow it."""


@attrs.define
class Model:
    """The trivially correct board: a dict of (value, version, author) and the dead keys."""

    live: dict[str, tuple[JsonValue, int, str]] = attrs.Factory(dict)
    dead: dict[str, int] = attrs.Factory(dict)

    def version(self, key: str) -> int:
        return self.live[key][1] if key in self.live else 0

    def put(self, key: str, value: JsonValue, expected: int | None, author: str) -> str | int:
        """The new version, or the code of the error the board must raise."""
        import orjson

        if len(key) + len(orjson.dumps(value)) > LIMITS.max_entry_bytes:
            return "board.entry_too_large"
        if expected is not None and expected != self.version(key):
            return "board.conflict"
        if key not in self.live and len(self.live) >= LIMITS.max_entries:
            return "board.full"
        version = (self.live[key][1] if key in self.live else self.dead.pop(key, 0)) + 1
        self.live[key] = (value, version, author)
        return version

    def delete(self, key: str, expected: int | None) -> str | bool:
        if expected is not None and expected != self.version(key):
            return "board.conflict"
        if key not in self.live:
            return False
        self.dead[key] = self.live.pop(key)[1] + 1
        return True

    def entries(self) -> list[tuple[str, JsonValue, int, str]]:
        return [(k, v, n, a) for k, (v, n, a) in sorted(self.live.items())]


def entries_of(state: BoardState) -> list[tuple[str, JsonValue, int, str]]:
    ordered = sorted(state.entries.values(), key=lambda e: e.key)
    return [(e.key, e.value, e.version, e.author) for e in ordered]


class BoardDeciderMachine(RuleBasedStateMachine):
    """The pure decider (decide + evolve) against the dict model, step by step."""

    def __init__(self) -> None:
        super().__init__()
        self.state = BoardState()
        self.events: list[object] = []
        self.model = Model()

    def _apply(self, decided: object) -> object:
        if isinstance(decided, BoardError):
            return decided.code
        if decided is None:
            return False
        self.events.append(decided)
        self.state = evolve(self.state, decided)
        return decided

    @rule(key=st.sampled_from(KEYS), value=values, expected=EXPECTED)
    def put(self, key: str, value: JsonValue, expected: int | None) -> None:
        if expected == -1:  # the version just read: the usual compare-and-set
            expected = self.model.version(key)
        decided = decide_put(
            self.state,
            board_id="p",
            limits=LIMITS,
            key=key,
            value=value,
            expected_version=expected,
            author="w",
        )
        result = self._apply(decided)
        wanted = self.model.put(key, value, expected, "w")
        assert wanted == (result.version if isinstance(result, EntryPut) else result)

    @precondition(lambda self: bool(self.model.live) or bool(self.model.dead))
    @rule(key=st.sampled_from(KEYS), expected=EXPECTED)
    def delete(self, key: str, expected: int | None) -> None:
        if expected == -1:
            expected = self.model.version(key)
        decided = decide_delete(
            self.state, board_id="p", key=key, expected_version=expected, author="w"
        )
        result = self._apply(decided)
        wanted = self.model.delete(key, expected)
        assert wanted == (True if isinstance(result, EntryDeleted) else result)

    @invariant()
    def state_matches_the_model(self) -> None:
        assert entries_of(self.state) == self.model.entries()
        assert self.state.version == len(self.events)

    @invariant()
    def replay_equals_the_live_state(self) -> None:
        folded = BoardState()
        for event in self.events:
            folded = evolve(folded, event)
        assert folded == self.state


BoardDeciderMachine.TestCase.settings = settings(
    max_examples=examples(60), stateful_step_count=30, deadline=None
)
TestBoardDecider = BoardDeciderMachine.TestCase


operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "delete"]),
        st.sampled_from(KEYS),
        values,
        EXPECTED,
    ),
    max_size=40,
)


@settings(max_examples=examples(40), deadline=None)
@given(ops=operations)
def test_the_board_actor_agrees_with_a_dict_and_restarts_to_the_fold(
    ops: list[tuple[str, str, JsonValue, int | None]],
) -> None:
    """Random put/CAS/delete sequences: results, versions and contents match the model;
    after a restart the state equals the live one and the fold of the raw log."""

    async def scenario() -> None:
        store = InMemoryEventStore()
        model = Model()
        async with open_runtime(store=store, seed=1) as runtime:
            board = await open_board(
                runtime, "p", max_entries=LIMITS.max_entries, max_entry_bytes=LIMITS.max_entry_bytes
            )
            for op, key, value, guess in ops:
                expected = model.version(key) if guess == -1 else guess
                if op == "put":
                    wanted: object = model.put(key, value, expected, "w")
                    try:
                        got: object = (
                            await board.put(key, value, expected_version=expected, author="w")
                        ).version
                    except BoardError as exc:
                        got = exc.code
                else:
                    wanted = model.delete(key, expected)
                    try:
                        got = await board.delete(key, expected_version=expected, author="w")
                    except BoardError as exc:
                        got = exc.code
                assert wanted == got
            live = await board.state()
            assert entries_of(live) == model.entries()
        async with open_runtime(store=store, seed=2) as runtime:
            board = await open_board(runtime, "p")
            assert await board.state() == live
        assert await fold_log(store, "p") == live

    trio.run(scenario)


async def _wait_for_results(session: Session, count: int) -> SessionState:
    with trio.fail_after(10):
        while True:
            state = await session.state()
            if state.run is None and len(state.results) >= count:
                return state
            await trio.sleep(0.01)


async def test_a_watch_the_model_made_wakes_its_session_after_a_restart(tmp_path: Path) -> None:
    """The log is the authority for watches: the model's ``board_watch`` is a board event,
    so after the runtime ends and a new one opens the same SQLite file, a write by another
    party wakes the watching session with no re-watch from Python (either start order)."""
    path = tmp_path / "log.sqlite"
    watching = ScriptedLLM(
        [
            LLMResponse(tool_calls=[call("c1", "board_watch", '{"prefix": "plan/"}')]),
            LLMResponse(content="watching"),
        ]
    )
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        board = await open_board(runtime, "team")
        session = await spawn_session(
            runtime, llm=watching, tools=board_tools(board, watch=True), session_id="planner"
        )
        assert (await session.send("watch the plans")).status == "completed"
    for restart, board_first in enumerate((True, False)):
        woken = ScriptedLLM([LLMResponse(content=f"seen the plan, restart {restart}")])
        async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
            if board_first:
                board = await open_board(runtime, "team")
            session = await spawn_session(
                runtime, llm=woken, tools=board_tools("team", watch=True), session_id="planner"
            )
            if not board_first:
                board = await open_board(runtime, "team")
            await board.put(f"plan/{restart}", "ship it", author="alice")
            state = await _wait_for_results(session, 2 + restart)
            assert (await board.statistics()).watches == 1
        woken.assert_complete()
        assert list(state.results.values())[-1].text == f"seen the plan, restart {restart}"
        assert f"plan/{restart}" in str(woken.requests[0].messages[-1])


async def test_a_session_watch_is_recorded_and_ended_in_the_log() -> None:
    """watch_session writes WatchAdded (once per filter), unwatch_session WatchRemoved."""
    async with open_runtime(seed=1) as runtime:
        board = await open_board(runtime, "b")
        watch_id = await board.watch_session("ses-1", keys=["b", "a"])
        assert await board.watch_session("ses-1", keys=["a", "b"]) == watch_id
        assert await board.unwatch_session(watch_id) is True
        assert await board.unwatch_session(watch_id) is False
        kinds = [r.type for r in await runtime.store.read("board/b")]
        assert kinds == ["board.watch_added", "board.watch_removed"]
        assert (await board.state()).watches == {}
