"""The trace view: a run's events as nested bars on one time axis, from the log alone."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest
import trio

pytest.importorskip("starlette", reason="the console extra is not installed")

from _console import serve
from _console_trace import TRACE_PAYLOAD, record_trace_log

from actors import Price
from actors.console._trace import TraceEvent, trace_bars
from actors.console._trace_view import event_fields, summary
from actors.events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    HumanAnswered,
    HumanRequested,
    RunFinished,
    RunStarted,
    ToolFinished,
    ToolStarted,
)
from protocols import AssistantMessage, ToolCall, ToolOutcome, Usage
from protocols.codec import encode
from runtime.timers import TimerScheduled

RUN = "run-1"


def _assistant(round_: int, usage: Usage) -> AssistantRecorded:
    return AssistantRecorded(
        run_id=RUN,
        round=round_,
        message=AssistantMessage(content="..."),
        usage=usage,
        model="m-1",
        finish_reason="tool_calls",
        request_fingerprint="f",
    )


def _events(*, answered: bool) -> list[TraceEvent]:
    """Root ``r``: round 1 calls a tool and schedules a timer, round 2 spawns ``r.1``,
    round 3 asks a person; ``r.1`` runs one round of its own."""
    call = ToolCall(id="c-ask", name="ask_human", arguments="{}")
    root = [
        RunStarted(run_id="run-0", input="an older run", max_rounds=5),
        RunFinished(run_id="run-0", status="completed", text="", rounds=0, usage=Usage()),
        RunStarted(run_id=RUN, input="plan", max_rounds=5),
        _assistant(1, Usage(prompt_tokens=1000, completion_tokens=100)),
        ToolStarted(
            run_id=RUN,
            call_id="c-1",
            name="search",
            arguments="{}",
            idempotency_key="k",
            crash_policy="retry",
        ),
        TimerScheduled(timer_id="t-1", due_at=10_000.0, note="look again"),
        ToolFinished(
            run_id=RUN,
            outcome=ToolOutcome(call_id="c-1", tool_name="search", status="ok", content=""),
        ),
        _assistant(2, Usage(prompt_tokens=2000, completion_tokens=100)),
        ChildSpawned(
            run_id=RUN,
            call_id="c-2",
            child_id="r.1",
            agent="helper",
            task="part",
            lifecycle="ephemeral",
        ),
        ChildFinished(run_id=RUN, child_id="r.1", status="completed", usage=Usage()),
        _assistant(3, Usage(prompt_tokens=3000, completion_tokens=100)),
        HumanRequested(run_id=RUN, request_id="h-1", kind="question", prompt="which?", call=call),
    ]
    if answered:
        root += [
            HumanAnswered(run_id=RUN, request_id="h-1", answer="this", approve=None, by="me"),
            _assistant(4, Usage(prompt_tokens=4000, completion_tokens=100)),
            RunFinished(run_id=RUN, status="completed", text="done", rounds=4, usage=Usage()),
        ]
    times = [0.0, 1.0, 100.0, 101.0, 101.5, 101.6, 103.0, 104.0, 104.5, 110.0, 111.0, 111.2]
    times += [120.0, 121.0, 121.5]
    out = [TraceEvent("r", v, times[v - 1], e) for v, e in enumerate(root, start=1)]
    child = [
        RunStarted(run_id="task", input="part", max_rounds=3),
        AssistantRecorded(
            run_id="task",
            round=1,
            message=AssistantMessage(content="ok"),
            usage=Usage(prompt_tokens=10, completion_tokens=5),
            model="m-2",
            finish_reason="stop",
            request_fingerprint="g",
        ),
        RunFinished(run_id="task", status="completed", text="ok", rounds=1, usage=Usage()),
    ]
    out += [
        TraceEvent("r.1", v, t, e)
        for v, (t, e) in enumerate(zip((105.0, 108.0, 109.0), child, strict=True), 1)
    ]
    return out


def test_the_bars_of_a_finished_run_nest_in_order_with_their_times_tokens_and_cost() -> None:
    prices = {"m-1": Price(prompt=1.0, completion=10.0)}
    trace = trace_bars(_events(answered=True), "r", now=999.0, prices=prices)
    shape = [(b.depth, b.kind, b.label, b.start, b.end, b.status) for b in trace.bars]
    assert shape == [
        (0, "run", "run run-1", 100.0, 121.5, "completed"),
        (1, "round", "round 1", 100.0, 103.0, ""),
        (2, "model", "model m-1", 100.0, 101.0, "tool_calls"),
        (2, "tool", "tool search", 101.5, 103.0, "ok"),
        (2, "timer", "timer look again", 101.6, 999.0, "scheduled"),
        (1, "round", "round 2", 103.0, 110.0, ""),
        (2, "model", "model m-1", 103.0, 104.0, "tool_calls"),
        (2, "child", "sub-agent helper r.1", 104.5, 110.0, "completed"),
        (3, "run", "run task", 105.0, 109.0, "completed"),
        (4, "round", "round 1", 105.0, 109.0, ""),
        (5, "model", "model m-2", 105.0, 108.0, "stop"),
        (1, "round", "round 3", 110.0, 120.0, ""),
        (2, "model", "model m-1", 110.0, 111.0, "tool_calls"),
        (2, "human", "waiting for a human (question)", 111.2, 120.0, "answered"),
        (1, "round", "round 4", 120.0, 121.5, ""),
        (2, "model", "model m-1", 120.0, 121.0, "tool_calls"),
    ]
    assert trace.run_id == RUN and trace.runs == ("run-0", RUN)
    assert (trace.start, trace.end, trace.status, trace.live) == (100.0, 121.5, "completed", False)
    child = next(b for b in trace.bars if b.kind == "child")
    assert (child.child_id, child.session_id, child.version, child.end_version) == (
        "r.1",
        "r",
        9,
        10,
    )
    model = trace.bars[2]
    assert model.usage == Usage(prompt_tokens=1000, completion_tokens=100)
    assert model.cost == pytest.approx(0.001 + 0.001)
    assert model.first_token is None  # not streamed: not recorded
    assert trace.usage.prompt_tokens == 10_000 + 10
    assert trace.cost == pytest.approx(0.010 + 0.004)  # m-2 has no price


def test_a_model_bar_and_its_event_show_the_recorded_time_to_first_token() -> None:
    streamed = attrs.evolve(_assistant(1, Usage()), first_token_s=0.1234)
    events = [
        TraceEvent("r", 1, 100.0, RunStarted(run_id=RUN, input="plan", max_rounds=5)),
        TraceEvent("r", 2, 101.0, streamed),
        TraceEvent("r", 3, 102.0, _assistant(2, Usage())),
    ]
    first, second = (
        b for b in trace_bars(events, "r", run_id=RUN, now=200.0).bars if b.kind == "model"
    )
    assert first.first_token == 0.1234
    assert "first token 0.123 s" in summary(first)
    assert second.first_token is None
    assert "first token not recorded" in summary(second)
    assert ("first_token_s", "0.1234") in event_fields(encode(streamed).data)


def test_a_live_run_s_open_bars_end_now_and_an_older_run_can_be_drawn() -> None:
    trace = trace_bars(_events(answered=False), "r", now=130.0)
    open_bars = [(b.kind, b.end) for b in trace.bars if b.open]
    assert open_bars == [("run", 130.0), ("timer", 130.0), ("round", 130.0), ("human", 130.0)]
    assert trace.live and trace.status == "running" and trace.end == 130.0
    older = trace_bars(_events(answered=False), "r", now=130.0, run_id="run-0")
    assert [(b.kind, b.start, b.end) for b in older.bars] == [("run", 0.0, 1.0)]
    assert not older.live
    assert trace_bars([], "r", now=5.0).bars == ()


def test_a_model_call_in_flight_is_an_open_round_and_model_bar() -> None:
    # Up to the first tool's result (version 7): the session has asked its model again.
    events = [e for e in _events(answered=False) if e.session_id == "r" and e.version <= 7]
    trace = trace_bars(events, "r", now=103.5)
    open_bars = [(b.kind, b.label, b.start, b.end, b.status) for b in trace.bars if b.open]
    assert open_bars == [
        ("run", "run run-1", 100.0, 103.5, "running"),
        ("timer", "timer look again", 101.6, 103.5, "scheduled"),
        ("round", "round 2", 103.0, 103.5, ""),
        ("model", "model (answering)", 103.0, 103.5, "answering"),
    ]
    # Waiting for its tool, it asks no model: no such bar.
    waiting = trace_bars(events[:-1], "r", now=103.5)
    assert [b.label for b in waiting.bars if b.open] == [
        "run run-1",
        "round 1",
        "tool search",
        "timer look again",
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-trace") / "trace.sqlite"
    trio.run(record_trace_log, path)
    return path


async def test_the_trace_page_draws_the_run_and_each_bar_opens_its_event(recorded: Path) -> None:
    async with serve(recorded) as console:
        data = (await console.client.get("/api/sessions/plan/trace")).json()
        kinds = [(b["depth"], b["kind"], b["label"]) for b in data["bars"]]
        assert [k for k in kinds if k[1] != "round" and k[1] != "model"] == [
            (0, "run", f"run {data['run_id']}"),
            (2, "tool", "tool current_time"),
            (2, "tool", "tool schedule_wakeup"),
            (2, "timer", "timer look again" + TRACE_PAYLOAD),
            (2, "tool", "tool spawn_agent"),
            (2, "child", "sub-agent helper plan.1"),
            (3, "run", "run plan.1:task"),
            (5, "tool", "tool current_time"),
            (2, "human", "waiting for a human (question)"),
        ]
        page = await console.client.get("/sessions/plan/trace")
        assert page.status_code == 200
        html = page.text
        assert html.count('<g class="bar') == len(data["bars"])
        assert 'data-refresh=""' in html  # finished: no refresh
        assert TRACE_PAYLOAD not in html  # in the timer's label, and escaped:
        assert "timer look again&lt;script&gt;window.__xss=3&lt;/script&gt;" in html
        human = next(b for b in data["bars"] if b["kind"] == "human")
        event = await console.client.get(f"/sessions/plan/event?v={human['version']}")
        assert "session.human_requested" in event.text
        assert f'href="/sessions/plan/state?at={human["version"]}"' in event.text
        assert 'action="/sessions/plan/fork"' in event.text
        assert f'name="csrf" value="{await console.csrf()}"' in event.text
        assert "&lt;script&gt;window.__xss=3&lt;/script&gt;" in event.text
        assert "<script>window.__xss" not in event.text
        session = await console.client.get("/sessions/plan")
        assert f"/sessions/plan/trace?run={data['run_id']}" in session.text
        missing = await console.client.get("/api/sessions/plan/trace?run=nope")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "store.stream_not_found"
        gone = await console.client.get("/sessions/plan/event?v=9999")
        assert gone.status_code == 404


async def test_a_live_run_s_trace_refreshes_until_the_run_ends(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    await trio.to_thread.run_sync(lambda: trio.run(lambda: record_trace_log(path, answer=False)))
    async with serve(path) as console:
        page = await console.client.get("/sessions/plan/trace")
        refresh = re.search(r'data-refresh="([^"]+)"', page.text)
        assert refresh is not None, "a waiting run's trace refreshes itself"
        chart = await console.client.get(refresh.group(1).replace("&amp;", "&"))
        assert 'data-live="1"' in chart.text and "<html" not in chart.text
        data = (await console.client.get("/api/sessions/plan/trace")).json()
        assert [b["kind"] for b in data["bars"] if b["open"]] == ["run", "timer", "round", "human"]
