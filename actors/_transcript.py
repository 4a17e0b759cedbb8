"""The one place that makes a transcript provider-valid (DESIGN.md invariant 5)."""

from __future__ import annotations

from collections.abc import Iterable

from protocols import AssistantMessage, Message, ToolResultMessage

INTERRUPTED = (
    "interrupted: this tool call did not finish (cancelled or crashed); its result is unknown"
)


def provider_valid(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Pair every assistant tool call with exactly one tool result, in call order.

    Providers reject a transcript where a tool call has no result, or a result answers no
    call. A crash, a cancel or a budget stop can leave such holes; this closes each open
    call with an explicit error result saying it was interrupted (never a fake success)
    and drops results that answer no pending call. Nothing else re-implements pairing.

    Args:
        messages: user, assistant and tool messages in log order (a system message, if
            present, passes through).

    Returns:
        The messages with each assistant message followed by one result per tool call.
    """
    out: list[Message] = []
    pending: dict[str, None] = {}

    def close_pending() -> None:
        for call_id in pending:
            out.append(ToolResultMessage(tool_call_id=call_id, content=INTERRUPTED, is_error=True))
        pending.clear()

    for message in messages:
        if isinstance(message, ToolResultMessage):
            if message.tool_call_id in pending:
                del pending[message.tool_call_id]
                out.append(message)
            continue
        close_pending()
        out.append(message)
        if isinstance(message, AssistantMessage):
            pending.update((call.id, None) for call in message.tool_calls)
    close_pending()
    return tuple(out)


def is_provider_valid(messages: Iterable[Message]) -> bool:
    """Whether every tool call has exactly one result right after its assistant message."""
    messages = tuple(messages)
    return provider_valid(messages) == messages
