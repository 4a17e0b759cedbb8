"""Provider configuration: explicit objects or the environment, with the API key kept secret."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import final

import attrs
import httpx

from protocols.errors import ConfigError, MissingSettingError

from ._providers import PROVIDERS, ProviderName
from ._retry import RetryPolicy
from ._secret import Secret

__all__ = [
    "HTTPConfig",
    "ProviderConfig",
    "ProviderName",
    "Secret",
    "Timeouts",
    "open_http_client",
]


def _to_secret(value: str | Secret | None) -> Secret | None:
    if value is None or isinstance(value, Secret):
        return value
    return Secret(value)


@final
@attrs.frozen(kw_only=True)
class Timeouts:
    """Per-request network timeouts, in seconds.

    ``connect``, ``read``, ``write`` and ``pool`` go to httpx (``read`` bounds the wait for
    any bytes at all). ``idle`` bounds the wait for the next data event of a stream: a
    provider that sends keep-alive comments or trickles bytes without ever finishing an
    event is stopped by it, where ``read`` would wait forever. A large event still arriving
    is not idleness: every 64 KiB of the body counts as progress, so one event of many
    megabytes may take longer than ``idle`` to arrive. ``total`` bounds one whole attempt,
    from sending the request to the last byte of the answer or of the stream.
    """

    connect: float = 10.0
    """Seconds to open the TCP (and TLS) connection."""
    read: float = 120.0
    """Seconds to wait for the next bytes of the response."""
    write: float = 30.0
    """Seconds to send the next bytes of the request."""
    pool: float = 30.0
    """Seconds to wait for a free connection from the pool."""
    idle: float = 60.0
    """Seconds a stream may go without a data event or 64 KiB of one; SSE comments and
    ``ping`` events (keep-alives) do not count as data."""
    total: float = 600.0
    """Seconds for one attempt as a whole, a stream's headers and all its events included."""

    def to_httpx(self) -> httpx.Timeout:
        """The httpx timeout object for one request."""
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


@final
@attrs.frozen(kw_only=True)
class HTTPConfig:
    """Settings of the shared ``httpx.AsyncClient``: connection limits and default timeouts."""

    max_connections: int = 64
    """The most open connections, over all providers sharing the client."""
    max_keepalive_connections: int = 16
    """The most idle connections kept open for reuse."""
    keepalive_expiry: float = 30.0
    """Seconds an idle connection is kept."""
    timeouts: Timeouts = attrs.Factory(Timeouts)
    """Default timeouts (each transport passes its own per request)."""


def open_http_client(config: HTTPConfig | None = None) -> httpx.AsyncClient:
    """A new ``httpx.AsyncClient`` for transports to share; the caller closes it.

    One client per process (or per runtime) keeps a single connection pool with one set of
    limits. Transports given a client do not close it; use it as ``async with
    open_http_client() as client:``.

    Args:
        config (HTTPConfig | None): limits and timeouts; defaults when None.

    Returns:
        (httpx.AsyncClient): the client (works under Trio through httpcore's Trio backend).
    """
    config = config or HTTPConfig()
    return httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_keepalive_connections,
            keepalive_expiry=config.keepalive_expiry,
        ),
        timeout=config.timeouts.to_httpx(),
        follow_redirects=False,
    )


@final
@attrs.frozen(kw_only=True)
class ProviderConfig:
    """Everything a transport needs to call one provider.

    Build it explicitly, or with :meth:`from_env`. The API key is a :class:`Secret`: the
    repr shows it masked.
    """

    provider: ProviderName
    """Which wire format to speak."""
    base_url: str
    """The API root: ``https://api.openai.com/v1`` (requests go to ``/chat/completions``) or
    ``https://api.anthropic.com`` (requests go to ``/v1/messages``)."""
    model: str
    """The model used when a request names none."""
    api_key: Secret | None = attrs.field(default=None, converter=_to_secret)
    """The API key (``None`` for local servers that need none)."""
    timeouts: Timeouts = attrs.Factory(Timeouts)
    """Per-request timeouts."""
    retry: RetryPolicy = attrs.Factory(RetryPolicy)
    """When to retry failed calls."""
    default_max_tokens: int = 4096
    """``max_tokens`` sent when a request sets none (Anthropic requires one)."""
    prompt_cache: bool = True
    """Anthropic: mark the stable prefix (tools, system, history) as cache breakpoints."""
    anthropic_version: str = "2023-06-01"
    """Anthropic: the ``anthropic-version`` header."""
    extra_headers: tuple[tuple[str, str], ...] = ()
    """More headers for every request (organisation ids, beta flags, ...)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProviderConfig:
        """Read the configuration from environment variables.

        ``POWERTRIO_PROVIDER`` (``openai`` or ``anthropic``; default ``openai``),
        ``POWERTRIO_BASE_URL`` (else ``OPENAI_BASE_URL`` for openai, else the provider's
        public URL), ``POWERTRIO_API_KEY`` (else ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``)
        and ``POWERTRIO_MODEL``.

        Args:
            environ (Mapping[str, str] | None): the variables; ``os.environ`` when None.

        Returns:
            (ProviderConfig): the configuration.

        Raises:
            MissingSettingError: no API key or no model is set; ``variable`` names the
                variable to set.
            ConfigError: ``POWERTRIO_PROVIDER`` names an unknown provider.
        """
        env = os.environ if environ is None else environ
        raw_provider = env.get("POWERTRIO_PROVIDER", next(iter(PROVIDERS))).strip().lower()
        entry = PROVIDERS.get(raw_provider)
        if entry is None:
            choices = " or ".join(
                f"{p.name!r} ({p.also})" if p.also else repr(p.name) for p in PROVIDERS.values()
            )
            msg = f"POWERTRIO_PROVIDER is {raw_provider!r}; it must be {choices}"
            raise ConfigError(msg)
        provider = entry.name
        own_key = entry.key_variable
        base_url = env.get("POWERTRIO_BASE_URL") or (
            env.get(entry.url_variable) if entry.url_variable is not None else None
        )
        api_key = env.get("POWERTRIO_API_KEY") or env.get(own_key)
        if not api_key:
            raise MissingSettingError(
                "POWERTRIO_API_KEY",
                f"missing setting: set POWERTRIO_API_KEY (or {own_key}) to the {provider} API key",
            )
        model = env.get("POWERTRIO_MODEL")
        if not model:
            raise MissingSettingError(
                "POWERTRIO_MODEL",
                "missing setting: set POWERTRIO_MODEL to the model to call (e.g. "
                + " or ".join(p.example_model for p in PROVIDERS.values())
                + ")",
            )
        return cls(
            provider=provider,
            base_url=base_url or entry.base_url,
            model=model,
            api_key=api_key,
        )
