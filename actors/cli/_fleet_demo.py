"""The offline model of fleet agents with ``provider = "demo"``: deterministic, no network.

Its first answer calls each of the agent's tools that needs no arguments; its last one
names the agent's prompt and task and quotes what the tools said.
"""

from __future__ import annotations

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

__all__ = ["fleet_demo_answer", "fleet_demo_llm"]


def fleet_demo_answer(request: LLMRequest) -> LLMResponse:
    """One answer of the demo model (see the module's docstring)."""
    system = request.messages[0] if request.messages else None
    prompt = system.content if isinstance(system, SystemMessage) else ""
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    task = users[-1].text if users else ""
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    usage = Usage(prompt_tokens=20 + len(task) // 4, completion_tokens=12)
    callable_now = [t for t in request.tools if not t.parameters.get("required")]
    if not results and callable_now:
        calls = tuple(
            ToolCall(id=f"call-{i}", name=t.name, arguments="{}")
            for i, t in enumerate(callable_now)
        )
        return LLMResponse(tool_calls=calls, finish_reason="tool_calls", usage=usage)
    heard = "; ".join(r.text for r in results)
    text = f"{prompt.split('.')[0]}: done with {task!r}" + (f" ({heard})" if heard else "")
    return LLMResponse(content=text, finish_reason="stop", usage=usage, model="fleet-demo")


def fleet_demo_llm(delay: float = 0.0) -> FunctionLLM:
    """The demo model; each answer takes ``delay`` seconds (for watching a run drain)."""
    return FunctionLLM(fleet_demo_answer, latency=max(0.0, delay))
