"""Errors of the calls a session makes: LLM providers (``llm.*``) and tools (``tool.*``).

Both branches describe a call out of a session failing, to the model or to one of its
tools; ``protocols.errors`` re-exports them.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ._errors_base import PowertrioError

__all__ = [
    "LLMAuthError",
    "LLMBadRequestError",
    "LLMConnectionError",
    "LLMContextOverflowError",
    "LLMError",
    "LLMMalformedStreamError",
    "LLMRateLimitedError",
    "LLMServerError",
    "LLMTimeoutError",
    "SchemaRemoteRefError",
    "ScriptExhaustedError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolInterruptedError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "UnsupportedTypeError",
]


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
    """The call timed out (connect, read, stream idle or total deadline)."""

    code = "llm.timeout"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        phase: Literal["connect", "read", "write", "pool", "idle", "total"] = "total",
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


class UnsupportedTypeError(ToolDefinitionError):
    """A Python type has no JSON Schema form (a tool parameter or a response format class).

    The message names the class and field, or the parameter, that holds the type and
    lists the types that are supported.
    """

    code = "tool.unsupported_type"


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
