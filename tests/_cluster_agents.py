"""The agent every node of the cluster tests hosts: one tool call, then an answer.

The model double calls ``work`` once with the run's input, then answers with the tool's
result. ``work`` leaves a line per execution in a file (``CLUSTER_TOOL_LOG``) when that
variable is set, so a test can count how often each call really ran.
"""

from __future__ import annotations

import json
import os

import trio

from actors import AgentSpec, tool
from protocols import LLMRequest, LLMResponse, Message, ToolCall, UserMessage
from runtime.testing import FunctionLLM

TOOL_SECONDS = float(os.environ.get("CLUSTER_TOOL_SECONDS", "0"))


@tool
async def work(task: str) -> str:
    """Do the task."""
    path = os.environ.get("CLUSTER_TOOL_LOG")
    if path:
        line = json.dumps({"task": task, "pid": os.getpid()}) + "\n"
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
        return LLMResponse(content=f"answer ({_text(last)})")
    arguments = json.dumps({"task": _text(last)})
    return LLMResponse(tool_calls=[ToolCall(id="c1", name="work", arguments=arguments)])


def catalog() -> dict[str, AgentSpec]:
    """The catalog: ``worker`` runs ``work`` once per send."""
    spec = AgentSpec(name="worker", tools=(work,), llm=FunctionLLM(_model))
    return {"worker": spec}
