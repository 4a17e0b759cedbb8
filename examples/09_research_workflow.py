"""A durable research workflow: three analysts in parallel, their answers merged.

Runs offline and deterministically (a ``FunctionLLM`` stands in for a provider, virtual
time for the clock):

    python examples/09_research_workflow.py

The workflow's steps are events in ``workflow/<id>``. The runtime is stopped after the
analysts answered and started again on the same log: the workflow re-runs from the top,
gets every recorded step back without asking a model again, and finishes the merge.
"""

from __future__ import annotations

import trio
import trio.testing

from actors import AgentSpec
from actors.events import StepCompleted
from actors.workflows import WorkflowContext, start_workflow, workflow
from protocols import LLMRequest, LLMResponse
from protocols.codec import decode_record
from runtime import open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore

ANGLES = ("market", "cost", "risk")
ANALYSTS = {a: AgentSpec(name=f"{a}-analyst", system_prompt=f"Judge the {a}.") for a in ANGLES}
asked: list[str] = []


def model(request: LLMRequest) -> LLMResponse:
    system = next((str(m.content) for m in request.messages if m.role == "system"), "")
    asked.append(system)
    angle = next((a for a in ANGLES if a in system), "?")
    return LLMResponse(content=f"{angle}: looks fine for {request.messages[-1].text!r}")


def merge(answers: list[str]) -> str:
    return " | ".join(sorted(answers))


@workflow
async def research(wf: WorkflowContext, question: str) -> str:
    answers = await wf.parallel(
        *(lambda spec=spec: _ask(wf, spec, question) for spec in ANALYSTS.values())
    )
    await wf.wait_for("editor")  # durable: the process may stop while it waits
    return str(await wf.step(merge, answers))


async def _ask(wf: WorkflowContext, spec: AgentSpec, question: str) -> str:
    return (await wf.run(spec, question)).text


async def main() -> None:
    store = InMemoryEventStore()
    llm = FunctionLLM(model)
    async with open_runtime(store=store, seed=7) as runtime:
        flow = await start_workflow(
            runtime, research, "Should we build it?", workflow_id="study", llm=llm
        )
        await trio.sleep(1)  # the analysts answer; the workflow waits for the editor
    print("model calls before the restart:", len(asked))
    async with open_runtime(store=store, seed=7) as runtime:
        flow = await start_workflow(runtime, research, workflow_id="study", llm=llm)
        await flow.signal("editor", "ok")
        answer = await flow.result()
    print("model calls after the restart:", len(asked))
    events = [decode_record(r) for r in await store.read("workflow/study", 1)]
    steps = sorted((e for e in events if isinstance(e, StepCompleted)), key=lambda e: e.index)
    for step in steps:  # by position: concurrent branches finish in any order
        print(f"  step {step.index:<6} {step.kind:<8} {step.name}")
    print(f"[completed] {answer}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
