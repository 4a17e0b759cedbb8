"""Context within budget: one long session with compaction on, on disk.

``context_tokens_max_over_budget`` is the largest estimated request the model was sent
over the session's budget (``ContextPolicy.window - reserve``): the bar is <= 1.0. Its
baseline, from the same run, is ``raw_transcript_tokens_over_budget``: the request the
last turn would have sent with no compaction (the system prompt, every message of the
log and the tools) over the same budget; it grows with the session's age while the
projection stays flat. Token counts are the policy's estimate
(:func:`actors.estimate_tokens`, JSON characters / 4). The model is a zero-latency
function: every third turn calls a tool, and the summariser (the session's own model)
answers with a short summary.

Run it alone with ``python -m actors.bench._context [--quick]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import orjson
import trio

from actors import ContextPolicy, estimate_tokens, spawn_session, tool
from actors._session._context import SUMMARY_INSTRUCTIONS, tools_tokens
from protocols import LLMRequest, LLMResponse, SystemMessage, ToolCall, Usage, UserMessage
from runtime import open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

from .._session._recall import search_history

__all__ = ["context_tokens_max_over_budget"]

_SYSTEM = "You keep the ledger of a long-running project. Answer briefly."
_WINDOW = 8000
_RESERVE = 1000


@tool
def ledger(entry: str) -> str:
    """Write an entry in the project's ledger.

    Args:
        entry: the entry.
    """
    return f"written: {entry}"


def _tokens(request: LLMRequest) -> int:
    return sum(estimate_tokens(m) for m in request.messages) + tools_tokens(request.tools)


def _answer(request: LLMRequest) -> LLMResponse:
    first = request.messages[0]
    if isinstance(first, SystemMessage) and first.content == SUMMARY_INSTRUCTIONS:
        lines = request.messages[-1].text.count("\n") + 1
        return LLMResponse(
            content=f"The project so far: {lines} lines of ledger work, all entries written.",
            usage=Usage(prompt_tokens=_tokens(request), completion_tokens=20),
        )
    last = request.messages[-1]
    if isinstance(last, UserMessage) and "tool" in last.text:
        arguments = orjson.dumps({"entry": last.text[:40]}).decode()
        call = ToolCall(id=f"c{len(request.messages)}", name="ledger", arguments=arguments)
        return LLMResponse(tool_calls=[call])
    return LLMResponse(content=f"Noted: {last.text[:60]}")


def _turn(i: int) -> str:
    kind = "tool" if i % 3 == 0 else "note"
    return f"day {i} {kind}: the measurement of sensor {i % 17} read {i * 7 % 101} " + (
        "with details " * (8 + i % 13)
    )


async def _run(turns: int, directory: Path) -> dict[str, float]:
    policy = ContextPolicy(window=_WINDOW, reserve=_RESERVE)
    llm = FunctionLLM(_answer)
    async with (
        open_sqlite_store(directory / "context.sqlite") as store,
        open_runtime(store=store) as runtime,
    ):
        session = await spawn_session(
            runtime,
            llm=llm,
            tools=[ledger],
            system_prompt=_SYSTEM,
            context=policy,
            session_id="long",
        )
        for i in range(turns):
            await session.send(_turn(i), id=f"t{i}")
        state = await session.state()
        started = time.perf_counter()
        cold = await search_history(store, "long", "sensor 5 measurement")
        recall_cold = time.perf_counter() - started
        started = time.perf_counter()
        await search_history(store, "long", "sensor 5 measurement")
        recall_warm = time.perf_counter() - started
    requests = [r for r in llm.requests if r.messages[0].text != SUMMARY_INSTRUCTIONS]
    tools = requests[-1].tools
    raw = (
        estimate_tokens(SystemMessage(_SYSTEM))
        + sum(estimate_tokens(m) for m in state.transcript)
        + tools_tokens(tools)
    )
    budget = policy.budget
    return {
        "context_tokens_max_over_budget": max(_tokens(r) for r in requests) / budget,
        "raw_transcript_tokens_over_budget": raw / budget,
        "turns": float(turns),
        "compactions": float(len(llm.requests) - len(requests)),
        "recall_hits": float(len(cold)),
        "recall_cold_ms": recall_cold * 1000,
        "recall_warm_ms": recall_warm * 1000,
    }


def context_tokens_max_over_budget(quick: bool) -> dict[str, float]:
    """Run a long session with compaction on and return the figure beside its baseline.

    Args:
        quick: 150 turns instead of 1500.

    Returns:
        ``context_tokens_max_over_budget`` (bar <= 1.0), its baseline
        ``raw_transcript_tokens_over_budget``, and ``turns``, ``compactions``,
        ``recall_hits``, ``recall_cold_ms`` (the first search, which indexes the whole
        stream) and ``recall_warm_ms`` (the next one).
    """
    turns = 150 if quick else 1500
    with tempfile.TemporaryDirectory() as directory:
        return trio.run(_run, turns, Path(directory))


if __name__ == "__main__":
    figures = context_tokens_max_over_budget("--quick" in sys.argv[1:])
    sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
