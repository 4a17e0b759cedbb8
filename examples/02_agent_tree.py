"""An agent tree: spawn it, kill it mid-run, resume it from the log, then replay it.

A researcher agent splits a question between two analyst sub-agents (the model calls the
``spawn_agent`` tool twice in one turn; they run in parallel). The first process is
killed while the analysts work; the second opens the same log, and the tree carries on
where it was: no answer already recorded is asked for again. Finally the whole tree is
replayed against the code with no model at all.

    python examples/02_agent_tree.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import trio
import trio.testing

from actors import AgentSpec, replay_session, spawn_agent
from protocols import LLMRequest, LLMResponse, SystemMessage, ToolCall, Usage
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

ANALYST = AgentSpec(
    name="analyst", description="answers one narrow question", system_prompt="analyst"
)
RESEARCHER = AgentSpec(name="researcher", system_prompt="researcher", agents=[ANALYST])

calls: list[str] = []


async def model(request: LLMRequest) -> LLMResponse:
    """A deterministic stand-in for a real model, answering by the agent's prompt."""
    system = request.messages[0]
    assert isinstance(system, SystemMessage)
    usage = Usage(prompt_tokens=100, completion_tokens=20)
    results = [m.text for m in request.messages if m.role == "tool"]
    calls.append(system.content)
    if system.content == "analyst":
        await trio.sleep(0.2)  # thinking: the first process is killed around here
        task = request.messages[1].text
        return LLMResponse(content=f"finding about {task!r}", usage=usage)
    if not results:
        return LLMResponse(
            tool_calls=[
                ToolCall(
                    id=f"c{i}",
                    name="spawn_agent",
                    arguments=orjson.dumps({"agent": "analyst", "task": topic}).decode(),
                )
                for i, topic in enumerate(("costs", "risks"))
            ],
            usage=usage,
        )
    return LLMResponse(content="report: " + "; ".join(results), usage=usage)


async def first_process(path: Path) -> None:
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, RESEARCHER, llm=FunctionLLM(model), session_id="study")
        with trio.move_on_after(0.1):  # "kill -9" while the analysts think
            await root.send("Should we build it?", id="study-1")
    print(f"process 1 stopped after {len(calls)} model calls")


async def second_process(path: Path) -> None:
    async with open_sqlite_store(path) as store, open_runtime(store=store) as runtime:
        root = await spawn_agent(runtime, RESEARCHER, llm=FunctionLLM(model), session_id="study")
        # The same send as process 1, with the same id: the run is in the log, so this
        # starts nothing new; it waits for the resumed run (restart-safe at any point).
        result = await root.send("Should we build it?", id="study-1")
        state = await root.state()
    print(f"[{result.status}] {result.text}")
    print(f"runs in the log: {len(state.results)}")
    print(f"tree usage: {result.usage.total_tokens} tokens over {len(calls)} model calls")


async def replay(path: Path) -> None:
    async with open_sqlite_store(path) as store:
        replayed = await replay_session(store, "study", agents=[ANALYST])
    print(f"replayed {replayed.total_checked} model answers across the tree, no model called")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "agents.sqlite"
        await first_process(path)
        await second_process(path)
        await replay(path)


if __name__ == "__main__":
    # Virtual time: the "kill" lands at the same point of the run on every machine.
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
