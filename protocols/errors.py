"""Every error powertrio raises, each with a stable machine-readable code.

Callers branch on the class or on ``code``, never on the message text. A code is never
reused for a different meaning. Structured fields carry the details (actor id, stream,
version, ...); the message is for people and says what to do next.

The tree (code in brackets)::

    PowertrioError                                [powertrio]
    ├── ConfigError (ValueError)                  [config.invalid]
    │   ├── MissingSettingError                   [config.missing]
    │   └── AgentSpecError                        [config.agent_spec]
    ├── ActorError                                [actor]
    │   ├── ActorStoppedError                     [actor.stopped]
    │   ├── ActorNotFoundError (LookupError)      [actor.not_found]
    │   ├── ActorExistsError (ValueError)         [actor.exists]
    │   ├── ActorCrashedError                     [actor.crashed]
    │   ├── AskTimeoutError (TimeoutError)        [actor.ask_timeout]
    │   ├── MailboxFullError                      [actor.mailbox_full]
    │   └── RuntimeClosedError                    [actor.runtime_closed]
    ├── SupervisorError                           [supervisor]
    │   └── IntensityExceededError                [supervisor.intensity_exceeded]
    ├── StoreError                                [store]
    │   ├── ConcurrencyConflictError              [store.conflict]
    │   ├── StoreClosedError                      [store.closed]
    │   ├── CorruptLogError                       [store.corrupt]
    │   ├── ForeignDatabaseError                  [store.foreign]
    │   ├── StoreSchemaVersionError               [store.schema_version]
    │   └── StreamNotFoundError (LookupError)     [store.stream_not_found]
    ├── CodecError                                [codec]
    │   ├── UnknownEventTypeError                 [codec.unknown_type]
    │   ├── FutureEventVersionError               [codec.future_version]
    │   ├── EventDecodeError                      [codec.decode]
    │   └── EventEncodeError (TypeError)          [codec.encode]
    ├── LLMError                                  [llm]
    │   ├── LLMRateLimitedError                   [llm.rate_limited]
    │   ├── LLMAuthError                          [llm.auth]
    │   ├── LLMBadRequestError                    [llm.bad_request]
    │   │   └── LLMContextOverflowError           [llm.context_overflow]
    │   ├── LLMTimeoutError                       [llm.timeout]
    │   ├── LLMConnectionError                    [llm.connection]
    │   ├── LLMServerError                        [llm.server]
    │   ├── LLMMalformedStreamError               [llm.malformed_stream]
    │   └── ScriptExhaustedError                  [llm.script_exhausted]
    ├── ToolError                                 [tool]
    │   ├── ToolNotFoundError (LookupError)       [tool.not_found]
    │   ├── ToolArgumentsError                    [tool.invalid_args]
    │   ├── ToolTimeoutError                      [tool.timeout]
    │   ├── ToolDefinitionError (TypeError)       [tool.bad_definition]
    │   │   └── SchemaRemoteRefError              [tool.schema_remote_ref]
    │   └── ToolInterruptedError                  [tool.interrupted]
    ├── BoardError                                [board]
    │   ├── BoardConflictError                    [board.conflict]
    │   ├── BoardEntryTooLargeError (ValueError)  [board.entry_too_large]
    │   ├── BoardFullError                        [board.full]
    │   ├── BoardBadKeyError (ValueError)         [board.bad_key]
    │   ├── BoardBadValueError (TypeError)        [board.bad_value]
    │   └── BoardWatchOverflowError               [board.watch_overflow]
    ├── SessionError                              [session]
    │   ├── SessionBusyError                      [session.busy]
    │   ├── OutputInvalidError                    [session.output_invalid]
    │   ├── HumanRequestNotFoundError (LookupError) [session.unknown_request]
    │   └── HookVetoError                         [session.hook_vetoed]
    ├── TimerError                                [timer]
    │   ├── TimerNotFoundError (LookupError)      [timer.not_found]
    │   ├── TimerArgumentError (ValueError)       [timer.invalid_args]
    │   └── TimerOwnerUnavailableError            [timer.owner_unavailable]
    └── ReplayError                               [replay]
        └── ReplayDivergenceError                 [replay.divergence]

Where an error means "you misused the API" it also subclasses the built-in it behaves
like (``ValueError``, ``LookupError``, ...), as attrs does.
"""

from __future__ import annotations

from typing import ClassVar, Literal

__all__ = [
    "ActorCrashedError",
    "ActorError",
    "ActorExistsError",
    "ActorNotFoundError",
    "ActorStoppedError",
    "AgentSpecError",
    "AskTimeoutError",
    "BoardBadKeyError",
    "BoardBadValueError",
    "BoardConflictError",
    "BoardEntryTooLargeError",
    "BoardError",
    "BoardFullError",
    "BoardWatchOverflowError",
    "CodecError",
    "ConcurrencyConflictError",
    "ConfigError",
    "CorruptLogError",
    "EventDecodeError",
    "EventEncodeError",
    "ForeignDatabaseError",
    "FutureEventVersionError",
    "HookVetoError",
    "HumanRequestNotFoundError",
    "IntensityExceededError",
    "LLMAuthError",
    "LLMBadRequestError",
    "LLMConnectionError",
    "LLMContextOverflowError",
    "LLMError",
    "LLMMalformedStreamError",
    "LLMRateLimitedError",
    "LLMServerError",
    "LLMTimeoutError",
    "MailboxFullError",
    "MissingSettingError",
    "OutputInvalidError",
    "PowertrioError",
    "ReplayDivergenceError",
    "ReplayError",
    "RuntimeClosedError",
    "SchemaRemoteRefError",
    "ScriptExhaustedError",
    "SessionBusyError",
    "SessionError",
    "StoreClosedError",
    "StoreError",
    "StoreSchemaVersionError",
    "StreamNotFoundError",
    "SupervisorError",
    "TimerArgumentError",
    "TimerError",
    "TimerNotFoundError",
    "TimerOwnerUnavailableError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolInterruptedError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "UnknownEventTypeError",
    "all_error_classes",
]


class PowertrioError(Exception):
    """The root of every error powertrio raises.

    ``code`` is stable and machine-readable; ``str(error)`` is for people.
    """

    code: ClassVar[str] = "powertrio"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# --- configuration -------------------------------------------------------------------


class ConfigError(PowertrioError, ValueError):
    """A configuration value is invalid."""

    code = "config.invalid"


class MissingSettingError(ConfigError):
    """A required setting is missing; ``variable`` names the environment variable."""

    code = "config.missing"

    def __init__(self, variable: str, message: str | None = None) -> None:
        self.variable = variable
        super().__init__(message or f"missing setting: set the environment variable {variable}")


# --- actors --------------------------------------------------------------------------


class AgentSpecError(ConfigError):
    """An agent spec is invalid; ``problems`` lists every problem found, not just the first."""

    code = "config.agent_spec"

    def __init__(self, name: str, problems: tuple[str, ...]) -> None:
        self.name = name
        self.problems = problems
        listed = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"agent spec {name!r} is invalid:\n{listed}")


class ActorError(PowertrioError):
    """Something went wrong talking to an actor."""

    code = "actor"


class ActorStoppedError(ActorError):
    """The actor has stopped for good; it will not handle this message."""

    code = "actor.stopped"

    def __init__(self, actor_id: str, message: str | None = None) -> None:
        self.actor_id = actor_id
        super().__init__(
            message or f"actor {actor_id!r} is stopped and accepts no more messages"
        )


class ActorNotFoundError(ActorError, LookupError):
    """No live actor has this id or path."""

    code = "actor.not_found"

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no actor is registered as {key!r}")


class ActorExistsError(ActorError, ValueError):
    """An actor with this id is already running."""

    code = "actor.exists"

    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id
        super().__init__(f"an actor with id {actor_id!r} is already running; pick another id")


class ActorCrashedError(ActorError):
    """The actor crashed while handling the message that was asked.

    The original exception is the ``__cause__``.
    """

    code = "actor.crashed"

    def __init__(self, actor_id: str, message_type: str) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        super().__init__(f"actor {actor_id!r} crashed while handling a {message_type} message")


class AskTimeoutError(ActorError, TimeoutError):
    """No reply arrived within the ask timeout."""

    code = "actor.ask_timeout"

    def __init__(self, actor_id: str, message_type: str, timeout: float) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(
            f"actor {actor_id!r} did not reply to {message_type} within {timeout:g} s"
        )


class MailboxFullError(ActorError):
    """A non-waiting send found the mailbox full and the overflow policy is ``reject``."""

    code = "actor.mailbox_full"

    def __init__(self, actor_id: str, capacity: int) -> None:
        self.actor_id = actor_id
        self.capacity = capacity
        super().__init__(
            f"mailbox of actor {actor_id!r} is full ({capacity} messages); "
            "use the waiting `tell`, raise the capacity, or pick another overflow policy"
        )


class RuntimeClosedError(ActorError):
    """The runtime is closed or closing and starts nothing new."""

    code = "actor.runtime_closed"

    def __init__(self, message: str = "the runtime is closed; open a new one") -> None:
        super().__init__(message)


# --- supervision ---------------------------------------------------------------------


class SupervisorError(PowertrioError):
    """A supervisor gave up."""

    code = "supervisor"


class IntensityExceededError(SupervisorError):
    """Children crashed more often than the restart intensity allows.

    The supervisor stops its children and fails, escalating to its own parent.
    """

    code = "supervisor.intensity_exceeded"

    def __init__(self, supervisor_id: str, max_restarts: int, within: float) -> None:
        self.supervisor_id = supervisor_id
        self.max_restarts = max_restarts
        self.within = within
        super().__init__(
            f"supervisor {supervisor_id!r} saw more than {max_restarts} restarts "
            f"within {within:g} s and gave up; the last crash is the cause"
        )


# --- event store ---------------------------------------------------------------------


class StoreError(PowertrioError):
    """The event store failed or refused an operation."""

    code = "store"


class ConcurrencyConflictError(StoreError):
    """An append's expected version did not match the stream; nothing was written."""

    code = "store.conflict"

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream!r} is at version {actual}, the append expected {expected}; "
            "nothing was written (another writer owns this stream?)"
        )


class StoreClosedError(StoreError):
    """The store is closed."""

    code = "store.closed"

    def __init__(self, message: str = "the event store is closed") -> None:
        super().__init__(message)


class CorruptLogError(StoreError):
    """The log file is damaged; ``path`` names it."""

    code = "store.corrupt"

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"event log {path!r} is damaged: {detail}; restore it from a backup "
            "(`powertrio export` what still reads) or move it aside"
        )


class ForeignDatabaseError(StoreError):
    """The file is a database, but not a powertrio event log."""

    code = "store.foreign"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path!r} is not a powertrio event log (it has other tables); "
            "point the store at a new or a powertrio file"
        )


class StoreSchemaVersionError(StoreError):
    """The log was written by a newer powertrio with a storage schema this one cannot read."""

    code = "store.schema_version"

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"event log {path!r} has storage schema {found}, this powertrio reads up to "
            f"{supported}; upgrade powertrio to open it"
        )


class StreamNotFoundError(StoreError, LookupError):
    """No stream has this name."""

    code = "store.stream_not_found"

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(f"no stream named {stream!r} in the event log")


# --- codec ---------------------------------------------------------------------------


class CodecError(PowertrioError):
    """An event or message could not be encoded or decoded."""

    code = "codec"


class UnknownEventTypeError(CodecError):
    """A stored event has a type name no registered class claims."""

    code = "codec.unknown_type"

    def __init__(
        self, type_name: str, stream: str | None = None, version: int | None = None
    ) -> None:
        self.type_name = type_name
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(
            f"unknown event type {type_name!r}{where}; is the module that defines it imported?"
        )


class FutureEventVersionError(CodecError):
    """A stored event has a newer schema version than this code understands."""

    code = "codec.future_version"

    def __init__(
        self,
        type_name: str,
        found: int,
        supported: int,
        stream: str | None = None,
        version: int | None = None,
    ) -> None:
        self.type_name = type_name
        self.found = found
        self.supported = supported
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(
            f"event {type_name!r}{where} has schema version {found}, this code reads up to "
            f"{supported}; upgrade the code that defines it"
        )


class EventDecodeError(CodecError):
    """A stored event's payload does not fit its class."""

    code = "codec.decode"

    def __init__(
        self, type_name: str, detail: str, stream: str | None = None, version: int | None = None
    ) -> None:
        self.type_name = type_name
        self.detail = detail
        self.stream = stream
        self.version = version
        where = f" at {stream!r} version {version}" if stream is not None else ""
        super().__init__(f"event {type_name!r}{where} does not decode: {detail}")


class EventEncodeError(CodecError, TypeError):
    """An event cannot be encoded: its class is unregistered or a field is not JSON."""

    code = "codec.encode"

    def __init__(self, type_name: str, detail: str) -> None:
        self.type_name = type_name
        self.detail = detail
        super().__init__(f"cannot encode event {type_name}: {detail}")


# --- LLM providers -------------------------------------------------------------------


class LLMError(PowertrioError):
    """A model call failed. ``retryable`` says whether trying again may help."""

    code = "llm"
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.provider = provider
        self.retry_after = retry_after
        super().__init__(message)


class LLMRateLimitedError(LLMError):
    """The provider rate-limited the call (HTTP 429)."""

    code = "llm.rate_limited"
    retryable = True


class LLMAuthError(LLMError):
    """The provider refused the credentials (HTTP 401/403)."""

    code = "llm.auth"


class LLMBadRequestError(LLMError):
    """The provider rejected the request as malformed (HTTP 4xx)."""

    code = "llm.bad_request"


class LLMContextOverflowError(LLMBadRequestError):
    """The request does not fit the model's context window."""

    code = "llm.context_overflow"


class LLMTimeoutError(LLMError):
    """The call timed out (connect, read or total deadline)."""

    code = "llm.timeout"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        phase: Literal["connect", "read", "write", "pool", "total"] = "total",
        status: int | None = None,
        provider: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.phase = phase
        super().__init__(message, status=status, provider=provider, retry_after=retry_after)


class LLMConnectionError(LLMError):
    """The provider could not be reached."""

    code = "llm.connection"
    retryable = True


class LLMServerError(LLMError):
    """The provider failed on its side (HTTP 5xx or an error event)."""

    code = "llm.server"
    retryable = True


class LLMMalformedStreamError(LLMError):
    """The provider's response or stream could not be parsed."""

    code = "llm.malformed_stream"


class ScriptExhaustedError(LLMError):
    """A scripted test LLM was asked for more responses than it holds."""

    code = "llm.script_exhausted"


# --- tools ---------------------------------------------------------------------------


class ToolError(PowertrioError):
    """A tool could not be found, called or completed."""

    code = "tool"


class ToolNotFoundError(ToolError, LookupError):
    """The model called a tool that is not available to it."""

    code = "tool.not_found"

    def __init__(self, name: str, available: tuple[str, ...] = ()) -> None:
        self.name = name
        self.available = available
        names = ", ".join(available) or "none"
        super().__init__(f"no tool named {name!r}; available tools: {names}")


class ToolArgumentsError(ToolError):
    """The arguments of a tool call do not match the tool's schema."""

    code = "tool.invalid_args"

    def __init__(self, name: str, problems: tuple[str, ...]) -> None:
        self.name = name
        self.problems = problems
        super().__init__(f"invalid arguments for tool {name!r}: " + "; ".join(problems))


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""

    code = "tool.timeout"

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        super().__init__(f"tool {name!r} did not finish within {timeout:g} s")


class ToolDefinitionError(ToolError, TypeError):
    """A Python function cannot be turned into a tool (e.g. an unsupported parameter type)."""

    code = "tool.bad_definition"


class SchemaRemoteRefError(ToolDefinitionError):
    """A JSON schema refers to a document outside itself (a remote ``$ref`` or ``$schema``).

    Schemas are validated offline: powertrio never fetches a schema over the network, so
    a reference to another document is refused when the schema is compiled. Inline the
    referenced definitions under ``$defs`` instead.
    """

    code = "tool.schema_remote_ref"

    def __init__(self, uri: str) -> None:
        self.uri = uri
        """The external document the schema refers to."""
        super().__init__(
            f"JSON schema refers to the external document {uri!r}; remote references are "
            "never fetched: copy the definition under '$defs' and refer to it as '#/$defs/...'"
        )


class ToolInterruptedError(ToolError):
    """A tool call was cancelled before it finished; its result, if any, is discarded.

    Raised by ``ToolContext.check_cancelled()`` inside a sync tool, and named by the
    ``interrupted`` outcome the model sees instead of a result.
    """

    code = "tool.interrupted"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"tool {name!r} was interrupted before it finished; its result is discarded"
        )


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

    def __init__(
        self, key: object, reason: str, what: Literal["key", "prefix"] = "key"
    ) -> None:
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


class OutputInvalidError(SessionError):
    """The model's final answer did not match the response format, even after a repair.

    The run ends ``failed`` with this error's code; the raw text is kept in the result.
    """

    code = "session.output_invalid"

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__(
            "the answer does not match the response format: " + "; ".join(problems)
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


class HookVetoError(SessionError):
    """A hook refused an LLM call or a tool call.

    Raise it from a hook to veto. For a tool call the model reads the reason as the tool's
    result; for an LLM call the run ends ``failed`` with this code and the reason.
    """

    code = "session.hook_vetoed"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"vetoed by a hook: {reason}")


# --- timers --------------------------------------------------------------------------


class TimerError(PowertrioError):
    """A durable timer could not be scheduled, found or cancelled."""

    code = "timer"


class TimerNotFoundError(TimerError, LookupError):
    """No pending timer has this id (it never existed, already fired, or was cancelled)."""

    code = "timer.not_found"

    def __init__(self, timer_id: str) -> None:
        self.timer_id = timer_id
        super().__init__(
            f"no pending timer has id {timer_id!r}; it never existed, already fired "
            "(a one-shot) or was cancelled"
        )


class TimerArgumentError(TimerError, ValueError):
    """A timer was described with a bad value; ``argument`` names it."""

    code = "timer.invalid_args"

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)


class TimerOwnerUnavailableError(TimerError):
    """The actor that owns a timer is not running, so nobody can record a change to it.

    Only the owner appends to its stream (one writer per stream): start the owner, then
    try again.
    """

    code = "timer.owner_unavailable"

    def __init__(self, timer_id: str, stream: str) -> None:
        self.timer_id = timer_id
        self.stream = stream
        super().__init__(
            f"timer {timer_id!r} belongs to stream {stream!r}, whose actor is not running; "
            "start that actor, then try again"
        )


# --- replay --------------------------------------------------------------------------


class ReplayError(PowertrioError):
    """A replay could not confirm the recorded log."""

    code = "replay"


class ReplayDivergenceError(ReplayError):
    """The code asks for a different effect than the one recorded at this event."""

    code = "replay.divergence"

    def __init__(self, stream: str, version: int, event_type: str, difference: str) -> None:
        self.stream = stream
        self.version = version
        self.event_type = event_type
        self.difference = difference
        super().__init__(
            f"replay of {stream!r} diverges at version {version} ({event_type}):\n{difference}"
        )


def all_error_classes() -> tuple[type[PowertrioError], ...]:
    """Every error class in the tree, root first (used to check codes are unique)."""
    found: list[type[PowertrioError]] = []
    pending: list[type[PowertrioError]] = [PowertrioError]
    while pending:
        cls = pending.pop(0)
        if cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return tuple(found)
