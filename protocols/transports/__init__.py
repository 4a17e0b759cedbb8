"""LLM transports over httpx: OpenAI-compatible Chat Completions and Anthropic Messages.

In tests, give a session an ``LLM`` double of ``runtime.testing`` (``FunctionLLM``,
``ScriptedLLM``) instead; the transports themselves are tested against a scripted
loopback HTTP server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols._util import lazy_exports as _lazy_exports

# Names load on first use: a program that needs only ``Secret`` (an MCP server's
# environment) does not load httpx.
if _TYPE_CHECKING:
    from ._anthropic import AnthropicTransport as AnthropicTransport
    from ._base import Transport as Transport
    from ._config import HTTPConfig as HTTPConfig
    from ._config import ProviderConfig as ProviderConfig
    from ._config import ProviderName as ProviderName
    from ._config import Timeouts as Timeouts
    from ._config import open_http_client as open_http_client
    from ._errors import HTTPX_ERROR_MAP as HTTPX_ERROR_MAP
    from ._errors import error_from_body as error_from_body
    from ._errors import error_from_status as error_from_status
    from ._errors import map_httpx_errors as map_httpx_errors
    from ._errors import parse_retry_after as parse_retry_after
    from ._factory import provider_configured as provider_configured
    from ._factory import transport_from_config as transport_from_config
    from ._factory import transport_from_env as transport_from_env
    from ._openai import OpenAITransport as OpenAITransport
    from ._providers import PROVIDERS as PROVIDERS
    from ._providers import Provider as Provider
    from ._retry import Attempt as Attempt
    from ._retry import AttemptObserver as AttemptObserver
    from ._retry import RetryPolicy as RetryPolicy
    from ._secret import Secret as Secret
    from ._secret import redact as redact
    from ._sse import ServerSentEvent as ServerSentEvent
    from ._sse import iter_sse as iter_sse
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._anthropic": ("AnthropicTransport",),
            "._base": ("Transport",),
            "._config": (
                "HTTPConfig",
                "ProviderConfig",
                "ProviderName",
                "Timeouts",
                "open_http_client",
            ),
            "._errors": (
                "HTTPX_ERROR_MAP",
                "error_from_body",
                "error_from_status",
                "map_httpx_errors",
                "parse_retry_after",
            ),
            "._factory": ("provider_configured", "transport_from_config", "transport_from_env"),
            "._openai": ("OpenAITransport",),
            "._providers": ("PROVIDERS", "Provider"),
            "._retry": ("Attempt", "AttemptObserver", "RetryPolicy"),
            "._secret": ("Secret", "redact"),
            "._sse": ("ServerSentEvent", "iter_sse"),
        },
    )
