"""Agent tools for a blackboard: read, list, write and delete with versions, watch."""

from __future__ import annotations

from typing import Final

from protocols import JsonObject, JsonValue

from ._blackboard import Board
from ._board_events import KEY_MAX_LENGTH, KEY_PATTERN, Entry
from ._tools import Tool, ToolContext, tool

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


def _entry(entry: Entry, *, with_value: bool = True) -> JsonObject:
    found: JsonObject = {"key": entry.key, "version": entry.version, "author": entry.author}
    if with_value:
        found["value"] = entry.value
    return found


def board_tools(
    board: Board,
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
    which subscribes the calling session's actor: each change then arrives at the session
    as a :class:`BoardChanged` message. A board error (a conflict, a full board, a bad
    key...) reaches the model as the tool's error, with its code and message.

    Every write is stamped ``session:<id>`` with the session id from the
    :class:`ToolContext`: the model cannot choose the author.

    Args:
        board (Board): the board, from :func:`open_board`.
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
    """
    if not (read or write or watch):
        msg = "board_tools: read, write and watch are all False; switch at least one on"
        raise ValueError(msg)
    tools: list[Tool[..., object]] = []
    if read:
        tools += [_read_tool(board, name_prefix), _list_tool(board, name_prefix)]
    if write:
        tools += [_write_tool(board, name_prefix), _delete_tool(board, name_prefix)]
    if watch:
        tools.append(_watch_tool(board, name_prefix))
    return tuple(tools)


def _read_tool(board: Board, prefix: str) -> Tool[..., object]:
    @tool(
        name=f"{prefix}_read",
        description=(
            f"Read one key of the shared board {board.id!r}: its JSON value, its version "
            "(pass it as expected_version when you write it back) and its author."
        ),
        parameters=_object({"key": _KEY}, "key"),
    )
    async def read(key: str) -> JsonObject:
        entry = await board.get(key)
        if entry is None:
            return {"key": key, "exists": False, "version": 0}
        return {"exists": True, **_entry(entry)}

    return read


def _list_tool(board: Board, prefix: str) -> Tool[..., object]:
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
    async def list_keys(prefix: str = "", include_values: bool = False) -> JsonObject:
        entries = await board.list(prefix)
        found: list[JsonValue] = [_entry(e, with_value=include_values) for e in entries]
        return {"prefix": prefix, "count": len(found), "entries": found}

    return list_keys


def _write_tool(board: Board, prefix: str) -> Tool[..., object]:
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
        entry = await board.put(
            key, value, expected_version=expected_version, author=_author(context)
        )
        return {"key": entry.key, "version": entry.version, "written": True}

    return write


def _delete_tool(board: Board, prefix: str) -> Tool[..., object]:
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
        deleted = await board.delete(
            key, expected_version=expected_version, author=_author(context)
        )
        return {"key": key, "deleted": deleted}

    return delete


def _watch_tool(board: Board, prefix: str) -> Tool[..., object]:
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
        # The watcher is the calling session's actor, found by the runtime's registry.
        session = board.runtime.lookup(context.session_id)
        watch_id = await board.watch_actor(session, keys=keys, prefix=prefix)
        watching: JsonObject = (
            {"keys": list[JsonValue](sorted(set(keys)))}
            if keys is not None
            else {"prefix": prefix or ""}
        )
        return {"watch_id": watch_id, **watching}

    return watch
