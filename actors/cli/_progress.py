"""How far the model's answers have come, for a person watching a terminal.

A small local model takes seconds to read a prompt and streams a few tokens a second on a
laptop: without a sign of life the command looks hung. :class:`StreamProgress` folds the
session tree's observations into one line (``the model: 42 tokens · 12 s``); the run's
view shows it in its live display, or as a status line on stderr when stdout is not the
terminal. Nothing of it reaches a pipe or a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import attrs

from actors.events import DeltaReceived, LLMCallFinished, Observation, RoundBegan, RunEnded

__all__ = ["StreamProgress"]

_PIECES = frozenset({"text", "thinking", "tool_call"})
"""The kinds of stream deltas that carry a piece of the answer."""


@final
@attrs.define(eq=False)
class _Call:
    began: float
    tokens: int = 0


@final
@attrs.define(eq=False)
class StreamProgress:
    """The model calls in flight in a session tree: since when, and how many tokens came.

    A streamed piece of an answer counts as a token (a llama.cpp server streams one token a
    piece; a provider may put a few in one).
    """

    clock: Callable[[], float]
    """Seconds from any origin (``time.monotonic``; a test passes its own)."""
    _calls: dict[str, _Call] = attrs.field(factory=dict)

    def observe(self, observation: Observation) -> None:
        """Take one observation of the tree in."""
        if isinstance(observation, RoundBegan):
            self._calls[observation.session_id] = _Call(self.clock())
        elif isinstance(observation, DeltaReceived):
            if observation.delta.type not in _PIECES:
                return  # usage and finish say how the answer ended, not that it grows
            call = self._calls.get(observation.session_id)
            if call is None:  # the first piece came before the round was announced
                call = self._calls[observation.session_id] = _Call(self.clock())
            call.tokens += 1
        elif isinstance(observation, LLMCallFinished):
            self._calls.pop(observation.session_id, None)
        elif isinstance(observation, RunEnded):
            self._calls.pop(observation.result.session_id, None)

    def line(self) -> str | None:
        """What the model calls in flight have done so far, or ``None`` with none."""
        if not self._calls:
            return None
        since = self.clock() - min(call.began for call in self._calls.values())
        tokens = sum(call.tokens for call in self._calls.values())
        who = "the model" if len(self._calls) == 1 else f"{len(self._calls)} model calls"
        if tokens == 0:
            return f"{who}: reading the prompt · {since:.0f} s"
        return f"{who}: {tokens:,} tokens · {since:.0f} s"
