"""A long-lived agent: its context stays within budget, and nothing is forgotten.

Runs offline with a deterministic stand-in model:

    python examples/11_long_lived_agent.py

A site keeper gets one report a day for 40 days. Its model sees a *projection* of the
conversation: the system prompt, a summary of older days and the recent ones, kept under
``ContextPolicy.window - reserve`` estimated tokens. Each summary is a logged model call
(``ContextCompacted`` in the session's stream): the process stops on day 20 and the
restarted session folds the summaries back from the log without asking for them again.
Then the agent answers a question about day 2, long out of its view, with the ``recall``
tool (full-text search over the whole log), and a new session of the same agent finds
what the first one put in its memory board (``remember``/``recall_memory``). Finally the
session is replayed against the log: no model is called.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import trio

from actors import (
    AgentSpec,
    ContextPolicy,
    estimate_tokens,
    memory_tools,
    replay_session,
    spawn_agent,
)
from actors.events import ContextCompacted
from protocols import LLMRequest, LLMResponse, SystemMessage, ToolCall, ToolResultMessage
from protocols.codec import decode_record
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

POLICY = ContextPolicy(window=1600, reserve=300)
KEEPER = AgentSpec(
    name="keeper",
    system_prompt="You keep the site log. Answer in one line.",
    tools=memory_tools("memory.keeper"),
    context=POLICY,
)
SUMMARISE = "You compact a long conversation"  # how the summariser's request begins


def call(name: str, **arguments: object) -> LLMResponse:
    return LLMResponse(
        tool_calls=[ToolCall(id=f"{name}-1", name=name, arguments=json.dumps(arguments))]
    )


def model(request: LLMRequest) -> LLMResponse:
    """A stand-in for a real model, deterministic."""
    first, last = request.messages[0], request.messages[-1]
    if isinstance(first, SystemMessage) and first.content.startswith(SUMMARISE):
        days = [
            line.split()[2].rstrip(":")
            for line in last.text.splitlines()
            if line.startswith("user: Day")
        ]
        return LLMResponse(content=f"Daily reports of days {days[0]} to {days[-1]}; all routine.")
    if isinstance(last, ToolResultMessage):
        found = json.loads(last.content)
        if found.get("results"):
            hit = found["results"][0]
            where = f"log version {hit['version']}" if "excerpt" in hit else hit["author"]
            return LLMResponse(content=f"Found ({where}): {hit.get('excerpt') or hit['text']}")
        return LLMResponse(content="Done.")
    text = last.text
    if text.startswith("Remember"):
        return call("remember", key="backup-key", text=text.split(": ", 1)[1])
    if text.startswith("What did the"):
        return call("recall", query="Day 4 sensor pressure", limit=1)
    if text.startswith("Where"):
        return call("recall_memory", query="backup key")
    return LLMResponse(content=f"Logged day {text.split()[1].rstrip(':')}.")


def report(day: int) -> str:
    return (
        f"Day {day}: sensor {day % 7} pressure {900 + day * 3} hPa, valves checked, "
        "fences walked, generator run for ten minutes, nothing unusual to report."
    )


async def days(db: Path, llm: FunctionLLM, first: int, last: int) -> None:
    async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
        keeper = await spawn_agent(runtime, KEEPER, llm=llm, session_id="keeper-1")
        for day in range(first, last + 1):
            result = await keeper.send(report(day), id=f"day-{day}")
            if day % 10 == 0:
                print(f"day {day}: [{result.status}] {result.text}")
        if first == 1:
            result = await keeper.send("Remember: the backup key is in the blue vault", id="m")
            print(f"remember: [{result.status}] {result.text}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "keeper.sqlite"
        llm = FunctionLLM(model)
        await days(db, llm, 1, 20)  # then the process stops...
        summaries_before = sum(r.messages[0].text.startswith(SUMMARISE) for r in llm.requests)
        await days(db, llm, 21, 40)  # ...and a new one resumes from the log
        async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
            keeper = await spawn_agent(runtime, KEEPER, llm=llm, session_id="keeper-1")
            result = await keeper.send("What did the report of the fourth day say?", id="q1")
            print(f"recall: [{result.status}] {result.text}")
            later = await spawn_agent(runtime, KEEPER, llm=llm, session_id="keeper-2")
            result = await later.send("Where is the backup key?", id="q2")
            print(f"memory (new session): [{result.status}] {result.text}")
            records = await store.read("session/keeper-1")
            for record in records:
                event = decode_record(record)
                if isinstance(event, ContextCompacted):
                    print(
                        f"  v{record.version} compacted messages [0, {event.upto}) "
                        f"({event.tokens_before} tokens > {POLICY.budget}): {event.summary}"
                    )
            replayed = await replay_session(store, "keeper-1", KEEPER)
        summaries = [r for r in llm.requests if r.messages[0].text.startswith(SUMMARISE)]
        requests = [r for r in llm.requests if r not in summaries]
        largest = max(sum(estimate_tokens(m) for m in r.messages) for r in requests)
        every = sum(estimate_tokens(m) for m in replayed.state.transcript)
        print(f"summaries asked: {summaries_before} before the restart, {len(summaries)} in all")
        print(f"largest request: {largest} of {POLICY.budget} tokens; the log holds {every}")
        print(f"replayed {replayed.checked} recorded model calls, no model called")


if __name__ == "__main__":
    trio.run(main)
