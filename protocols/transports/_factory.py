"""Build the right transport from a configuration or from the environment."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from ._anthropic import AnthropicTransport
from ._config import ProviderConfig
from ._openai import OpenAITransport
from ._retry import AttemptObserver

__all__ = ["transport_from_config", "transport_from_env"]


def transport_from_config(
    config: ProviderConfig,
    *,
    client: httpx.AsyncClient | None = None,
    on_attempt: AttemptObserver | None = None,
    rand: Callable[[], float] | None = None,
) -> OpenAITransport | AnthropicTransport:
    """The transport for ``config.provider``.

    Args:
        config (ProviderConfig): where and how to call the provider.
        client (httpx.AsyncClient | None): a shared client (from ``open_http_client``), or
            None for the transport to own one.
        on_attempt (AttemptObserver | None): told about every attempt.
        rand (Callable[[], float] | None): jitter source for retries.

    Returns:
        (OpenAITransport | AnthropicTransport): the transport; close it with ``aclose``.
    """
    cls = OpenAITransport if config.provider == "openai" else AnthropicTransport
    return cls(config, client=client, on_attempt=on_attempt, rand=rand)


def transport_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    on_attempt: AttemptObserver | None = None,
) -> OpenAITransport | AnthropicTransport:
    """The transport the environment describes (see :meth:`ProviderConfig.from_env`).

    Raises:
        MissingSettingError: a required variable is missing; ``variable`` names it.
        ConfigError: ``POWERTRIO_PROVIDER`` is not a known provider.
    """
    return transport_from_config(
        ProviderConfig.from_env(environ), client=client, on_attempt=on_attempt
    )
