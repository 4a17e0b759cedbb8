"""Agent tools for a blackboard: read, list, write and delete with versions, watch."""

from __future__ import annotations

from typing import Final

from protocols import JsonObject, JsonValue

from .._tools._tool import Tool, ToolContext, tool
from ._blackboard import Board, open_board
from ._events import BOARD_ID_PATTERN, KEY_MAX_LENGTH, KEY_PATTERN, Entry

__all__ = ["board_tools"]

_KEY: Final[JsonObject] = {
    "type": "string",
    "minLength": 1,
    "maxLength": KEY_MAX_LENGTH,
    "pattern": KEY_PATTERN,
    "description": "The key: 1 to 256 characters from A-Z a-z 0-9 and _ - . / :",
}
_PREFIX: Final[JsonObject] = {
    "type": "string",
    "maxLength": KEY_MAX_LENGTH,
    "pattern": r"^[A-Za-z0-9_./:-]*$",
    "description": "Only keys starting with this (empty: every key).",
}
_EXPECTED: Final[JsonObject] = {
    "type": "integer",
    "minimum": 0,
    "description": (
        "Write only if the key is still at this version (the version you read; 0: the key "
        "must not exist). Leave it out to write whatever the version."
    ),
}


def _object(properties: JsonObject, *required: str) -> JsonObject:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _author(context: ToolContext) -> str:
    # The identity comes from the runtime's context, never from the model's arguments.
    return f"session:{context.session_id}"


class _BoardOf:
    """The board a tool works on: a handle, or an id opened in the caller's runtime."""

    def __init__(self, board: Board | str) -> None:
        if isinstance(board, Board):
            self.id = board.id
            self._board: Board | None = board
            return
        if not isinstance(board, str) or BOARD_ID_PATTERN.fullmatch(board) is None:
            msg = (
                "board_tools takes a Board or a board id (1 to 128 characters from "
                f"A-Z a-z 0-9 and _ - . :), got {board!r}"
            )
            raise ValueError(msg)
        self.id = board
        self._board = None

    async def get(self, context: ToolContext) -> Board:
        if self._board is not None:
            return self._board
        if context.runtime is None:
            msg = f"board {self.id!r}: the tool was called outside a runtime"
            raise RuntimeError(msg)
        # Found (or started) in the runtime of the call: a new runtime, a new board actor.
        return await open_board(context.runtime, self.id)


def _entry(entry: Entry, *, with_value: bool = True) -> JsonObject:
    found: JsonObject = {"key": entry.key, "version": entry.version, "author": entry.author}
    if with_value:
        found["value"] = entry.value
    return found


def board_tools(
    board: Board | str,
    *,
    read: bool = True,
    write: bool = True,
    watch: bool = False,
    name_prefix: str = "board",
) -> tuple[Tool[..., object], ...]:
    """The tools an agent uses to share a board, each stamping the caller as the author.

    ``read`` gives ``<prefix>_read`` (one key, its value and version) and ``<prefix>_list``
    (keys under a prefix); ``write`` gives ``<prefix>_write`` (with an optional expected
    version: compare-and-set) and ``<prefix>_delete``; ``watch`` gives ``<prefix>_watch``,
    which records a watch for the calling session in the board's log
    (:meth:`Board.watch_session`): each change then arrives at the session as a
    :class:`BoardChanged` message, across restarts of the board, the session and the
    process. A board error (a conflict, a full board, a bad
    key...) reaches the model as the tool's error, with its code and message.

    Every write is stamped ``session:<id>`` with the session id from the
    :class:`ToolContext`: the model cannot choose the author.

    Give the board's id rather than a handle to make the tools before any runtime runs
    (in a module-level :class:`AgentSpec`): each call then finds the board in the runtime
    of the calling session (opening it there if needed), so the same tools serve a live
    run, a restart in a new process, :func:`replay_session` and the test kit's harness.

    Args:
        board (Board | str): the board (from :func:`open_board`), or its id.
        read (bool): offer the read and list tools.
        write (bool): offer the write and delete tools.
        watch (bool): offer the watch tool.
        name_prefix (str): the tools' names start with it; pick one per board when an
            agent shares several boards.

    Returns:
        The tools, in the order read, list, write, delete, watch.

    Raises:
        ValueError: every tool is switched off.
        ToolDefinitionError: ``name_prefix`` makes an invalid tool name.
        ValueError: ``board`` is not a valid board id.
    """
    if not (read or write or watch):
        msg = "board_tools: read, write and watch are all False; switch at least one on"
        raise ValueError(msg)
    target = _BoardOf(board)
    tools: list[Tool[..., object]] = []
    if read:
        tools += [_read_tool(target, name_prefix), _list_tool(target, name_prefix)]
    if write:
        tools += [_write_tool(target, name_prefix), _delete_tool(target, name_prefix)]
    if watch:
        tools.append(_watch_tool(target, name_prefix))
    return tuple(tools)


def _read_tool(board: _BoardOf, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_read",
        description=(
            f"Read one key of the shared board {board.id!r}: its JSON value, its version "
            "(pass it as expected_version when you write it back) and its author."
        ),
        parameters=_object({"key": _KEY}, "key"),
    )
    async def read(key: str, context: ToolContext) -> JsonObject:
        entry = await (await board.get(context)).get(key)
        if entry is None:
            return {"key": key, "exists": False, "version": 0}
        return {"exists": True, **_entry(entry)}

    return read


def _list_tool(board: _BoardOf, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_list",
        description=(
            f"List the keys of the shared board {board.id!r} under a prefix, sorted, with "
            "their versions and authors (and values if asked)."
        ),
        parameters=_object(
            {
                "prefix": _PREFIX,
                "include_values": {
                    "type": "boolean",
                    "description": "Also return each value (default: false).",
                },
            }
        ),
    )
    async def list_keys(
        context: ToolContext, prefix: str = "", include_values: bool = False
    ) -> JsonObject:
        entries = await (await board.get(context)).list(prefix)
        found: list[JsonValue] = [_entry(e, with_value=include_values) for e in entries]
        return {"prefix": prefix, "count": len(found), "entries": found}

    return list_keys


def _write_tool(board: _BoardOf, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_write",
        description=(
            f"Write a JSON value under a key of the shared board {board.id!r}. With "
            "expected_version the write happens only if nobody changed the key since you "
            "read it; otherwise nothing is written and the error names the current version."
        ),
        parameters=_object(
            {
                "key": _KEY,
                "value": {"description": "Any JSON value."},
                "expected_version": _EXPECTED,
            },
            "key",
            "value",
        ),
    )
    async def write(
        key: str, value: JsonValue, context: ToolContext, expected_version: int | None = None
    ) -> JsonObject:
        entry = await (await board.get(context)).put(
            key, value, expected_version=expected_version, author=_author(context)
        )
        return {"key": entry.key, "version": entry.version, "written": True}

    return write


def _delete_tool(board: _BoardOf, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_delete",
        description=(
            f"Delete a key of the shared board {board.id!r}; with expected_version only if "
            "nobody changed it since you read it."
        ),
        parameters=_object({"key": _KEY, "expected_version": _EXPECTED}, "key"),
    )
    async def delete(
        key: str, context: ToolContext, expected_version: int | None = None
    ) -> JsonObject:
        deleted = await (await board.get(context)).delete(
            key, expected_version=expected_version, author=_author(context)
        )
        return {"key": key, "deleted": deleted}

    return delete


def _watch_tool(board: _BoardOf, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_watch",
        description=(
            f"Be told about changes to keys of the shared board {board.id!r}: give keys or a "
            "prefix. Each later change arrives as a message to this conversation."
        ),
        parameters=_object(
            {
                "keys": {"type": "array", "items": _KEY, "minItems": 1},
                "prefix": _PREFIX,
            }
        ),
    )
    async def watch(
        context: ToolContext, keys: list[str] | None = None, prefix: str | None = None
    ) -> JsonObject:
        # Recorded in the board's log with the caller's session id, so it outlives restarts.
        found = await board.get(context)
        watch_id = await found.watch_session(context.session_id, keys=keys, prefix=prefix)
        watching: JsonObject = (
            {"keys": list[JsonValue](sorted(set(keys)))}
            if keys is not None
            else {"prefix": prefix or ""}
        )
        return {"watch_id": watch_id, **watching}

    return watch
