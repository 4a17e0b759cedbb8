"""The error boundary, the retry policy, the SSE parser and provider configuration."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from protocols import LLMRequest, UserMessage
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
    MissingSettingError,
    PowertrioError,
)
from protocols.transports import (
    HTTPX_ERROR_MAP,
    AnthropicTransport,
    Attempt,
    OpenAITransport,
    ProviderConfig,
    RetryPolicy,
    Secret,
    ServerSentEvent,
    error_from_body,
    error_from_status,
    iter_sse,
    map_httpx_errors,
    parse_retry_after,
    transport_from_config,
    transport_from_env,
)
from protocols.transports._retry import call_with_retries


def _httpx_exception_classes() -> list[type[Exception]]:
    found: set[type[Exception]] = set()
    pending = [
        obj for _, obj in inspect.getmembers(httpx, inspect.isclass) if issubclass(obj, Exception)
    ]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("httpx") and cls not in found:
            found.add(cls)
            pending.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


def test_every_httpx_exception_is_mapped() -> None:
    """Each httpx exception class has its own entry; a new httpx class fails this test."""
    classes = _httpx_exception_classes()
    assert len(classes) >= 25
    # HTTPStatusError is mapped by its status code (error_from_status), not by the table.
    mapped = {cls for cls, _ in HTTPX_ERROR_MAP} | {httpx.HTTPStatusError}
    missing = [cls.__name__ for cls in classes if cls not in mapped]
    assert missing == []


def _instance(cls: type[Exception]) -> Exception:
    request = httpx.Request("POST", "https://example.invalid/v1/chat/completions")
    if issubclass(cls, httpx.HTTPStatusError):
        response = httpx.Response(503, request=request, text='{"error": {"message": "down"}}')
        return cls("status", request=request, response=response)
    if issubclass(cls, httpx.RequestError):
        return cls("boom", request=request)
    if cls in (
        httpx.StreamConsumed,
        httpx.StreamClosed,
        httpx.ResponseNotRead,
        httpx.RequestNotRead,
    ):
        return cls()
    return cls("boom")


EXPECTED: dict[str, tuple[type[PowertrioError], str]] = {
    "ConnectTimeout": (LLMTimeoutError, "llm.timeout"),
    "ReadTimeout": (LLMTimeoutError, "llm.timeout"),
    "WriteTimeout": (LLMTimeoutError, "llm.timeout"),
    "PoolTimeout": (LLMTimeoutError, "llm.timeout"),
    "TimeoutException": (LLMTimeoutError, "llm.timeout"),
    "ConnectError": (LLMConnectionError, "llm.connection"),
    "ReadError": (LLMConnectionError, "llm.connection"),
    "WriteError": (LLMConnectionError, "llm.connection"),
    "CloseError": (LLMConnectionError, "llm.connection"),
    "NetworkError": (LLMConnectionError, "llm.connection"),
    "ProxyError": (LLMConnectionError, "llm.connection"),
    "RemoteProtocolError": (LLMConnectionError, "llm.connection"),
    "LocalProtocolError": (LLMBadRequestError, "llm.bad_request"),
    "ProtocolError": (LLMConnectionError, "llm.connection"),
    "UnsupportedProtocol": (ConfigError, "config.invalid"),
    "TransportError": (LLMConnectionError, "llm.connection"),
    "DecodingError": (LLMMalformedStreamError, "llm.malformed_stream"),
    "TooManyRedirects": (LLMServerError, "llm.server"),
    "RequestError": (LLMConnectionError, "llm.connection"),
    "HTTPStatusError": (LLMServerError, "llm.server"),
    "InvalidURL": (ConfigError, "config.invalid"),
    "StreamConsumed": (LLMError, "llm"),
    "StreamClosed": (LLMError, "llm"),
    "ResponseNotRead": (LLMError, "llm"),
    "RequestNotRead": (LLMError, "llm"),
    "StreamError": (LLMError, "llm"),
    "CookieConflict": (LLMError, "llm"),
    "HTTPError": (LLMError, "llm"),
}


@pytest.mark.parametrize("cls", _httpx_exception_classes(), ids=lambda c: c.__name__)
def test_map_httpx_errors_picks_the_most_specific_class(cls: type[Exception]) -> None:
    """Each httpx exception becomes exactly the expected class, with the original as cause."""
    expected_cls, expected_code = EXPECTED[cls.__name__]
    original = _instance(cls)
    with pytest.raises(PowertrioError) as info, map_httpx_errors("openai"):
        raise original
    assert type(info.value) is expected_cls
    assert info.value.code == expected_code
    assert info.value.__cause__ is original
    assert str(info.value).startswith("openai: ")


def test_timeout_phases_and_stream_cut() -> None:
    """Timeouts carry their phase; a protocol error while streaming is a malformed stream."""
    request = httpx.Request("GET", "http://x")
    for cls, phase in [
        (httpx.ConnectTimeout, "connect"),
        (httpx.ReadTimeout, "read"),
        (httpx.WriteTimeout, "write"),
        (httpx.PoolTimeout, "pool"),
    ]:
        with pytest.raises(LLMTimeoutError) as info, map_httpx_errors("p"):
            raise cls("slow", request=request)
        assert info.value.phase == phase
        assert str(info.value) == f"p: {phase} timeout: slow"
    with pytest.raises(LLMMalformedStreamError) as cut, map_httpx_errors("p", streaming=True):
        raise httpx.RemoteProtocolError("peer closed", request=request)
    assert str(cut.value) == "p: the stream was cut before it was complete: peer closed"


def test_map_redacts_secrets() -> None:
    """A secret inside an httpx message is replaced by ***."""
    with pytest.raises(LLMConnectionError) as info, map_httpx_errors("p", secrets=("k-1",)):
        raise httpx.ConnectError("failed with k-1")
    assert str(info.value) == "p: cannot reach the provider: failed with ***"


@pytest.mark.parametrize(
    ("status", "cls", "code", "retryable"),
    [
        (408, LLMTimeoutError, "llm.timeout", True),
        (409, LLMServerError, "llm.server", True),
        (429, LLMRateLimitedError, "llm.rate_limited", True),
        (403, LLMAuthError, "llm.auth", False),
        (422, LLMBadRequestError, "llm.bad_request", False),
        (529, LLMServerError, "llm.server", True),
        (302, ConfigError, "config.invalid", False),
    ],
)
def test_error_from_status(
    status: int, cls: type[PowertrioError], code: str, retryable: bool
) -> None:
    """Statuses map to classes; only 408/409/429/5xx are retryable."""
    error = error_from_status("openai", status, "plain text body", {})
    assert type(error) is cls
    assert error.code == code
    assert getattr(error, "retryable", False) is retryable
    if isinstance(error, LLMError):
        assert str(error).startswith(f"openai: HTTP {status}: plain text body")
    else:
        assert "check POWERTRIO_BASE_URL" in str(error)


def test_llama_cpp_overflow_body() -> None:
    """llama.cpp's exceed_context_size_error is a context overflow."""
    body = (
        '{"error": {"code": 400, "type": "exceed_context_size_error", '
        '"message": "request (5000 tokens) exceeds the available context size (2048)"}}'
    )
    error = error_from_status("openai", 400, body, {})
    assert type(error) is LLMContextOverflowError
    assert error.code == "llm.context_overflow"


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("rate_limit_error", LLMRateLimitedError),
        ("authentication_error", LLMAuthError),
        ("invalid_request_error", LLMBadRequestError),
        ("api_error", LLMServerError),
    ],
)
def test_error_from_body(kind: str, cls: type[LLMError]) -> None:
    """Stream error events map by their type."""
    error = error_from_body(
        "anthropic", f'{{"type": "error", "error": {{"type": "{kind}", "message": "m"}}}}'
    )
    assert type(error) is cls
    assert str(error) == f"anthropic: error event in the stream ({kind}): m"


def test_parse_retry_after() -> None:
    """Seconds, milliseconds and HTTP dates are understood; garbage is ignored."""
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert (
        parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0)
        == 10.0
    )
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "-3"}) == 0.0


def test_retry_delays() -> None:
    """Backoff grows by the multiplier, is capped, and jitter stays within its band."""
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=5.0, jitter=0.5)
    error = LLMServerError("x")
    assert [policy.delay_for(n, error, 0.5) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert policy.delay_for(2, error, 0.0) == 1.0
    assert policy.delay_for(2, error, 1.0) == 3.0
    assert policy.delay_for(1, LLMRateLimitedError("x", retry_after=7.0), 0.0) == 7.0
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


async def test_retry_deadline_cuts_a_hanging_attempt() -> None:
    """An attempt still running at the deadline becomes llm.timeout, phase 'total'."""
    attempts: list[Attempt] = []

    async def hang() -> str:
        await trio.sleep_forever()
        raise AssertionError

    with pytest.raises(LLMTimeoutError) as info:
        await call_with_retries(
            hang, policy=RetryPolicy(deadline=0.05), provider="p", on_attempt=attempts.append
        )
    assert (info.value.code, info.value.phase) == ("llm.timeout", "total")
    assert str(info.value) == "p: no answer within the 0.05 s deadline for all attempts (1 started)"
    assert [(a.error_code, a.next_delay) for a in attempts] == [("llm.timeout", None)]


async def _collect(lines: list[str]) -> list[ServerSentEvent]:
    async def source() -> AsyncIterator[str]:
        for line in lines:
            yield line

    return [event async for event in iter_sse(source())]


async def test_sse_parser() -> None:
    """Fields, comments, multi-line data, ids; an unfinished last event is dropped."""
    events = await _collect(
        [
            ": comment",
            "event: a",
            "data: one",
            "data:two",
            "id: 7",
            "",
            "",
            'data: {"x": 1}',
            "retry: 10",
            "",
            "data: cut",
        ]
    )
    assert events == [
        ServerSentEvent(event="a", data="one\ntwo", id="7"),
        ServerSentEvent(data='{"x": 1}', id="7", retry=10),
    ]


def test_config_from_env() -> None:
    """POWERTRIO_* wins; OPENAI_* and ANTHROPIC_API_KEY are fallbacks; defaults fill in."""
    config = ProviderConfig.from_env(
        {"OPENAI_API_KEY": "k1", "POWERTRIO_MODEL": "gpt-x", "OPENAI_BASE_URL": "http://local/v1"}
    )
    assert (config.provider, config.base_url, config.model) == (
        "openai",
        "http://local/v1",
        "gpt-x",
    )
    assert config.api_key == Secret("k1")
    config = ProviderConfig.from_env(
        {
            "POWERTRIO_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": "k2",
            "POWERTRIO_API_KEY": "k3",
            "POWERTRIO_MODEL": "c",
        }
    )
    assert (config.provider, config.base_url) == ("anthropic", "https://api.anthropic.com")
    assert config.api_key is not None
    assert config.api_key.reveal() == "k3"
    assert "k3" not in repr(config)


@pytest.mark.parametrize(
    ("env", "variable", "message"),
    [
        (
            {"POWERTRIO_MODEL": "m"},
            "POWERTRIO_API_KEY",
            "missing setting: set POWERTRIO_API_KEY (or OPENAI_API_KEY) to the openai API key",
        ),
        (
            {"POWERTRIO_PROVIDER": "anthropic", "POWERTRIO_MODEL": "m"},
            "POWERTRIO_API_KEY",
            "missing setting: set POWERTRIO_API_KEY (or ANTHROPIC_API_KEY) to the anthropic "
            "API key",
        ),
        (
            {"OPENAI_API_KEY": "k"},
            "POWERTRIO_MODEL",
            "missing setting: set POWERTRIO_MODEL to the model to call "
            "(e.g. gpt-4o-mini or claude-sonnet-4-5)",
        ),
    ],
)
def test_missing_setting_names_the_variable(
    env: dict[str, str], variable: str, message: str
) -> None:
    """A missing setting fails at construction, naming the variable."""
    with pytest.raises(MissingSettingError) as info:
        transport_from_env(env)
    assert (info.value.code, info.value.variable, str(info.value)) == (
        "config.missing",
        variable,
        message,
    )


def test_unknown_provider() -> None:
    """An unknown POWERTRIO_PROVIDER is a config.invalid error."""
    with pytest.raises(ConfigError) as info:
        ProviderConfig.from_env({"POWERTRIO_PROVIDER": "bard"})
    assert info.value.code == "config.invalid"
    assert str(info.value) == (
        "POWERTRIO_PROVIDER is 'bard'; it must be 'openai' (any OpenAI-compatible server) "
        "or 'anthropic'"
    )


async def test_factory_picks_the_transport_and_shares_the_client() -> None:
    """transport_from_config builds the provider's class; a shared client is left open."""
    async with httpx.AsyncClient() as client:
        for provider, cls in (("openai", OpenAITransport), ("anthropic", AnthropicTransport)):
            config = ProviderConfig(provider=provider, base_url="http://x", model="m")  # type: ignore[arg-type]
            transport = transport_from_config(config, client=client)
            assert type(transport) is cls
            await transport.aclose()
            assert not client.is_closed


async def test_an_unusable_base_url_fails_every_call() -> None:
    """A base URL httpx cannot parse is a ConfigError on each call, not at construction."""
    config = ProviderConfig(provider="openai", base_url="http://[::1", model="m")
    async with OpenAITransport(config) as transport:
        for _ in range(2):
            with pytest.raises(ConfigError) as info:
                await transport.complete(LLMRequest(messages=[UserMessage("hi")]))
            assert str(info.value).startswith("openai: the base URL is not usable: ")


def test_secret_masks_itself() -> None:
    """A Secret's repr and str never show the value."""
    secret = Secret("hunter2")
    assert (repr(secret), str(secret), secret.reveal()) == (
        "Secret('**********')",
        "Secret('**********')",
        "hunter2",
    )


def test_one_table_names_every_provider() -> None:
    """``PROVIDERS`` is the one list: the type's names, a transport each, the environment's
    variables, and the names a fleet file may give besides the offline ``demo``."""
    import typing

    from actors._fleet._file import PROVIDERS as FLEET_PROVIDERS
    from protocols.transports import PROVIDERS, ProviderName
    from protocols.transports._factory import _TRANSPORTS, provider_configured

    assert list(PROVIDERS) == list(typing.get_args(ProviderName))
    assert set(_TRANSPORTS) == set(PROVIDERS)
    assert ("demo", *PROVIDERS) == FLEET_PROVIDERS
    for entry in PROVIDERS.values():
        config = ProviderConfig.from_env(
            {"POWERTRIO_PROVIDER": entry.name, entry.key_variable: "k", "POWERTRIO_MODEL": "m"}
        )
        assert (config.provider, config.base_url) == (entry.name, entry.base_url)
        assert provider_configured({entry.key_variable: "k"})  # its own key names it
