"""Hello, agent: a session with one tool, a durable log on disk, a crash-free resume.

Runs offline with a scripted model:

    python examples/01_hello_agent.py

Set POWERTRIO_PROVIDER/POWERTRIO_BASE_URL/POWERTRIO_MODEL to use a real provider instead
(see protocols.transports).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from actors import spawn_session, tool
from protocols import LLMResponse, ToolCall, Usage
from runtime import open_runtime, open_sqlite_store
from runtime.testing import ScriptedLLM


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


def scripted_model() -> ScriptedLLM:
    return ScriptedLLM(
        [
            LLMResponse(
                tool_calls=[ToolCall(id="call-1", name="add", arguments='{"a": 19, "b": 23}')],
                usage=Usage(prompt_tokens=42, completion_tokens=9),
            ),
            LLMResponse(content="19 + 23 = 42", usage=Usage(prompt_tokens=61, completion_tokens=8)),
        ]
    )


async def main(log_path: Path) -> None:
    async with open_sqlite_store(log_path) as store, open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime,
            llm=scripted_model(),
            tools=[add],
            system_prompt="You do arithmetic.",
            session_id="hello",
        )
        # An id for the send makes it safe to run again after a crash: one run per id.
        result = await session.send("What is 19 + 23?", id="sum-1")
        print(f"[{result.status}] {result.text}")
        print(f"rounds={result.rounds} tokens={result.usage.total_tokens}")

    # A new runtime on the same file folds the log: the conversation is all there. The
    # same send again (as after a kill -9) finds run sum-1 and calls no model (this
    # scripted model has no answers left to give).
    async with open_sqlite_store(log_path) as store, open_runtime(store=store) as runtime:
        resumed = await spawn_session(runtime, llm=ScriptedLLM(), tools=[add], session_id="hello")
        again = await resumed.send("What is 19 + 23?", id="sum-1")
        state = await resumed.state()
        print(f"sent again: [{again.status}] {again.text} (run {again.run_id}, no model call)")
        print(f"resumed hello: {len(state.transcript)} messages in the transcript")
        print(f"events in the log: {await store.stream_version('session/hello')}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, Path(tmp) / "powertrio.sqlite")
