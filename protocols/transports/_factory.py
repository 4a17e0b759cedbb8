"""Build the right transport from a configuration or from the environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar, overload

import httpx

from ._anthropic import AnthropicTransport
from ._config import ProviderConfig
from ._openai import OpenAITransport
from ._providers import PROVIDERS
from ._retry import AttemptObserver

__all__ = ["provider_configured", "transport_from_config", "transport_from_env"]

L = TypeVar("L")


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
    cls = _TRANSPORTS[config.provider]
    return cls(config, client=client, on_attempt=on_attempt, rand=rand)


_TRANSPORTS: dict[str, type[OpenAITransport | AnthropicTransport]] = {
    cls.provider: cls for cls in (OpenAITransport, AnthropicTransport)
}
"""The transport of each provider of ``PROVIDERS``, by the name the class gives itself."""


_PROVIDER_VARIABLES = (
    "POWERTRIO_PROVIDER",
    "POWERTRIO_API_KEY",
    "POWERTRIO_BASE_URL",
    "POWERTRIO_MODEL",
    *(v for p in PROVIDERS.values() for v in (p.key_variable, p.url_variable) if v),
)


def provider_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names a provider at all (any of its variables is set)."""
    env = os.environ if environ is None else environ
    return any(env.get(name) for name in _PROVIDER_VARIABLES)


@overload
def transport_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    on_attempt: AttemptObserver | None = None,
) -> OpenAITransport | AnthropicTransport: ...


@overload
def transport_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    on_attempt: AttemptObserver | None = None,
    offline: L,
) -> OpenAITransport | AnthropicTransport | L: ...


def transport_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    on_attempt: AttemptObserver | None = None,
    offline: object = None,
) -> object:
    """The transport the environment describes (see :meth:`ProviderConfig.from_env`).

    Args:
        environ (Mapping[str, str] | None): the variables; ``os.environ`` when None.
        client (httpx.AsyncClient | None): a shared client, or None for the transport to
            own one.
        on_attempt (AttemptObserver | None): told about every attempt.
        offline (LLM | None): what to use when the environment names no provider at all
            (none of ``POWERTRIO_*``, ``OPENAI_*``, ``ANTHROPIC_*`` is set), so a script
            runs on a machine with no provider; a half-configured environment still
            raises, naming the missing variable.

    Raises:
        MissingSettingError: a required variable is missing; ``variable`` names it.
        ConfigError: ``POWERTRIO_PROVIDER`` is not a known provider.
    """
    if offline is not None and not provider_configured(environ):
        return offline
    return transport_from_config(
        ProviderConfig.from_env(environ), client=client, on_attempt=on_attempt
    )
