"""The agent every node of the cluster tests hosts: one tool call, then an answer.

The model double calls ``work`` once with the run's input, then answers with the tool's
result. ``work`` leaves a line per execution in a file (``CLUSTER_TOOL_LOG``) when that
variable is set, so a test can count how often each call really ran. With
``CLUSTER_WAKE_SECONDS`` set, the model also schedules a wake-up (a durable timer) that
many seconds ahead, and answers the wake-up's message with no tool call.
"""

from __future__ import annotations

import json
import os

import trio

from actors import AgentSpec, ToolContext, tool, wakeup_tools
from protocols import LLMRequest, LLMResponse, Message, ToolCall, UserMessage
from runtime.testing import FunctionLLM

TOOL_SECONDS = float(os.environ.get("CLUSTER_TOOL_SECONDS", "0"))
WAKE_SECONDS = float(os.environ.get("CLUSTER_WAKE_SECONDS", "0"))


@tool
async def work(context: ToolContext, task: str) -> str:
    """Do the task."""
    path = os.environ.get("CLUSTER_TOOL_LOG")
    if path:  # one line per execution of one call (its key survives crash resumes)
        line = json.dumps({"call": context.idempotency_key, "task": task}) + "\n"
        with open(path, "a", encoding="utf-8") as log:  # noqa: ASYNC230  # one short line
            log.write(line)
    if TOOL_SECONDS:
        await trio.sleep(TOOL_SECONDS)
    return f"done: {task}"


def _text(message: Message) -> str:
    if isinstance(message, UserMessage):
        return message.text
    return message.content if isinstance(message.content, str) else ""


def _model(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "tool":
        results = [_text(m) for m in request.messages[-2:] if m.role == "tool"]
        return LLMResponse(content=f"answer ({results[0]})")
    task = _text(last)
    if task.startswith("[timer "):
        return LLMResponse(content="woke")
    calls = [ToolCall(id="c1", name="work", arguments=json.dumps({"task": task}))]
    tools = {tool.name for tool in request.tools}
    if "schedule_wakeup" in tools:
        delay = WAKE_SECONDS or 1.0
        wake = {"action": "schedule", "delay_seconds": delay, "note": f"wake {task}"}
        calls.append(ToolCall(id="c2", name="schedule_wakeup", arguments=json.dumps(wake)))
    return LLMResponse(tool_calls=calls)


def catalog() -> dict[str, AgentSpec]:
    """The catalog: ``worker`` runs ``work`` once per send (and schedules a wake-up when
    ``CLUSTER_WAKE_SECONDS`` is set); ``sleeper`` always schedules one, a second ahead."""
    tools = (work, *wakeup_tools()) if WAKE_SECONDS else (work,)
    return {
        "worker": AgentSpec(name="worker", tools=tools, llm=FunctionLLM(_model)),
        "sleeper": AgentSpec(
            name="sleeper", tools=(work, *wakeup_tools()), llm=FunctionLLM(_model)
        ),
    }
