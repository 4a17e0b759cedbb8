"""An agent using the tools of a local MCP server (a small MCPServer over stdio).

Runs offline with a model computed from the request (``FunctionLLM``); needs the ``mcp``
extra:

    pip install -e '.[mcp]' && python examples/10_mcp_agent.py

The server's tools are listed with their schemas and offered like local tools; each
result is recorded in the log as text (an image as a small JSON description), so the
replay at the end needs no server.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from actors import replay_session, spawn_session
from actors.mcp import mcp_stdio, mcp_tools
from protocols import LLMRequest, LLMResponse, ToolCall
from runtime import open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore

SERVER = Path(__file__).resolve().parent.parent / "tests" / "_mcp_server.py"


def model(request: LLMRequest) -> LLMResponse:
    """Call ``add``, then ``picture``, then answer with what the tools said."""
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        return LLMResponse(
            tool_calls=[ToolCall(id="call-1", name="add", arguments='{"a": 19, "b": 23}')]
        )
    if len(results) == 1:
        return LLMResponse(tool_calls=[ToolCall(id="call-2", name="picture", arguments="{}")])
    return LLMResponse(content=f"19 + 23 = {results[0].content}; the picture: {results[1].content}")


async def main() -> None:
    store = InMemoryEventStore()
    server = mcp_stdio(sys.executable, [str(SERVER)], name="local")
    async with open_runtime(store=store, seed=1) as runtime:
        tools = await mcp_tools(runtime, server)
        print("tools:", ", ".join(sorted(t.name for t in tools)))
        session = await spawn_session(
            runtime, llm=FunctionLLM(model), tools=tools, session_id="mcp-demo"
        )
        result = await session.send("Add 19 and 23, then show me a picture.")
        print(f"[{result.status}] {result.text}")
    # The server is gone with the runtime: the replay reads the results from the log.
    replay = await replay_session(store, "mcp-demo", tools=tools)
    print("replayed without the server:", type(replay).__name__)


if __name__ == "__main__":
    trio.run(main)
