"""The providers we speak to, in one table: their wire format's name, public URL and the
environment variables that configure them.

``ProviderConfig.from_env``, the transport factory and a fleet file's ``provider`` all read
this table, so a provider is added here (and given a transport), nowhere else. Kept apart
from the configuration so that reading it loads no HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, TypeAlias, final

import attrs

__all__ = ["PROVIDERS", "Provider", "ProviderName"]

#: The wire formats we speak.
ProviderName: TypeAlias = Literal["openai", "anthropic"]


@final
@attrs.frozen(kw_only=True)
class Provider:
    """One provider's entry in :data:`PROVIDERS`."""

    name: ProviderName
    """The name ``POWERTRIO_PROVIDER`` (or a fleet file's ``provider``) gives."""
    base_url: str
    """The public API's URL, used when no base URL is set."""
    key_variable: str
    """The provider's own API key variable, read when ``POWERTRIO_API_KEY`` is not set."""
    example_model: str
    """A model of the provider, for messages that say what ``POWERTRIO_MODEL`` takes."""
    url_variable: str | None = None
    """The provider's own base URL variable, read when ``POWERTRIO_BASE_URL`` is not set."""
    also: str = ""
    """What else the name covers, for messages (``openai``: any compatible server)."""


PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            Provider(
                name="openai",
                base_url="https://api.openai.com/v1",
                key_variable="OPENAI_API_KEY",
                example_model="gpt-4o-mini",
                url_variable="OPENAI_BASE_URL",
                also="any OpenAI-compatible server",
            ),
            Provider(
                name="anthropic",
                base_url="https://api.anthropic.com",
                key_variable="ANTHROPIC_API_KEY",
                example_model="claude-sonnet-4-5",
            ),
        )
    }
)
"""Every provider by name, in the order messages list them; the first is the default
(``POWERTRIO_PROVIDER`` unset)."""
