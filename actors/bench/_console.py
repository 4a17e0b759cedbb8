"""Console benchmark: the log page of a session of a million events, beside one of 100.

``python -m actors.bench console [--json] [--quick]`` prints:

* ``build_s``: seconds to bulk-append the log through the store (batches of 3,000 events,
  one commit each), and ``events``: how many (1,000,000; 100,000 with ``--quick``).
* ``log_page_ms_1m_events``: the median time of ``GET /sessions/long/log`` (the newest
  page, whole HTML received) from the console served on loopback, beside
  ``log_page_ms_100_events`` (a session of 100 events in the same log: as full a page),
  and the same with a kind filter (``log_page_kind_ms_1m_events``). Bar <= 200.
* ``first_paint_ms_1m_events``: the log page's first paint in headless chromium
  (``performance``'s ``first-contentful-paint``, from the navigation's start; the median
  of 15, the two pages taking turns to go first), beside ``first_paint_ms_100_events``
  and ``first_paint_ms_floor``: a page of one heading, which no server serves
  (chromium's own floor on this machine).
  ``response_end_ms_1m_events`` is when the browser had the whole HTML. Absent
  (``first_paint`` says why) where chromium or its driver is not installed.
* ``trace_page_ms_1000_rounds``: the median time of ``GET /sessions/rounds/trace`` (whole
  HTML received) for a run of 1,000 rounds, each a model call and a tool call
  (``trace_bars``: how many bars it draws), in the same log as the million events.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from actors.events import (
    AssistantRecorded,
    RunFinished,
    RunStarted,
    SessionCreated,
    ToolFinished,
    ToolStarted,
)
from protocols import AssistantMessage, ToolCall, ToolOutcome, Usage
from protocols.codec import default_registry
from runtime import NewEvent, SqliteEventStore, open_sqlite_store
from runtime.bench import Figures

from ._recorded import recorded_run

BATCH = 3000
REPEATS = 15
PAINTS = 15


def _batches(session_id: str, events: int) -> list[list[NewEvent]]:
    """A session's stream of ``events`` events: runs of a question and an answer."""
    encode = default_registry.encode
    created = SessionCreated(session_id=session_id, system_prompt="", max_rounds=10)
    batches: list[list[NewEvent]] = []
    batch = [NewEvent.from_encoded(encode(created))]
    i = 0
    while len(batch) + sum(len(b) for b in batches) + 3 <= events:
        batch.extend(recorded_run(f"run-{i}", i))
        i += 1
        if len(batch) >= BATCH:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


def _rounds(session_id: str, rounds: int) -> list[NewEvent]:
    """A session of one run of ``rounds`` rounds, each a model call and a tool call."""
    run = "run-long"
    events: list[object] = [
        SessionCreated(session_id=session_id, system_prompt="", max_rounds=rounds + 1),
        RunStarted(run_id=run, input="a long task", max_rounds=rounds + 1),
    ]
    for i in range(1, rounds + 1):
        call = ToolCall(id=f"c{i}", name="lookup", arguments=f'{{"i": {i}}}')
        events += [
            AssistantRecorded(
                run_id=run,
                round=i,
                message=AssistantMessage(content=f"step {i}", tool_calls=(call,)),
                usage=Usage(prompt_tokens=100 + i, completion_tokens=10),
                model="m",
                finish_reason="tool_calls",
                request_fingerprint=f"f{i}",
            ),
            ToolStarted(
                run_id=run,
                call_id=call.id,
                name="lookup",
                arguments=call.arguments,
                idempotency_key=f"k{i}",
                crash_policy="retry",
            ),
            ToolFinished(
                run_id=run,
                outcome=ToolOutcome(call_id=call.id, tool_name="lookup", status="ok", content="x"),
            ),
        ]
    events.append(
        RunFinished(run_id=run, status="completed", text="done", rounds=rounds, usage=Usage())
    )
    encode = default_registry.encode
    return [NewEvent.from_encoded(encode(event)) for event in events]


async def _append(store: SqliteEventStore, stream: str, batches: list[list[NewEvent]]) -> int:
    version = 0
    for batch in batches:
        version = (await store.append(stream, batch, version)).version
    return version


async def _measure(path: Path, events: int, figures: Figures) -> None:
    from actors.console import console_app, serve_console  # noqa: PLC0415

    long_batches = _batches("long", events)
    short_batches = _batches("short", 100)
    async with open_sqlite_store(path) as store:
        start = time.perf_counter()
        figures["events"] = await _append(store, "session/long", long_batches)
        figures["build_s"] = round(time.perf_counter() - start, 2)
        await _append(store, "session/short", short_batches)
        await _append(store, "session/rounds", [_rounds("rounds", 1000)])
        # The million events built here are not the console's: let them go, or the
        # collector walks them in the middle of the pages it times.
        del long_batches, short_batches
        gc.collect()
        app = console_app(store)
        async with trio.open_nursery() as nursery:
            url: str = await nursery.start(partial(serve_console, app, port=0))
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                for name, query in (
                    ("log_page_ms_1m_events", "/sessions/long/log"),
                    ("log_page_ms_100_events", "/sessions/short/log"),
                    ("log_page_kind_ms_1m_events", "/sessions/long/log?kind=session.run"),
                ):
                    figures[name] = await _median_get(client, query)
                figures["trace_page_ms_1000_rounds"] = await _median_get(
                    client, "/sessions/rounds/trace"
                )
                bars = (await client.get("/api/sessions/rounds/trace")).json()["bars"]
                figures["trace_bars"] = len(bars)
            paint = await trio.to_thread.run_sync(_first_paints, url)
            figures.update(paint)
            nursery.cancel_scope.cancel()


async def _median_get(client: httpx.AsyncClient, query: str) -> float:
    spent: list[float] = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        response = await client.get(query)
        response.raise_for_status()
        spent.append((time.perf_counter() - start) * 1e3)
    return round(statistics.median(spent), 2)


def _first_paints(url: str) -> dict[str, float | str]:
    """First-contentful-paint of the two log pages in headless chromium, if it runs."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        return {"first_paint": "chromium or chromedriver is not installed"}
    try:
        from selenium import webdriver  # noqa: PLC0415
        from selenium.webdriver.chrome.service import Service  # noqa: PLC0415
    except ImportError:
        return {"first_paint": "selenium is not installed"}
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    script = (
        "const p = performance.getEntriesByName('first-contentful-paint')[0];"
        "const n = performance.getEntriesByType('navigation')[0];"
        "return p ? [p.startTime, n ? n.responseEnd : 0] : null;"
    )
    figures: dict[str, float | str] = {}
    try:
        driver.get(url + "/sessions/short/log")  # the browser's own start-up is not the page's
        pages = {
            "1m_events": url + "/sessions/long/log",
            "100_events": url + "/sessions/short/log",
            "floor": "data:text/html,<h1>powertrio</h1>",
        }
        spent: dict[str, list[float]] = {name: [] for name in pages}

        ends: list[float] = []
        # Interleaved, so a slow spell of the machine hits all three; each console page is
        # measured after another page of the same origin (after the floor's data: page,
        # chromium starts a new renderer, which no page of the console should pay for).
        # The two sessions' pages take turns going first: whichever page follows the
        # other paints later on a loaded machine (that order, not the log, made the 1M
        # page look 24 to 44 ms slower when it always went first).
        pages["warm"] = pages["100_events"]
        for turn in range(PAINTS):
            order = ["1m_events", "100_events"] if turn % 2 == 0 else ["100_events", "1m_events"]
            for name in ["floor", "warm", *order]:
                address = pages[name]
                driver.get(address)
                if name == "warm":
                    continue
                for _ in range(100):
                    value = driver.execute_script(script)
                    if value is not None:
                        spent[name].append(float(value[0]))
                        if name == "1m_events":
                            ends.append(float(value[1]))
                        break
                    time.sleep(0.02)
        for name, values in spent.items():
            figures[f"first_paint_ms_{name}"] = (
                round(statistics.median(values), 1) if values else "not painted"
            )
        if ends:
            figures["response_end_ms_1m_events"] = round(statistics.median(ends), 1)
    finally:
        driver.quit()
    return figures


def run(args: argparse.Namespace) -> Figures:
    """The console's log page on a session of a million events (``--quick``: 100,000)."""
    events = 100_000 if getattr(args, "quick", False) else 1_000_000
    try:
        import actors.console  # noqa: F401, PLC0415
    except ImportError as exc:
        return {"skipped": f"the console extra is not installed ({exc.name})"}
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(_measure, Path(tmp) / "console.sqlite", events, figures)
    return figures
