"""One boundary for foreign errors: httpx exceptions and provider error bodies become LLM errors.

The mapping (most specific first; the test walks httpx's exception classes and fails when
one is missing)::

    httpx.ConnectTimeout        -> LLMTimeoutError(phase="connect")
    httpx.ReadTimeout           -> LLMTimeoutError(phase="read")
    httpx.WriteTimeout          -> LLMTimeoutError(phase="write")
    httpx.PoolTimeout           -> LLMTimeoutError(phase="pool")
    httpx.TimeoutException      -> LLMTimeoutError(phase="total")
    httpx.ConnectError          -> LLMConnectionError
    httpx.ReadError             -> LLMConnectionError
    httpx.WriteError            -> LLMConnectionError
    httpx.CloseError            -> LLMConnectionError
    httpx.NetworkError          -> LLMConnectionError
    httpx.ProxyError            -> LLMConnectionError
    httpx.RemoteProtocolError   -> LLMConnectionError before the body, LLMMalformedStreamError
                                   while reading a stream (a stream cut mid-event)
    httpx.LocalProtocolError    -> LLMBadRequestError (we could not send the request)
    httpx.ProtocolError         -> LLMConnectionError
    httpx.UnsupportedProtocol   -> ConfigError (the base URL's scheme)
    httpx.InvalidURL            -> ConfigError (the base URL)
    httpx.TransportError        -> LLMConnectionError
    httpx.DecodingError         -> LLMMalformedStreamError
    httpx.TooManyRedirects      -> LLMServerError
    httpx.RequestError          -> LLMConnectionError
    httpx.HTTPStatusError       -> by status, as error_from_status
    httpx.StreamError and subclasses, httpx.CookieConflict, httpx.HTTPError
                                -> LLMError (a bug in the transport, not a provider failure)
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Literal

import httpx
import orjson

from protocols.errors import (
    ConfigError,
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextOverflowError,
    LLMError,
    LLMMalformedStreamError,
    LLMRateLimitedError,
    LLMServerError,
    LLMTimeoutError,
    PowertrioError,
)

from ._secret import redact

__all__ = [
    "HTTPX_ERROR_MAP",
    "error_from_body",
    "error_from_status",
    "map_httpx_errors",
    "parse_retry_after",
]

_Factory = Callable[[str, str, bool], PowertrioError]
"""Builds our error from (provider, message, streaming)."""


def _timeout(phase: Literal["connect", "read", "write", "pool", "total"]) -> _Factory:
    def build(provider: str, message: str, streaming: bool) -> PowertrioError:
        return LLMTimeoutError(
            f"{provider}: {phase} timeout: {message}", phase=phase, provider=provider
        )

    return build


def _connection(provider: str, message: str, streaming: bool) -> PowertrioError:
    return LLMConnectionError(
        f"{provider}: cannot reach the provider: {message}", provider=provider
    )


def _remote_protocol(provider: str, message: str, streaming: bool) -> PowertrioError:
    if streaming:
        return LLMMalformedStreamError(
            f"{provider}: the stream was cut before it was complete: {message}",
            provider=provider,
        )
    return _connection(provider, message, streaming)


def _local_protocol(provider: str, message: str, streaming: bool) -> PowertrioError:
    return LLMBadRequestError(
        f"{provider}: the request could not be sent as valid HTTP: {message}",
        provider=provider,
    )


def _bad_url(provider: str, message: str, streaming: bool) -> PowertrioError:
    return ConfigError(
        f"{provider}: the base URL is not usable: {message}; check POWERTRIO_BASE_URL"
    )


def _decoding(provider: str, message: str, streaming: bool) -> PowertrioError:
    return LLMMalformedStreamError(
        f"{provider}: the response body could not be decoded: {message}", provider=provider
    )


def _redirects(provider: str, message: str, streaming: bool) -> PowertrioError:
    return LLMServerError(f"{provider}: too many redirects: {message}", provider=provider)


def _internal(provider: str, message: str, streaming: bool) -> PowertrioError:
    return LLMError(
        f"{provider}: internal transport error (please report it): {message}",
        provider=provider,
    )


#: httpx exception class -> factory of our error, most specific first.
HTTPX_ERROR_MAP: tuple[tuple[type[Exception], _Factory], ...] = (
    (httpx.ConnectTimeout, _timeout("connect")),
    (httpx.ReadTimeout, _timeout("read")),
    (httpx.WriteTimeout, _timeout("write")),
    (httpx.PoolTimeout, _timeout("pool")),
    (httpx.TimeoutException, _timeout("total")),
    (httpx.ConnectError, _connection),
    (httpx.ReadError, _connection),
    (httpx.WriteError, _connection),
    (httpx.CloseError, _connection),
    (httpx.NetworkError, _connection),
    (httpx.ProxyError, _connection),
    (httpx.RemoteProtocolError, _remote_protocol),
    (httpx.LocalProtocolError, _local_protocol),
    (httpx.ProtocolError, _connection),
    (httpx.UnsupportedProtocol, _bad_url),
    (httpx.TransportError, _connection),
    (httpx.DecodingError, _decoding),
    (httpx.TooManyRedirects, _redirects),
    (httpx.RequestError, _connection),
    (httpx.InvalidURL, _bad_url),
    (httpx.StreamConsumed, _internal),
    (httpx.StreamClosed, _internal),
    (httpx.ResponseNotRead, _internal),
    (httpx.RequestNotRead, _internal),
    (httpx.StreamError, _internal),
    (httpx.CookieConflict, _internal),
    (httpx.HTTPError, _internal),
)


@contextmanager
def map_httpx_errors(
    provider: str, *, streaming: bool = False, secrets: tuple[str, ...] = ()
) -> Iterator[None]:
    """Translate any httpx exception raised inside the block into our most specific error.

    The original exception is kept as ``__cause__`` (``raise ... from exc``).
    ``httpx.HTTPStatusError`` is mapped by status code, as :func:`error_from_status` does.

    Args:
        provider (str): the provider name, for messages (``"openai"``, ``"anthropic"``).
        streaming (bool): True while reading a response stream, where a connection cut
            means a truncated stream (``LLMMalformedStreamError``).
        secrets (tuple[str, ...]): strings to redact from messages (the API key).

    Raises:
        LLMError: a subclass, for every httpx transport, protocol and status error.
        ConfigError: the base URL is invalid or has an unsupported scheme.
    """
    try:
        yield
    except httpx.HTTPStatusError as exc:
        response = exc.response
        raise error_from_status(
            provider,
            response.status_code,
            _safe_text(response),
            response.headers,
            secrets=secrets,
        ) from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError) as exc:
        message = redact(str(exc) or type(exc).__name__, secrets)
        for cls, factory in HTTPX_ERROR_MAP:
            if isinstance(exc, cls):
                raise factory(provider, message, streaming) from exc
        raise _internal(provider, message, streaming) from exc  # pragma: no cover


def _safe_text(response: httpx.Response) -> str:
    try:
        return response.text
    except httpx.ResponseNotRead:
        return ""


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """How long the provider asks us to wait, from ``retry-after-ms`` or ``Retry-After``.

    Args:
        headers (Mapping[str, str]): the response headers (case-insensitive, as httpx's).
        now (float | None): the wall-clock time for HTTP-date values; ``time.time()`` if None.

    Returns:
        (float | None): seconds to wait (never negative), or None when absent or unreadable.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


_OVERFLOW = re.compile(
    r"context[ _](length|window|size)|prompt is too long|maximum context|too many tokens"
    r"|exceeds? the (available )?context",
    re.IGNORECASE,
)
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)


def _error_fields(body: str) -> tuple[str, str]:
    """The (message, type-or-code) of an OpenAI-, Anthropic- or llama.cpp-style error body."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.strip()[:500], ""
    if not isinstance(data, dict):
        return body.strip()[:500], ""
    error = data.get("error", data)
    if isinstance(error, str):
        return error[:500], ""
    if not isinstance(error, dict):
        return body.strip()[:500], ""
    message = str(error.get("message") or body.strip()[:500])
    kind = error.get("code") if isinstance(error.get("code"), str) else error.get("type")
    return message, str(kind or "")


def error_from_status(
    provider: str,
    status: int,
    body: str,
    headers: Mapping[str, str],
    *,
    secrets: tuple[str, ...] = (),
) -> PowertrioError:
    """The typed error for an HTTP error response.

    408 is a timeout, 409 a transient conflict (retryable, as ``llm.server``), 429 a rate
    limit, other 4xx a bad request (``llm.context_overflow`` when the body says the prompt
    does not fit), 401/403 an auth failure, 5xx a server failure. Unexpected 1xx-3xx
    answers mean the base URL points at the wrong place.

    Args:
        provider (str): the provider name, for messages.
        status (int): the HTTP status code.
        body (str): the response body (JSON error bodies are read for message and code).
        headers (Mapping[str, str]): the response headers (for ``Retry-After``).
        secrets (tuple[str, ...]): strings to redact from the message.

    Returns:
        (PowertrioError): an ``LLMError`` subclass with ``status``, ``provider`` and
        ``retry_after`` set, or a ``ConfigError`` for a redirect.
    """
    message, kind = _error_fields(body)
    message = redact(message, secrets)
    retry_after = parse_retry_after(headers)
    text = f"{provider}: HTTP {status}: {message}" if message else f"{provider}: HTTP {status}"
    if status == 429:
        return LLMRateLimitedError(text, status=status, provider=provider, retry_after=retry_after)
    if status in (401, 403):
        return LLMAuthError(
            f"{text} (check the API key: POWERTRIO_API_KEY or the provider's own variable)",
            status=status,
            provider=provider,
        )
    if status == 408:
        return LLMTimeoutError(
            text, phase="total", status=status, provider=provider, retry_after=retry_after
        )
    if status == 409 or status >= 500:
        return LLMServerError(text, status=status, provider=provider, retry_after=retry_after)
    if 400 <= status < 500:
        if kind in _OVERFLOW_CODES or _OVERFLOW.search(message):
            return LLMContextOverflowError(text, status=status, provider=provider)
        return LLMBadRequestError(text, status=status, provider=provider)
    return ConfigError(
        f"{provider}: unexpected HTTP {status} from the provider; check POWERTRIO_BASE_URL "
        "(it should point at the API root, without redirects)"
    )


def error_from_body(provider: str, body: str, *, secrets: tuple[str, ...] = ()) -> PowertrioError:
    """The typed error for an error event inside a stream (there is no HTTP status then).

    Anthropic names the kind (``overloaded_error``, ``rate_limit_error``, ...); OpenAI-style
    servers send ``{"error": {...}}`` with a code or type.

    Args:
        provider (str): the provider name, for messages.
        body (str): the event's JSON data.
        secrets (tuple[str, ...]): strings to redact from the message.

    Returns:
        (PowertrioError): the matching ``LLMError`` subclass (``LLMServerError`` by default).
    """
    message, kind = _error_fields(body)
    message = redact(message, secrets)
    text = f"{provider}: error event in the stream ({kind or 'unknown'}): {message}"
    if kind in ("rate_limit_error", "rate_limit_exceeded"):
        return LLMRateLimitedError(text, provider=provider)
    if kind in ("authentication_error", "permission_error", "invalid_api_key"):
        return LLMAuthError(text, provider=provider)
    if kind in _OVERFLOW_CODES or _OVERFLOW.search(message):
        return LLMContextOverflowError(text, provider=provider)
    if kind in ("invalid_request_error", "not_found_error", "request_too_large"):
        return LLMBadRequestError(text, provider=provider)
    return LLMServerError(text, provider=provider)
