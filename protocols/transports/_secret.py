"""Secrets that never show themselves, and the one way to cut them out of text."""

from __future__ import annotations

from typing import final

import attrs


@final
@attrs.frozen(repr=False)
class Secret:
    """A string that never shows itself: its ``repr`` and ``str`` are masked.

    API keys travel inside this so that a config object can be logged, printed in a
    traceback or stored in an event without leaking them. Call :meth:`reveal` only where
    the value goes on the wire.
    """

    _value: str = attrs.field(alias="value")
    """The secret value."""

    def reveal(self) -> str:
        """The secret itself; use only to build the request headers."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """Replace every secret in ``text`` with ``***``.

    Provider error bodies sometimes quote the key they refused; nothing we raise or log
    may carry it.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
