"""Context as a projection: what the model sees of a session that keeps every message.

The log keeps the whole conversation forever; a session with a :class:`ContextPolicy`
sends the model a *projection* of it: its system prompt, the summary of the turns it
compacted (:class:`ContextCompacted`), and the turns after them. Everything here is pure
(the decider calls it), so a replay folds the same events into the same projection and
calls no model.

Token counts are an estimate, decided before the call (the decision must be the same at
replay, where no model answers): by default a quarter of the characters of each message
serialized as JSON, rounded up, plus the same for the tool definitions (the JSON keys
and quotes count too, a margin for English prose; code and other languages may take
more tokens per character). Once the provider has reported the input tokens of a
request of the current view, the estimate is scaled by reported / estimated (see
:func:`plan_cut`). Give ``ContextPolicy(count_tokens=...)`` a tokenizer of your model
for exact figures.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Literal, final

import attrs
import orjson

from protocols import (
    LLM,
    AssistantMessage,
    LLMRequest,
    Message,
    SystemMessage,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import event_type
from protocols.errors import ConfigError

__all__ = [
    "ContextCompacted",
    "ContextPolicy",
    "Cut",
    "estimate_tokens",
    "plan_cut",
    "render_for_summary",
    "summary_message",
]


@final
@event_type("session.context_compacted")
@attrs.frozen(kw_only=True)
class ContextCompacted:
    """The model's view of the conversation was compacted: ``summary`` stands for the
    transcript's messages ``[0, upto)`` in every later request (the log keeps them all).

    ``method`` is ``summary`` (written by the summariser: a recorded model call, never
    asked again) or ``drop`` (no summariser: the oldest turns were left out, ``summary``
    empty). Messages are counted in the session's transcript (``SessionState.transcript``).
    """

    run_id: str
    upto: int
    """Messages ``[0, upto)`` of the transcript are compacted."""
    since: int
    """Where the previous compaction cut (0 for the first): this one read ``[since, upto)``
    besides the previous summary."""
    method: Literal["summary", "drop"]
    summary: str
    tokens_before: int
    """The estimated tokens (calibrated by reported usage when known) of the request that
    was over budget."""
    usage: Usage = attrs.field(factory=Usage)
    """The summariser call's tokens (added to the run's and the session's usage)."""
    model: str = ""
    request_fingerprint: str = ""
    """Fingerprint of the summariser's request (replay checks it)."""


SUMMARY_INSTRUCTIONS = (
    "You compact a long conversation so that it fits the model's context. Write a "
    "faithful summary of the conversation below for the assistant who will continue it: "
    "the user's goals, facts and numbers stated, decisions taken, tool results that "
    "matter, and open questions. Keep names, identifiers and figures exact. Write plain "
    "text, no preamble."
)
"""The summariser's system prompt (part of its request, so of its fingerprint)."""


def estimate_tokens(message: Message) -> int:
    """The default token estimate of one message: JSON characters / 4, rounded up.

    Deterministic and cheap (no tokenizer); see the module's docstring for why the
    projection is decided on an estimate rather than on the usage a provider reports.
    Remembered per message (messages are immutable), since every request of a session
    counts the messages the previous one counted.
    """
    return _estimate(message)


@functools.lru_cache(maxsize=1 << 16)
def _estimate(message: Message) -> int:
    return -(-len(orjson.dumps(attrs.asdict(message))) // 4)


def tools_tokens(tools: Sequence[ToolDefinition]) -> int:
    """The estimate of the tool definitions sent with every request."""
    if not tools:
        return 0
    return -(-len(orjson.dumps([attrs.asdict(t) for t in tools])) // 4)


@final
@attrs.frozen(kw_only=True)
class ContextPolicy:
    """How much of a session's conversation the model sees, and how the rest is compacted.

    The budget of a request is ``window - reserve`` estimated tokens (system prompt,
    summary, kept turns and tool definitions). Before a model call whose projected
    request would exceed it, the session compacts its oldest turns: it asks the
    summariser for a summary of them (a logged model call, like any other: a restart
    never pays for a recorded summary twice) and records it as a
    :class:`ContextCompacted` event; with no summariser it drops them and records the
    same event with a note instead of a summary. A compaction cuts only at the start of a
    user turn: a tool call is never separated from its result, and the system prompt and
    the latest user turn are always kept. The log keeps every message; the ``recall``
    tool searches them all.
    """

    window: int
    """The model's context window, in tokens."""
    reserve: int = 0
    """Tokens kept free for the answer (and any slack for the estimate)."""
    summariser: LLM | Literal["session"] | None = "session"
    """Who writes summaries: ``"session"`` (the session's own model, the default), another
    :class:`~protocols.LLM`, or ``None`` for the deterministic fallback that drops the
    oldest complete turns."""
    keep: float = 0.5
    """After a compaction the kept turns take at most this fraction of the budget, so the
    next compaction is many turns away (0 < keep < 1)."""
    summary_tokens: int | None = None
    """The most tokens of one summary (its ``max_tokens``; a longer answer is cut);
    ``None``: a quarter of the budget."""
    recall: bool = True
    """Give the session the built-in ``recall`` tool, which searches its whole history."""
    count_tokens: Callable[[Message], int] = estimate_tokens
    """Tokens of one message (the default: :func:`estimate_tokens`, calibrated by the
    input tokens the provider reports; a count of your own is taken as exact)."""

    def __attrs_post_init__(self) -> None:
        problems = self.problems()
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            msg = f"invalid ContextPolicy:\n{listed}"
            raise ConfigError(msg)

    def problems(self) -> tuple[str, ...]:
        """Every problem with the policy, each a line a person can act on."""
        found: list[str] = []
        window: object = self.window
        reserve: object = self.reserve
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            found.append(f"window must be an int >= 1 (tokens), got {window!r}")
        if not isinstance(reserve, int) or isinstance(reserve, bool) or reserve < 0:
            found.append(f"reserve must be an int >= 0 (tokens), got {reserve!r}")
        elif isinstance(window, int) and window >= 1 and reserve >= window:
            found.append(
                f"reserve ({reserve}) must be smaller than window ({window}): nothing "
                "would be left for the request"
            )
        keep: object = self.keep
        if not isinstance(keep, int | float) or isinstance(keep, bool) or not 0 < keep < 1:
            found.append(f"keep must be a fraction between 0 and 1 (exclusive), got {keep!r}")
        summary: object = self.summary_tokens
        if summary is not None and (
            not isinstance(summary, int) or isinstance(summary, bool) or summary < 1
        ):
            found.append(f"summary_tokens must be an int >= 1 or None, got {summary!r}")
        elif isinstance(summary, int) and not found and summary >= self.budget:
            found.append(
                f"summary_tokens ({summary}) must be smaller than the budget "
                f"({self.budget} = window - reserve)"
            )
        summariser: object = self.summariser
        if summariser is not None and summariser != "session" and not _is_llm(summariser):
            found.append(
                "summariser must be 'session' (the session's model), an LLM (with complete "
                f"and stream) or None (drop the oldest turns), got {summariser!r}"
            )
        count: object = self.count_tokens
        if not callable(count):
            found.append(f"count_tokens must be callable, got {count!r}")
        return tuple(found)

    @property
    def budget(self) -> int:
        """Estimated tokens a request may take: ``window - reserve``."""
        return self.window - self.reserve

    @property
    def summary_cap(self) -> int:
        """The most tokens of one summary."""
        return self.summary_tokens if self.summary_tokens is not None else self.budget // 4


def _is_llm(value: object) -> bool:
    return callable(getattr(value, "complete", None)) and callable(getattr(value, "stream", None))


def summary_message(upto: int, summary: str, method: str) -> SystemMessage:
    """The system message that stands for the compacted messages ``[0, upto)``."""
    if method == "drop":
        return SystemMessage(
            f"[The first {upto} messages of this conversation were dropped from your "
            "context to keep it within its budget. The recall tool, if you have it, "
            "searches them.]"
        )
    return SystemMessage(
        f"[Summary of the first {upto} messages of this conversation, compacted to keep "
        f"it within its budget. The recall tool, if you have it, searches them word for "
        f"word.]\n{summary}"
    )


def projection_digest(history_digest: str, upto: int) -> str:
    """The digest of a compacted request's conversation, in constant time.

    ``history_digest`` (the chain over the whole transcript) names every message and
    ``upto`` which of them are sent, so the pair names the conversation exactly, and
    building a request never walks the kept messages (the summary, a system message, is
    hashed with the request's parameters).
    """
    return hashlib.sha256(f"{history_digest}:{upto}".encode()).hexdigest()


@final
@attrs.frozen
class Cut:
    """Where a compaction cuts: messages ``[0, upto)`` are compacted, ``[upto, ...)`` kept."""

    upto: int
    tokens_before: int
    """The estimate of the request before the compaction."""


def plan_cut(
    policy: ContextPolicy,
    lead: Sequence[Message],
    messages: Sequence[Message],
    upto: int,
    tools: Sequence[ToolDefinition],
    *,
    summary: Message | None = None,
    reported: tuple[int, int] | None = None,
) -> Cut | None:
    """Where to compact before the next request, or ``None`` when it fits (or cannot shrink).

    Args:
        policy: the session's policy.
        lead: the system prompt's messages, sent first.
        messages: the whole conversation (the projection sends ``messages[upto:]``).
        upto: where the current compaction cut (0: none yet).
        tools: the request's tool definitions.
        summary: the message standing for ``messages[:upto]`` (sent after ``lead``).
        reported: the input tokens the provider reported for an earlier request of this
            projection (same ``lead``, same ``upto``) and how many messages it had: the
            estimate is scaled by reported / estimated for that request (clamped to
            [0.5, 4]), so a model's own count calibrates the estimate once it is known.

    The cut is at the start of a user turn, after ``upto`` and no later than the latest
    user message, so a tool call and its results stay together and the latest turn stays.
    It is the earliest such start whose kept turns fit ``keep`` of the budget with room
    for the prompt, the tools and a summary; the latest user message if none does.
    """
    count = policy.count_tokens
    prompt = sum(count(m) for m in lead) + tools_tokens(tools)
    fixed = prompt + (count(summary) if summary is not None else 0)
    costs = [count(m) for m in messages[upto:]]
    scale = 1.0
    if reported is not None and reported[0] > 0 and upto <= reported[1] <= len(messages):
        then = fixed + sum(costs[: reported[1] - upto])
        scale = min(4.0, max(0.5, reported[0] / then)) if then > 0 else 1.0
    total = -(-int((fixed + sum(costs)) * scale * 1000) // 1000)
    if total <= policy.budget:
        return None
    starts = [i for i in range(upto + 1, len(messages)) if isinstance(messages[i], UserMessage)]
    if not starts:
        return None  # one turn only: nothing older to compact
    next_summary = count(summary_message(len(messages), "", "summary")) + policy.summary_cap
    room = min(policy.budget - prompt - next_summary, int(policy.keep * policy.budget))
    room = int(room / scale)  # in the estimate's units
    tail = sum(costs)
    position = upto
    for start in starts:
        while position < start:
            tail -= costs[position - upto]
            position += 1
        if tail <= room:
            return Cut(start, total)
    return Cut(starts[-1], total)


def render_for_summary(previous: str, messages: Sequence[Message]) -> str:
    """The text the summariser reads: the previous summary, then the turns to fold in."""
    lines: list[str] = []
    if previous:
        lines += ["Summary so far:", previous, "", "Conversation since:"]
    for message in messages:
        if isinstance(message, UserMessage):
            lines.append(f"user: {message.text}")
        elif isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"assistant: {message.content}")
            lines.extend(
                f"assistant called {call.name}({call.arguments})" for call in message.tool_calls
            )
        elif isinstance(message, ToolResultMessage):
            flag = " (error)" if message.is_error else ""
            lines.append(f"tool result{flag}: {message.content}")
        else:
            lines.append(f"system: {message.text}")
    return "\n".join(lines)


def summary_request(
    policy: ContextPolicy, previous: str, messages: Sequence[Message], model: str | None
) -> LLMRequest:
    """The request that asks for a summary of ``messages`` (after ``previous``)."""
    return LLMRequest(
        messages=(
            SystemMessage(SUMMARY_INSTRUCTIONS),
            UserMessage(render_for_summary(previous, messages)),
        ),
        model=model,
        max_tokens=policy.summary_cap,
    )


def clip_summary(policy: ContextPolicy, text: str) -> str:
    """The summary cut to its cap (by the policy's count), so a long answer still fits."""
    cap = policy.summary_cap
    count = policy.count_tokens
    while text and count(SystemMessage(text)) > cap:
        text = text[: len(text) * 9 // 10]
    return text
