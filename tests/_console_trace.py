"""A run for the trace view: a tool, a timer, a sub-agent and a wait for a human, in order."""

from __future__ import annotations

from pathlib import Path

import orjson

from actors.cli._demo import HELPER_PROMPT, demo_answer
from actors.cli._model import spawn_cli_session
from protocols import (
    LLMRequest,
    LLMResponse,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

TRACE_PAYLOAD = '<script>window.__xss=3</script><img src=x onerror="window.__xss=4">'
"""In the task and the model's answers: the trace's labels and events must keep it inert."""


def _call(call_id: str, name: str, arguments: dict[str, object]) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=orjson.dumps(arguments).decode())


def trace_answer(request: LLMRequest) -> LLMResponse:
    """Round 1: the clock and a wake-up in an hour; round 2: a helper; round 3: a question
    for a person; round 4: the answer. A helper answers as the demo's do."""
    system = request.messages[0] if request.messages else None
    if isinstance(system, SystemMessage) and system.content == HELPER_PROMPT:
        return demo_answer(request)
    done = sum(isinstance(m, ToolResultMessage) for m in request.messages)
    usage = Usage(prompt_tokens=100 + 10 * done, completion_tokens=20)
    steps: list[tuple[ToolCall, ...]] = [
        (
            _call("t-time", "current_time", {}),
            _call(
                "t-wake",
                "schedule_wakeup",
                {"action": "schedule", "delay_seconds": 3600, "note": "look again" + TRACE_PAYLOAD},
            ),
        ),
        (_call("t-child", "spawn_agent", {"agent": "helper", "task": "check the venue"}),),
        (_call("t-ask", "ask_human", {"question": "Which day? " + TRACE_PAYLOAD}),),
    ]
    # The tool results so far say which step is next: 0, 2 (clock and wake-up), 3, 4.
    step = {0: 0, 2: 1, 3: 2}.get(done)
    if step is None:
        return LLMResponse(content="All set. " + TRACE_PAYLOAD, usage=usage, model="trace-model")
    return LLMResponse(
        content=f"Step {step + 1}.",
        tool_calls=steps[step],
        finish_reason="tool_calls",
        usage=usage,
        model="trace-model",
    )


async def record_trace_log(path: Path, *, answer: bool = True) -> None:
    """Session ``plan``: one run through :func:`trace_answer`, its question answered (or,
    with ``answer=False``, still waiting)."""
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        session = await spawn_cli_session(
            runtime, FunctionLLM(trace_answer, latency=0.02), session_id="plan", interactive=True
        )
        result = await session.send("Plan the picnic " + TRACE_PAYLOAD)
        assert result.status == "waiting_for_human", result
        if answer:
            (request,) = result.human_requests
            finished = await session.reply(request.request_id, "Saturday")
            assert finished.status == "completed", finished
