"""A research app: a planner, three researchers in parallel, a shared board, an approval.

The planner watches the board, schedules a daily wake-up, and spawns three researchers in
one turn; each posts its finding on the board. With their reports the planner asks to
``publish``, a tool that needs a human's approval (given here from Python). Then an
editor writes on the board, which wakes the planner through the watch it made; a day
later its wake-up makes it re-check the board. The app is defined once, at module level
(``PLANNER``, ``model``): ``powertrio replay``, ``replay_session(store, id, PLANNER)`` and
the test kit's ``RuntimeHarness(PLANNER, llm=FunctionLLM(model))`` use it as it is
(see examples/08_research_app_property.py). Runs offline, on SQLite, in virtual time:

    python examples/07_research_app.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import trio
import trio.testing

from actors import (
    AgentSpec,
    RunResult,
    board_tools,
    open_board,
    replay_session,
    spawn_agent,
    tool,
    wakeup_tools,
)
from protocols import (
    LLM,
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

DAY = 86_400.0
BOARD = "research"
SESSION = "planner"
TASK = "Should we open an office in Lisbon?"
TOPICS = ("costs", "hiring", "risks")
published: list[str] = []


@tool(needs_approval=True)
def publish(report: str) -> str:
    """Publish the final report (a human approves each call first).

    Args:
        report: the report's text.
    """
    published.append(report)
    return f"published {len(report)} characters"


RESEARCHER = AgentSpec(
    name="researcher",
    description="researches one topic and posts a finding on the board",
    system_prompt="researcher",
    tools=["board_write"],
)
PLANNER = AgentSpec(
    name="planner",
    system_prompt="planner",
    tools=[*board_tools(BOARD, watch=True), *wakeup_tools(), publish],
    agents=[RESEARCHER],
    max_rounds=6,
)


def _call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=orjson.dumps(arguments).decode())


def model(request: LLMRequest) -> LLMResponse:
    """The app's model logic, deterministic: what the planner and a researcher answer."""
    usage = Usage(prompt_tokens=100, completion_tokens=20)
    system, *conversation = request.messages
    if system.content == "researcher":
        task = conversation[0]
        topic = task.text if isinstance(task, UserMessage) else ""
        if not any(isinstance(m, ToolResultMessage) for m in conversation):
            finding = {"key": f"findings/{topic}", "value": f"{topic}: looks fine"}
            return LLMResponse(tool_calls=[_call("w", "board_write", **finding)], usage=usage)
        return LLMResponse(content=f"{topic}: looks fine", usage=usage)
    turn = sum(isinstance(m, AssistantMessage) for m in conversation)
    called = {c.name for m in conversation if isinstance(m, AssistantMessage) for c in m.tool_calls}
    last = conversation[-1] if conversation else None
    if "spawn_agent" not in called:
        return LLMResponse(
            tool_calls=[
                _call("watch", "board_watch", prefix="findings/"),
                _call(
                    "wake",
                    "schedule_wakeup",
                    action="schedule",
                    delay_seconds=DAY,
                    every_seconds=DAY,
                    note="re-check the board",
                ),
                *(_call(f"r-{t}", "spawn_agent", agent="researcher", task=t) for t in TOPICS),
            ],
            usage=usage,
        )
    if "publish" not in called:
        reports = sorted(
            m.content
            for m in conversation
            if isinstance(m, ToolResultMessage) and m.tool_call_id.startswith("r-")
        )
        report = "report: " + "; ".join(reports)
        return LLMResponse(tool_calls=[_call(f"publish-{turn}", "publish", report=report)])
    if isinstance(last, ToolResultMessage) and last.tool_call_id.startswith("list-"):
        found = orjson.loads(last.content)
        return LLMResponse(content=f"daily check: {found['count']} findings", usage=usage)
    if isinstance(last, UserMessage) and "re-check the board" in last.text:
        listing = _call(f"list-{turn}", "board_list", prefix="findings/")
        return LLMResponse(tool_calls=[listing], usage=usage)
    if isinstance(last, UserMessage):
        return LLMResponse(content="noted the board change", usage=usage)
    return LLMResponse(content="published the report", usage=usage)


async def run_app(path: Path, llm: LLM) -> list[RunResult]:
    """Run the app on the log at ``path``; started again after a crash, it carries on."""
    async with open_sqlite_store(path) as store, open_runtime(store=store, seed=7) as runtime:
        board = await open_board(runtime, BOARD)
        planner = await spawn_agent(runtime, PLANNER, llm=llm, session_id=SESSION)
        state = await planner.state()
        if state.run is not None:  # a previous process stopped mid-run: the log says where
            result = await planner.wait(state.run.started.run_id)
        elif not state.results:
            result = await planner.send(TASK)
        else:
            result = next(iter(state.results.values()))
        for request in result.human_requests:  # publish waits for a human
            await planner.approve(request.request_id, by="editor")
        if await board.get("notes/editor") is None:
            await board.put("findings/editor", "the lease needs a guarantor", author="editor")
            await board.put("notes/editor", "done", author="editor")
        await trio.sleep(DAY + 60)  # a day passes: the wake-up re-checks the board
        return list((await planner.state()).results.values())


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "research.sqlite"
        results = await run_app(path, FunctionLLM(model))
        async with open_sqlite_store(path) as store:  # the same spec, no model, no board
            replayed = await replay_session(store, SESSION, PLANNER)
    for result in results:
        print(f"[{result.status}] {result.text}")
    print(f"published: {published}")
    print(f"the planner ran {len(results)} times on {sum(r.rounds for r in results)} rounds")
    print(
        f"replayed {replayed.total_checked} model answers across {1 + len(replayed.children)}"
        " sessions: no divergence"
    )


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
