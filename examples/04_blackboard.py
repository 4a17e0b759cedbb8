"""Two agents share a blackboard: versioned writes, a compare-and-set conflict, a watcher.

Runs offline with scripted models:

    python examples/04_blackboard.py

The planner posts a plan; the writer reads it, tries to extend it with a stale version
(the board refuses: nothing is written), then retries with the version it read. A Python
watcher sees every change, stamped with the session that made it.
"""

from __future__ import annotations

import json

import trio

from actors import board_tools, open_board, spawn_session
from protocols import JsonValue, LLMResponse, ToolCall, ToolResultMessage
from runtime import open_runtime
from runtime.testing import ScriptedLLM


def use(call_id: str, name: str, **arguments: JsonValue) -> LLMResponse:
    """A scripted answer that calls one tool."""
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))
    return LLMResponse(tool_calls=[call])


planner_model = ScriptedLLM(
    [
        use("p1", "board_write", key="plan", value=["outline"], expected_version=0),
        LLMResponse(content="Plan posted."),
    ]
)
writer_model = ScriptedLLM(
    [
        use("w1", "board_read", key="plan"),
        # A stale version: the board refuses, writes nothing, and the model reads why.
        use("w2", "board_write", key="plan", value=["outline", "draft"], expected_version=0),
        use("w3", "board_write", key="plan", value=["outline", "draft"], expected_version=1),
        LLMResponse(content="Plan extended with a draft step."),
    ]
)


async def main() -> None:
    async with open_runtime(seed=7) as runtime:
        board = await open_board(runtime, "team")
        async with board.watch(prefix="") as changes:
            planner = await spawn_session(
                runtime, llm=planner_model, tools=board_tools(board), name="planner"
            )
            writer = await spawn_session(
                runtime, llm=writer_model, tools=board_tools(board), name="writer"
            )
            for name, session, task in [
                ("planner", planner, "Post a plan."),
                ("writer", writer, "Extend the plan."),
            ]:
                result = await session.send(task)
                print(f"{name} [{result.status}] {result.text}")
            seen = writer_model.requests[2].messages
            refused = [m for m in seen if isinstance(m, ToolResultMessage)][-1]
            print(f"the writer's stale write was refused: {refused.content}")
            who = {f"session:{planner.id}": "planner", f"session:{writer.id}": "writer"}
            while True:
                try:
                    change = changes.receive_nowait()
                except trio.WouldBlock:
                    break
                print(f"watcher: {change.key} v{change.version} by {who[change.author]}")
        for entry in await board.list():
            print(f"board: {entry.key} = {entry.value} (v{entry.version}, {who[entry.author]})")


if __name__ == "__main__":
    trio.run(main)
