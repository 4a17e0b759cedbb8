"""Budgets for a run (tokens, cost, wall time) and the price table that turns usage into cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from protocols import Usage


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not value > 0:
        msg = f"{attribute.name} must be positive or None, got {value!r}"
        raise ValueError(msg)


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not value >= 0:
        msg = f"{attribute.name} must be >= 0, got {value!r}"
        raise ValueError(msg)


@final
@attrs.frozen(kw_only=True)
class Budget:
    """Limits a run must stay within; checked before each LLM call.

    A run that reaches a limit ends with status ``budget_exceeded`` at the next round
    boundary, with every tool call closed, so it may exceed a limit by at most the one call
    that crossed it. Rounds are limited separately, by ``max_rounds``.
    """

    max_tokens: int | None = attrs.field(default=None, validator=_optional_positive)
    """Prompt plus completion tokens over the run's LLM calls."""
    max_cost: float | None = attrs.field(default=None, validator=_optional_positive)
    """Cost in the price table's currency (the session needs ``prices`` for this)."""
    max_seconds: float | None = attrs.field(default=None, validator=_optional_positive)
    """Wall time since the send, on the runtime's clock."""

    def exceeded(self, usage: Usage, cost: float) -> str | None:
        """Which token or cost limit ``usage`` and ``cost`` reach, described; else ``None``."""
        if self.max_tokens is not None and usage.total_tokens >= self.max_tokens:
            return f"tokens: {usage.total_tokens} used, the budget is {self.max_tokens}"
        if self.max_cost is not None and cost >= self.max_cost:
            return f"cost: {cost:.6g} spent, the budget is {self.max_cost:g}"
        return None


@final
@attrs.frozen(kw_only=True)
class Price:
    """What a model costs per million tokens."""

    prompt: float = attrs.field(validator=_non_negative)
    """Per million uncached input tokens."""
    completion: float = attrs.field(validator=_non_negative)
    """Per million generated tokens."""
    cached_prompt: float | None = None
    """Per million input tokens read from the prompt cache; ``prompt`` if ``None``."""

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage`` at this price."""
        cached_rate = self.prompt if self.cached_prompt is None else self.cached_prompt
        uncached = usage.prompt_tokens - usage.cached_tokens
        return (
            uncached * self.prompt
            + usage.cached_tokens * cached_rate
            + usage.completion_tokens * self.completion
        ) / 1_000_000


def price_for(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of ``model``, or of the longest name it starts with (dated variants)."""
    price = prices.get(model)
    if price is not None:
        return price
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None


def cost_of(usage_by_model: Mapping[str, Usage], prices: Mapping[str, Price]) -> float:
    """The cost of usage per model; models without a price (see :func:`price_for`) cost
    nothing."""
    return sum(
        price.cost(usage)
        for model, usage in usage_by_model.items()
        if (price := price_for(prices, model)) is not None
    )
