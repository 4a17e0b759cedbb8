"""Errors of the agents' shared features: the blackboard (``board.*``) and sessions.

The branches ``actors`` raises on behalf of its agent-level features; ``protocols.errors``
re-exports them.
"""

from __future__ import annotations

from typing import Literal

from ._errors_base import PowertrioError

__all__ = [
    "BoardBadKeyError",
    "BoardBadValueError",
    "BoardConflictError",
    "BoardEntryTooLargeError",
    "BoardError",
    "BoardFullError",
    "BoardWatchOverflowError",
    "ForeignAgentError",
    "HookVetoError",
    "HumanRequestNotFoundError",
    "LimitError",
    "LimitTooLargeError",
    "NoOpenRunError",
    "OutputInvalidError",
    "OutputTypeError",
    "SessionBusyError",
    "SessionError",
]


# --- blackboard ----------------------------------------------------------------------


class BoardError(PowertrioError):
    """A blackboard refused a read, a write or a watch; nothing was written."""

    code = "board"


def _shown(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 66 else text[:60] + "...'"


class BoardConflictError(BoardError):
    """A compare-and-set write expected another version of the key; nothing was written."""

    code = "board.conflict"

    def __init__(self, board_id: str, key: str, expected: int, actual: int) -> None:
        self.board_id = board_id
        self.key = key
        self.expected = expected
        self.actual = actual
        now = f"is at version {actual}" if actual else "does not exist (version 0)"
        super().__init__(
            f"board {board_id!r}: key {_shown(key)} {now}, the write expected version "
            f"{expected}; nothing was written (read the key again, then decide and retry)"
        )


class BoardEntryTooLargeError(BoardError, ValueError):
    """An entry (key plus JSON-encoded value) is over the board's ``max_entry_bytes``."""

    code = "board.entry_too_large"

    def __init__(self, board_id: str, key: str, size: int, limit: int) -> None:
        self.board_id = board_id
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(
            f"board {board_id!r}: the entry for key {_shown(key)} is {size} bytes (key plus "
            f"JSON value), over the limit of {limit}; nothing was written (store less, or "
            "split it across keys)"
        )


class BoardFullError(BoardError):
    """A write would add a key to a board that already holds ``max_entries`` entries."""

    code = "board.full"

    def __init__(self, board_id: str, key: str, limit: int) -> None:
        self.board_id = board_id
        self.key = key
        self.limit = limit
        super().__init__(
            f"board {board_id!r} is full ({limit} entries); key {_shown(key)} was not added "
            "(delete entries that are no longer needed, or open the board with a larger "
            "max_entries)"
        )


class BoardBadKeyError(BoardError, ValueError):
    """A board key (or a watch's prefix) breaks the rules for keys.

    ``what`` says which one it was; ``reason`` says what is wrong and states the rule.
    """

    code = "board.bad_key"

    def __init__(self, key: object, reason: str, what: Literal["key", "prefix"] = "key") -> None:
        self.key = key
        self.reason = reason
        self.what = what
        super().__init__(f"bad board {what} {_shown(key)}: {reason}")


class BoardBadValueError(BoardError, TypeError):
    """A value to write is not plain JSON (a set, a tuple, NaN, an object, ...)."""

    code = "board.bad_value"

    def __init__(self, board_id: str, key: str, detail: str) -> None:
        self.board_id = board_id
        self.key = key
        self.detail = detail
        super().__init__(
            f"board {board_id!r}: the value for key {_shown(key)} is not plain JSON: {detail}"
        )


class BoardWatchOverflowError(BoardError):
    """A watcher fell ``buffer`` changes behind; the board dropped its watch.

    Every change delivered before the overflow was received in order; none after it was.
    """

    code = "board.watch_overflow"

    def __init__(self, board_id: str, buffer: int) -> None:
        self.board_id = board_id
        self.buffer = buffer
        super().__init__(
            f"a watch on board {board_id!r} fell {buffer} changes behind and was dropped; "
            "later changes were not delivered (read the board again and watch anew, or "
            "watch with a larger buffer)"
        )


# --- sessions ------------------------------------------------------------------------


class SessionError(PowertrioError):
    """A session could not take or finish a run."""

    code = "session"


class SessionBusyError(SessionError):
    """A send arrived while a run was active and the session's policy is ``reject``."""

    code = "session.busy"

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        super().__init__(
            f"session {session_id!r} is busy with run {run_id!r} and rejects new input; "
            "wait for the run to end, send a follow-up, or use the queue or interrupt policy"
        )


class NoOpenRunError(SessionError):
    """A cancel named a session that has no run open: there is nothing to cancel."""

    code = "session.no_open_run"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} has no open run: nothing to cancel")


class OutputInvalidError(SessionError):
    """The model's final answer did not match the response format, even after a repair.

    The run ends ``failed`` with this error's code; the raw text is kept in the result.
    """

    code = "session.output_invalid"

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("the answer does not match the response format: " + "; ".join(problems))


class OutputTypeError(SessionError):
    """A run's recorded JSON answer does not fit the class the caller asked for.

    The log keeps the JSON; the class is applied when the result is read. This error
    means the class changed since the answer was recorded (a field renamed, a type
    narrowed): read ``raw_output`` of the result with ``response_format=None``, or
    give the class the run was made with.
    """

    code = "session.output_type"

    def __init__(self, run_id: str, type_name: str, problems: tuple[str, ...]) -> None:
        self.run_id = run_id
        self.type_name = type_name
        self.problems = problems
        super().__init__(
            f"the recorded output of run {run_id!r} does not fit {type_name}: "
            + "; ".join(problems)
        )


class HumanRequestNotFoundError(SessionError, LookupError):
    """A human reply names a request the session is not waiting for."""

    code = "session.unknown_request"

    def __init__(self, session_id: str, request_id: str, open_requests: tuple[str, ...]) -> None:
        self.session_id = session_id
        self.request_id = request_id
        self.open_requests = open_requests
        waiting = ", ".join(open_requests) or "none"
        super().__init__(
            f"session {session_id!r} is not waiting for request {request_id!r} "
            f"(answered already, or its run ended); open requests: {waiting}"
        )


class ForeignAgentError(SessionError):
    """An operator action would resume a session with an agent other than its own.

    The CLI and its console resume a session in their own process, where they can rebuild
    only the CLI's agent; a session an application made with its own prompt or tools runs
    only where that code is. The action is refused before anything is recorded, so the
    session never runs with a prompt or tools it was not given.
    """

    code = "session.foreign_agent"

    def __init__(self, session_id: str, action: str, reasons: tuple[str, ...]) -> None:
        self.session_id = session_id
        self.action = action
        self.reasons = reasons
        super().__init__(
            f"session {session_id!r} runs an agent of its own ({'; '.join(reasons)}), which "
            f"{action} cannot rebuild: it has only the CLI's agent and would run the session "
            "with that instead, so nothing was recorded. Act on the session in the process "
            "that runs it (its Session's reply, approve, deny, follow_up or cancel), or on a "
            "fleet through the node that owns it (NodeHost.session(id))"
        )


class HookVetoError(SessionError):
    """A hook refused an LLM call or a tool call.

    Raise it from a hook to veto. For a tool call the model reads the reason as the tool's
    result; for an LLM call the run ends ``failed`` with this code and the reason.
    """

    code = "session.hook_vetoed"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"vetoed by a hook: {reason}")


# --- the fleet limiter ---------------------------------------------------------------


class LimitError(PowertrioError):
    """The fleet limiter refused a call."""

    code = "limit"


class LimitTooLargeError(LimitError, ValueError):
    """A call's token estimate alone exceeds a tokens-per-minute limit: no window could
    ever grant it, so it fails at once instead of waiting forever."""

    code = "limit.too_large"

    def __init__(self, bucket: str, tokens: int, limit: int) -> None:
        self.bucket = bucket
        self.tokens = tokens
        self.limit = limit
        super().__init__(
            f"a call estimated at {tokens} tokens can never fit {bucket!r}, whose limit is "
            f"{limit} tokens per minute: lower the request's max_tokens or its context, "
            "or raise the limit"
        )
