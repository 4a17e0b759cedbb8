"""The scripted demo model of ``powertrio run --offline``: a small agent tree, no network."""

from __future__ import annotations

import orjson

from protocols import (
    LLMRequest,
    LLMResponse,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from runtime.testing import FunctionLLM

__all__ = ["HELPER_PROMPT", "SYSTEM_PROMPT", "demo_answer", "demo_llm"]

SYSTEM_PROMPT = (
    "You are a capable assistant running on powertrio. Break big tasks into parts and give "
    "self-contained parts to helper sub-agents with spawn_agent; share notes on the board "
    "(board_* tools); schedule_wakeup if something must happen later. Answer concisely."
)
"""The default system prompt of ``powertrio run``."""

HELPER_PROMPT = (
    "You are a helper sub-agent. Do the one task you are given, using your tools if "
    "useful, and answer with a short, self-contained report."
)
"""The system prompt of the default ``helper`` sub-agent."""

_MODEL = "powertrio-demo"


def _text(message: object) -> str:
    if isinstance(message, UserMessage):
        return message.text
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else ""


def _usage(request: LLMRequest, answer: str) -> Usage:
    # Roughly four characters a token, as real tokenizers average on English.
    prompt = sum(len(_text(m)) for m in request.messages) // 4 + 1
    return Usage(prompt_tokens=prompt, completion_tokens=len(answer) // 4 + 1)


def _call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": orjson.dumps(arguments).decode()}


def demo_answer(request: LLMRequest) -> LLMResponse:
    """The demo's answer: the root splits the task between two helpers, each helper reads
    the clock, and the root sums up what they said. Follow-ups get a direct answer. A task
    that says "ask me" gets a question first, when ``ask_human`` is offered (a terminal)."""
    system = request.messages[0] if request.messages else None
    prompt = system.content if isinstance(system, SystemMessage) else ""
    tools = {t.name for t in request.tools}
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    task = users[0].text if users else ""
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    last = request.messages[-1] if request.messages else None
    tag = f"c{len(request.messages)}"
    if prompt == HELPER_PROMPT:
        if not results and "current_time" in tools:
            calls = [_call(f"{tag}-time", "current_time", {})]
            return _response(request, "Checking the clock first.", calls)
        when = results[-1].content if results else "now"
        return _response(request, f"Report on {task!r}: looked into it at {when}; all good.")
    first_turn = isinstance(last, UserMessage) and len(users) == 1
    if first_turn and "ask_human" in tools and "ask me" in task.lower():
        question = {"question": "Before I start: indoors or outdoors?"}
        return _response(
            request, "One question first.", [_call(f"{tag}-ask", "ask_human", question)]
        )
    if first_turn and "spawn_agent" in tools:
        calls = [
            _call(f"{tag}-{i}", "spawn_agent", {"agent": "helper", "task": f"part {i} of: {task}"})
            for i in (1, 2)
        ]
        return _response(request, "I will split this between two helpers.", calls)
    if isinstance(last, UserMessage):
        return _response(request, f"(demo) You said: {last.text}")
    said = "; ".join(r.content for r in results[-2:])
    return _response(request, f"Done with {task!r}. I heard back: {said}")


def _response(
    request: LLMRequest, text: str, calls: list[dict[str, str]] | None = None
) -> LLMResponse:
    tool_calls = tuple(ToolCall(**c) for c in calls or ())
    return LLMResponse(
        content=text,
        tool_calls=tool_calls,
        finish_reason="tool_calls" if tool_calls else "stop",
        usage=_usage(request, text),
        model=_MODEL,
    )


def demo_llm(delay: float = 0.0) -> FunctionLLM:
    """The demo model: :func:`demo_answer` as a :class:`~runtime.testing.FunctionLLM`,
    deterministic and offline, streamed in small pieces.

    Args:
        delay (float): seconds each answer takes, spread over its streamed pieces, so a
            person (or a terminal test) can watch the tree grow; 0 answers at once.
    """
    return FunctionLLM(demo_answer, chunk_size=6, latency=max(0.0, delay))
