"""The requests a board actor handles, and the JSON form of those a node relays.

Apart from ``_blackboard`` so that the relay (``_remote``) can rebuild a request
from an inbox message without importing the actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from runtime import Request

from ._errors import BoardError
from ._events import BoardState, Entry, Limits
from ._watches import Watch, WatchTable

__all__ = [
    "BoardInfo",
    "_AddSessionWatch",
    "_AddWatch",
    "_Delete",
    "_Describe",
    "_Get",
    "_GetState",
    "_List",
    "_Put",
    "_RemoveSessionWatch",
    "request_of",
]


@attrs.frozen
class BoardInfo:
    limits: Limits
    watches: WatchTable


@attrs.frozen(kw_only=True)
class _Put(Request[Entry | BoardError]):
    key: object
    value: object
    expected_version: int | None
    author: str
    request: str | None = None


@attrs.frozen(kw_only=True)
class _Delete(Request[bool | BoardError]):
    key: object
    expected_version: int | None
    author: str
    request: str | None = None


@attrs.frozen
class _Get(Request[Entry | BoardError | None]):
    key: object


@attrs.frozen
class _List(Request[tuple[Entry, ...] | BoardError]):
    prefix: object


@attrs.frozen
class _AddWatch(Request[str]):
    watch: Watch


@attrs.frozen(kw_only=True)
class _AddSessionWatch(Request[str]):
    watch_id: str
    watcher: str
    keys: tuple[str, ...] | None
    prefix: str


@attrs.frozen
class _RemoveSessionWatch(Request[bool]):
    watch_id: str


@attrs.frozen
class _GetState(Request[BoardState]):
    pass


@attrs.frozen
class _Describe(Request[BoardInfo]):
    pass


def request_of(body: Mapping[str, Any]) -> Request[Any]:
    """The board request a relayed call's JSON body stands for (see :meth:`Board._ask`).

    Raises:
        ValueError: an operation no handle sends.
    """
    op = body["op"]
    if op == "put":
        return _Put(
            key=body["key"],
            value=body["value"],
            expected_version=body["expected"],
            author=body["author"],
            request=body.get("request"),
        )
    if op == "delete":
        return _Delete(
            key=body["key"],
            expected_version=body["expected"],
            author=body["author"],
            request=body.get("request"),
        )
    if op == "get":
        return _Get(body["key"])
    if op == "list":
        return _List(body["prefix"])
    if op == "watch_session":
        keys = body["keys"]
        return _AddSessionWatch(
            watch_id=body["watch_id"],
            watcher=body["watcher"],
            keys=None if keys is None else tuple(keys),
            prefix=body["prefix"],
        )
    if op == "unwatch_session":
        return _RemoveSessionWatch(body["watch_id"])
    msg = f"unknown board operation {op!r} in a relayed message"
    raise ValueError(msg)
