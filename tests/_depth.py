"""How deep the suite digs: the everyday run, or the deep profile's thousands.

``pytest`` (and ``.ci/run``) runs every property with the count written beside it, chosen
so that the whole suite stays within minutes and each property still finds the bugs it
once found (those are pinned as ``@example``s). ``pytest --hypothesis-profile=deep`` runs
each of them with ten thousand examples, and repeats the determinism checks more often:
the run to make before a release, or after a change to a property's subject.
"""

from __future__ import annotations

from hypothesis import settings

DEEP_EXAMPLES = 10_000
"""The examples of each property in the deep profile."""

settings.register_profile("deep", max_examples=DEEP_EXAMPLES)


def deep() -> bool:
    """Whether this run loaded the deep profile."""
    return settings.default.max_examples >= DEEP_EXAMPLES


def examples(everyday: int) -> int:
    """A property's examples: ``everyday`` in the everyday run, the deep profile's count in it."""
    return DEEP_EXAMPLES if deep() else everyday


def repeats(everyday: int, deeper: int) -> int:
    """How many times a determinism check runs: ``everyday``, or ``deeper`` when deep."""
    return deeper if deep() else everyday
