"""The errors every layer shares, each with a stable machine-readable code.

Callers branch on the class or on ``code``, never on the message text. A code is never
reused for a different meaning. Structured fields carry the details (actor id, stream,
version, ...); the message is for people and says what to do next.

This module holds the root, configuration, the actor kernel, stores and the codec, LLM
providers and tools, timers, replay and files: what ``protocols`` and ``runtime`` raise,
and the agents with them. An error only the agents raise lives with its feature and hangs
under the same root: sessions' in ``actors``, the blackboard's in ``actors.board``,
fleets' in ``actors.fleet``, the limiter's in ``actors.limits``, MCP servers' in
``actors.mcp``, workflows' in ``actors.workflows``, relayed calls' in ``actors.cluster``,
the console's in ``actors.console``. ``docs/api.md`` lists every code and where its class
lives.

The tree here (code in brackets)::

    PowertrioError                                [powertrio]
    ├── ConfigError (ValueError)                  [config.invalid]
    │   ├── MissingSettingError                   [config.missing]
    │   ├── MissingExtraError                     [config.missing_extra]
    │   ├── AgentSpecError                        [config.agent_spec]
    │   ├── BadConnectionStringError              [config.connection_string]
    │   └── UnsupportedLogSchemeError             [config.db_scheme]
    ├── ActorError                                [actor]
    │   ├── ActorStoppedError                     [actor.stopped]
    │   │   └── ActorFailedError                  [actor.failed]
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
    │   │   └── ImportConflictError               [store.import_conflict]
    │   ├── StoreClosedError                      [store.closed]
    │   ├── CorruptLogError                       [store.corrupt]
    │   ├── ForeignDatabaseError                  [store.foreign]
    │   ├── StoreSchemaVersionError               [store.schema_version]
    │   ├── StreamNotFoundError (LookupError)     [store.stream_not_found]
    │   ├── StreamRewoundError                    [store.stream_rewound]
    │   ├── StoreNotFoundError (LookupError)      [store.not_found]
    │   ├── StoreLockedError                      [store.locked]
    │   ├── StoreReadOnlyError                    [store.read_only]
    │   ├── StoreUnavailableError                 [store.unavailable]
    │   ├── StoreRefusedError                     [store.refused]
    │   └── FencedError                           [store.fenced]
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
    │   │   ├── SchemaRemoteRefError              [tool.schema_remote_ref]
    │   │   └── UnsupportedTypeError              [tool.unsupported_type]
    │   └── ToolInterruptedError                  [tool.interrupted]
    ├── TimerError                                [timer]
    │   ├── TimerNotFoundError (LookupError)      [timer.not_found]
    │   ├── TimerArgumentError (ValueError)       [timer.invalid_args]
    │   └── TimerOwnerUnavailableError            [timer.owner_unavailable]
    ├── ReplayError                               [replay]
    │   └── ReplayDivergenceError                 [replay.divergence]
    └── FileAccessError                           [io]
        ├── InputFileNotFoundError (LookupError)  [io.not_found]
        ├── OutputFileError                       [io.write_failed]
        └── BadInputFileError (ValueError)        [io.bad_input]

Where an error means "you misused the API" it also subclasses the built-in it behaves
like (``ValueError``, ``LookupError``, ...), as attrs does.
"""

from __future__ import annotations

from ._errors_base import (
    AgentSpecError,
    ConfigError,
    MissingExtraError,
    MissingSettingError,
    PowertrioError,
)
from ._errors_files import (
    BadInputFileError,
    FileAccessError,
    InputFileNotFoundError,
    OutputFileError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from ._errors_kernel import (
    ActorCrashedError,
    ActorError,
    ActorExistsError,
    ActorFailedError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    IntensityExceededError,
    MailboxFullError,
    RuntimeClosedError,
    SupervisorError,
    TimerArgumentError,
    TimerError,
    TimerNotFoundError,
    TimerOwnerUnavailableError,
)
from ._errors_llm import (
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextOverflowError,
    LLMError,
    LLMMalformedStreamError,
    LLMRateLimitedError,
    LLMServerError,
    LLMTimeoutError,
    SchemaRemoteRefError,
    ScriptExhaustedError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    ToolInterruptedError,
    ToolNotFoundError,
    ToolTimeoutError,
    UnsupportedTypeError,
)
from ._errors_log import (
    CodecError,
    ConcurrencyConflictError,
    CorruptLogError,
    EventDecodeError,
    EventEncodeError,
    ForeignDatabaseError,
    FutureEventVersionError,
    ImportConflictError,
    ReplayDivergenceError,
    ReplayError,
    StoreClosedError,
    StoreError,
    StoreSchemaVersionError,
    StreamNotFoundError,
    StreamRewoundError,
    UnknownEventTypeError,
)
from ._errors_server import (
    BadConnectionStringError,
    FencedError,
    StoreRefusedError,
    StoreUnavailableError,
    UnsupportedLogSchemeError,
)
from ._util import fixup_module_metadata as _fixup

__all__ = [
    "ActorCrashedError",
    "ActorError",
    "ActorExistsError",
    "ActorFailedError",
    "ActorNotFoundError",
    "ActorStoppedError",
    "AgentSpecError",
    "AskTimeoutError",
    "BadConnectionStringError",
    "BadInputFileError",
    "CodecError",
    "ConcurrencyConflictError",
    "ConfigError",
    "CorruptLogError",
    "EventDecodeError",
    "EventEncodeError",
    "FencedError",
    "FileAccessError",
    "ForeignDatabaseError",
    "FutureEventVersionError",
    "ImportConflictError",
    "InputFileNotFoundError",
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
    "MissingExtraError",
    "MissingSettingError",
    "OutputFileError",
    "PowertrioError",
    "ReplayDivergenceError",
    "ReplayError",
    "RuntimeClosedError",
    "SchemaRemoteRefError",
    "ScriptExhaustedError",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreRefusedError",
    "StoreSchemaVersionError",
    "StoreUnavailableError",
    "StreamNotFoundError",
    "StreamRewoundError",
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
    "UnsupportedLogSchemeError",
    "UnsupportedTypeError",
    "all_error_classes",
]


def all_error_classes() -> tuple[type[PowertrioError], ...]:
    """Every error class in the tree that is loaded, root first (used to check codes are
    unique): the agents' errors count once their ``actors`` namespace has been imported."""
    found: list[type[PowertrioError]] = []
    pending: list[type[PowertrioError]] = [PowertrioError]
    while pending:
        cls = pending.pop(0)
        if cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return tuple(found)


# The classes live in private modules, one per group of branches, so this module stays a
# readable map of the tree (the names in __all__ are its re-exports); tracebacks and
# pickles still name ``protocols.errors.X``, the one public home of every error.
_fixup(__name__, globals())
del _fixup
