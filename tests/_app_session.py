"""A session an application made with its own agent, left waiting for a human: what the
CLI's and the console's operator actions must not run with the CLI's agent."""

from __future__ import annotations

from actors import ask_human, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage
from runtime import EventStore, open_runtime
from runtime.testing import FunctionLLM

APP_PROMPT = "You are the billing desk agent. Look every invoice up before you answer."
"""The app's system prompt (not the CLI's)."""


@tool
def lookup_invoice(number: str) -> str:
    """Look an invoice up by its number."""
    return f"invoice {number}: paid"


def _billing_model(request: LLMRequest) -> LLMResponse:
    if not any(isinstance(m, ToolResultMessage) for m in request.messages):
        call = ToolCall(id="call-ask", name="ask_human", arguments='{"question": "Which invoice?"}')
        return LLMResponse(content="", tool_calls=(call,), finish_reason="tool_calls", model="m")
    return LLMResponse(content="Invoice looked up.", model="m")


async def record_app_session(store: EventStore, session_id: str = "app") -> None:
    """``session_id``: the app's prompt and tools (``ask_human``, ``lookup_invoice``), its
    run waiting for the answer to request ``call-ask``."""
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime,
            llm=FunctionLLM(_billing_model),
            tools=[ask_human, lookup_invoice],
            system_prompt=APP_PROMPT,
            session_id=session_id,
        )
        assert (await session.send("Is my invoice paid?")).status == "waiting_for_human"
