"""Memory across sessions: ``remember`` and ``recall_memory`` on an agent's memory board.

A memory board is an ordinary blackboard (its own stream, versioned entries); every
session of an agent that is given the same board id shares what earlier sessions
remembered, across restarts. Each entry is stamped by the runtime with its author (the
calling session) and its version, never from the model's arguments.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

import orjson

from protocols import JsonObject, JsonValue

from .._tools._tool import Tool, ToolContext, tool
from ._blackboard import Board
from ._events import KEY_MAX_LENGTH, KEY_PATTERN, Entry
from ._tools import _author, _BoardOf

__all__ = ["memory_tools"]

_WORD: Final = re.compile(r"\w+", re.UNICODE)


def _text(entry: Entry) -> str:
    value = entry.value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        text = value["text"]
        assert isinstance(text, str)
        return text
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def memory_tools(
    board: Board | str, *, name_prefix: str = ""
) -> tuple[Tool[..., object], Tool[..., object]]:
    """The ``remember`` and ``recall_memory`` tools on ``board``, an agent's memory.

    ``remember(text, key?)`` writes ``{"text": text}`` under ``key`` (a new key derived
    from the call when none is given, so a retried call writes the same entry);
    ``recall_memory(query)`` returns the entries holding the most words of the query,
    each with its key, text, author (``session:<id>``, stamped by the runtime) and
    version. Give every session of an agent the same board id (``memory:<agent>``, say)
    and what one session remembers, the next one finds.

    Args:
        board (Board | str): the board, or its id (opened in the caller's runtime, as
            :func:`board_tools` does).
        name_prefix (str): prefixed to both tool names (``work_`` gives ``work_remember``).

    Raises:
        ValueError: ``board`` is not a valid board id.
    """
    target = _BoardOf(board)

    @tool(
        name=f"{name_prefix}remember",
        description=(
            "Remember a fact for later conversations (your long-term memory). Give a key to "
            "replace what you remembered under it; leave it out to add a new memory."
        ),
        parameters={
            "type": "object",
            "properties": {
                "text": {"type": "string", "minLength": 1, "description": "What to remember."},
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": KEY_MAX_LENGTH,
                    "pattern": KEY_PATTERN,
                    "description": "Optional name of the memory (A-Z a-z 0-9 _ - . / :).",
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    )
    async def remember(context: ToolContext, text: str, key: str | None = None) -> JsonObject:
        if key is None:  # stable across a crash resume: the same call writes the same key
            digest = hashlib.sha256(context.idempotency_key.encode()).hexdigest()[:16]
            key = f"memory/{digest}"
        entry = await (await target.get(context)).put(key, {"text": text}, author=_author(context))
        return {"key": entry.key, "version": entry.version, "author": entry.author}

    @tool(
        name=f"{name_prefix}recall_memory",
        description=(
            "Search your long-term memory (what you or earlier conversations remembered): "
            "the memories sharing the most words with the query, with who wrote them and "
            "their versions."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "Words to find."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )
    async def recall_memory(context: ToolContext, query: str, limit: int = 5) -> JsonObject:
        words = {w.lower() for w in _WORD.findall(query)}
        if not words:
            msg = f"recall_memory: the query {query!r} has no words to search for"
            raise ValueError(msg)
        scored: list[tuple[int, int, Entry]] = []
        for entry in await (await target.get(context)).list():
            found = {w.lower() for w in _WORD.findall(_text(entry))} & words
            if found:
                scored.append((len(found), entry.board_version, entry))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2].key))
        results: list[JsonValue] = [
            {
                "key": entry.key,
                "text": _text(entry),
                "author": entry.author,
                "version": entry.version,
                "board_version": entry.board_version,
            }
            for _, _, entry in scored[:limit]
        ]
        return {"query": query, "count": len(results), "results": results}

    return remember, recall_memory
