"""A fleet: twenty agents with daily wake-ups, a shared board and a flaky tool, for a week.

The week runs in virtual time (``trio.testing.MockClock``), so it takes a second. Each
agent wakes every morning, calls a tool that sometimes fails, posts its status on the
board; the supervisor and the log keep the fleet going.

The log is a SQLite file, as in production: the runtime holds the virtual clock while its
own thread work (the store's commits, the sync tool's thread) is in flight, so the week
comes out the same on every run.

    python examples/06_fleet.py
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path

import orjson
import trio
import trio.testing

from actors import board_tools, open_board, spawn_session, tool
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage, Usage
from runtime import EventStore, open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

DAY = 86_400.0
AGENTS = 20
flaky = random.Random(7)


@tool
def check_service(name: str) -> str:
    """Check one service's health."""
    if flaky.random() < 0.2:
        msg = f"{name} did not answer"
        raise ConnectionError(msg)
    return f"{name} is healthy"


def model(request: LLMRequest) -> LLMResponse:
    """Morning routine: check the service, post the result, stop."""
    usage = Usage(prompt_tokens=200, completion_tokens=30)
    last = request.messages[-1]
    if last.role == "user":
        return LLMResponse(
            tool_calls=[ToolCall(id="c", name="check_service", arguments='{"name": "api"}')],
            usage=usage,
        )
    if isinstance(last, ToolResultMessage) and last.tool_call_id == "c":
        status = last.text
        me = request.messages[0].text  # the system prompt
        arguments = orjson.dumps({"key": f"status/{me}", "value": status}).decode()
        return LLMResponse(
            tool_calls=[ToolCall(id="p", name="board_write", arguments=arguments)], usage=usage
        )
    return LLMResponse(content="posted", usage=usage)


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with open_sqlite_store(Path(folder) / "fleet.sqlite") as store:
            await week(store)


async def week(store: EventStore) -> None:
    async with open_runtime(store=store, seed=7) as runtime:
        board = await open_board(runtime, "ops")
        fleet = [
            await spawn_session(
                runtime,
                llm=FunctionLLM(model),
                tools=[check_service, *board_tools(board)],
                system_prompt=f"agent-{i:02}",
                session_id=f"agent-{i:02}",
            )
            for i in range(AGENTS)
        ]
        for session in fleet:
            await runtime.timers.schedule(session.ref, delay=DAY, every=DAY, note="morning")
        await trio.sleep(7 * DAY + 60)
        runs: Counter[str] = Counter()
        tokens = 0
        for session in fleet:
            state = await session.state()
            runs.update(r.status for r in state.results.values())
            tokens += state.usage.total_tokens
        entries = await board.list("status/")
    healthy = sum("healthy" in str(e.value) for e in entries)
    print(f"[completed] {sum(runs.values())} runs in a virtual week: {dict(runs)}")
    print(f"{tokens} tokens; the board shows {healthy} of {len(entries)} agents healthy today")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
