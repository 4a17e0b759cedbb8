"""The web console in a real browser: Debian's chromium, headless, driven by selenium.

Skipped, with the reason, where chromium or its driver is missing or cannot start;
``.ci/run`` installs both. Screenshots go to ``test-artifacts/console/`` (git-ignored).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("starlette", reason="the console extra is not installed")
pytest.importorskip("selenium", reason="selenium (the test extra) is not installed")

from _console import PAYLOAD, copy_log, record_log, serve
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from actors.console._static import STATIC_VERSION

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "console"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    except WebDriverException as exc:
        pytest.skip(f"chromium cannot start here: {exc.msg}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-browser") / "recorded.sqlite"
    trio.run(record_log, path)
    return path


@pytest.fixture
def db(recorded: Path, tmp_path: Path) -> Path:
    return copy_log(recorded, tmp_path / "powertrio.sqlite")


async def _in_browser(call: Callable[[], Any]) -> Any:
    """Run a (blocking) selenium call off the Trio thread, so the server keeps serving."""
    return await trio.to_thread.run_sync(call)


async def _until(browser: webdriver.Chrome, script: str, expect: object = None) -> Any:
    """Poll ``script`` in the page until it returns ``expect`` (or, with none given,
    something truthy)."""
    value = None
    with trio.move_on_after(30):
        while True:
            value = await _in_browser(lambda: browser.execute_script(script))
            if value == expect or (expect is None and value):
                return value
            await trio.sleep(0.1)
    text = await _in_browser(lambda: browser.find_element(By.TAG_NAME, "main").text)
    raise AssertionError(f"{script} gave {value!r}, not {expect!r}; the page says:\n{text}")


def _node(session_id: str, what: str) -> str:
    node = f"document.getElementById('node-{session_id}')"
    if what == "status":
        return f"return {node} && {node}.dataset.status;"
    return f"return {node} && {node}.querySelector('.{what}').textContent;"


async def _shot(browser: webdriver.Chrome, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    await _in_browser(lambda: browser.save_screenshot(str(path)))
    return path


async def test_the_tree_changes_without_a_reload_after_a_follow_up_through_the_api(
    browser: webdriver.Chrome, db: Path
) -> None:
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/demo"))
        await _until(browser, _node("demo", "rounds"), "2")
        # A mark on this very page: a reload would lose it.
        await _in_browser(lambda: browser.execute_script("window.__same_page = 42;"))
        # The live stream is connected once it has swapped the tree in (its first event).
        await _until(browser, "return document.getElementById('tree').dataset.updates;")
        await _shot(browser, "session-before-follow-up")
        csrf = await console.csrf()
        sent = await console.client.post(
            "/api/sessions/demo/follow-up",
            json={"text": "and what about the budget?"},
            headers={"X-CSRF-Token": csrf},
        )
        assert sent.status_code == 200, sent.text
        await _until(browser, _node("demo", "rounds"), "3")
        await _until(browser, _node("demo", "status"), "completed")
        assert await _in_browser(lambda: browser.execute_script("return window.__same_page;")) == 42
        await _shot(browser, "session-after-follow-up")


async def test_answering_a_human_request_from_the_page_finishes_the_run(
    browser: webdriver.Chrome, db: Path
) -> None:
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/ask"))
        # The live stream sends the requests once on connecting: wait for that swap.
        await _until(browser, "return document.getElementById('requests-box').dataset.updates;")
        prompt = await _in_browser(
            lambda: browser.find_element(By.CSS_SELECTOR, "#requests .prompt").text
        )
        assert prompt == "Before I start: indoors or outdoors?"
        await _shot(browser, "human-request")

        def answer() -> None:
            form = browser.find_element(By.CSS_SELECTOR, "#requests form")
            form.find_element(By.NAME, "answer").send_keys("outdoors, please")
            form.find_element(By.CSS_SELECTOR, "button[value=reply]").click()

        await _in_browser(answer)
        await _until(browser, _node("ask", "status"), "completed")
        await _until(browser, "return !document.getElementById('requests');")
        # The rest of the page follows too: the run is over, there is nothing to cancel.
        await _until(
            browser,
            "return document.querySelector('#runs tr:last-child .status').textContent;",
            "completed",
        )
        await _until(browser, "return document.querySelector('#cancel-box button') === null;", True)
        flash = await _in_browser(lambda: browser.find_element(By.CSS_SELECTOR, ".flash").text)
        assert flash.startswith("answered ") and flash.endswith(" of ask")
        await _shot(browser, "human-request-answered")
        await console.until("ask", "completed")


async def test_script_payloads_stay_inert_in_the_browser(
    browser: webdriver.Chrome, db: Path
) -> None:
    async with serve(db) as console:
        pages = ("/sessions/xss", "/sessions/xss/log", "/sessions/xss/state?at=99", "/")
        for page in (*pages, "/sessions/xss/trace", "/usage"):
            await _in_browser(lambda page=page: browser.get(console.url + page))
            await _until(browser, "return document.readyState === 'complete';")
            ran = await _in_browser(lambda: browser.execute_script("return window.__xss;"))
            assert ran is None, page
            scripts = await _in_browser(
                lambda: browser.execute_script(
                    "return Array.from(document.scripts).map(s => s.src);"
                )
            )
            assert scripts == [f"{console.url}/static/console.js?v={STATIC_VERSION}"], page
            images = await _in_browser(
                lambda: browser.execute_script("return document.images.length;")
            )
            assert images == 0, page
        # Each bar of the trace opens its event (the payloads are in them): still inert.
        await _in_browser(lambda: browser.get(console.url + "/sessions/xss/trace"))
        bars = await _in_browser(lambda: browser.find_elements(By.CSS_SELECTOR, "#trace g.bar"))
        assert len(bars) >= 5
        for bar in bars:
            await _in_browser(bar.click)
            shown = "return document.getElementById('trace-detail').dataset.shown || '';"
            await _until(browser, shown, await _in_browser(lambda bar=bar: bar.get_attribute("id")))
            detail = await _in_browser(lambda: browser.find_element(By.ID, "trace-detail").text)
            assert await _in_browser(lambda: browser.execute_script("return window.__xss;")) is None
        # The last bar, the final answer: its text shown as text (in JSON, so quotes escaped).
        assert "The page said " + PAYLOAD.replace('"', '\\"') in detail
        await _in_browser(lambda: browser.get(console.url + "/sessions/xss"))
        text = await _in_browser(lambda: browser.find_element(By.TAG_NAME, "main").text)
        assert '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">' in text
        await _shot(browser, "xss-inert")


async def test_the_fleet_and_usage_pages_render(browser: webdriver.Chrome, db: Path) -> None:
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/"))
        rows = await _in_browser(
            lambda: len(browser.find_elements(By.CSS_SELECTOR, "#fleet tr")) - 1
        )
        assert rows == 6
        await _shot(browser, "fleet")
        await _in_browser(lambda: browser.get(console.url + "/usage"))
        bars = await _in_browser(lambda: len(browser.find_elements(By.CSS_SELECTOR, "svg rect")))
        assert bars >= 5
        await _shot(browser, "usage")


async def test_the_fleet_page_shows_the_fleet_file_s_agents(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    """A fleet run by a node (virtual time, the demo model): its agents' table in the
    page, each agent linked to the session of its latest run."""
    import trio.testing
    from _console_fleet import HOUR, START, run_fleet

    from actors.console import LogFleetSource
    from runtime import open_sqlite_store

    path = tmp_path / "fleet.sqlite"
    await trio.to_thread.run_sync(
        lambda: trio.run(run_fleet, path, 13.0, clock=trio.testing.MockClock(autojump_threshold=0))
    )
    async with open_sqlite_store(path) as store:
        source = LogFleetSource(store, now=lambda: START + 13 * HOUR)
        async with serve(path, writable=False, fleet=source) as console:
            await _in_browser(lambda: browser.get(console.url + "/"))
            cells = await _in_browser(
                lambda: [
                    [td.text for td in row.find_elements(By.TAG_NAME, "td")]
                    for row in browser.find_elements(By.CSS_SELECTOR, "#agents tr[data-agent]")
                ]
            )
            await _shot(browser, "fleet-agents")
            await _in_browser(lambda: browser.find_element(By.LINK_TEXT, "pinger").click())
            await _until(browser, "return location.pathname;", "/sessions/pinger-2")
    rows = {row[0]: row[1:] for row in cells}
    assert set(rows) == {"broken", "digest", "pinger"}
    assert rows["pinger"][:2] == ["active", "n1"]
    assert rows["broken"][-2] == "config.invalid×1"  # noqa: RUF001  # then its latest runs


# -- live from the log, whoever writes it ---------------------------------------------------


async def _within(
    browser: webdriver.Chrome, script: str, expect: object, since: float, seconds: float = 1.0
) -> float:
    """Poll ``script`` until it returns ``expect``; how long after ``since`` (monotonic)
    that was, which must be under ``seconds``."""
    with trio.move_on_after(seconds + 5):
        while True:
            if await _in_browser(lambda: browser.execute_script(script)) == expect:
                break
            await trio.sleep(0.02)
    took = time.monotonic() - since
    got = await _in_browser(lambda: browser.execute_script(script))
    assert got == expect, f"{script} gave {got!r}, not {expect!r}"
    assert took < seconds, f"{script} gave {expect!r} only after {took:.2f} s"
    return took


async def _send_through_another_store(db: Path, text: str) -> None:
    """``powertrio send`` as the CLI drives it, through a store of its own on the log
    (another connection to the file, as another process has), until the run ends."""
    import argparse

    from actors.cli._common import CliContext
    from actors.cli._ui import CliOperator
    from runtime import open_sqlite_store

    ctx = CliContext.create(db=str(db), json=False, debug=True)
    args = argparse.Namespace(demo=True, offline=False, max_tokens=None)
    async with open_sqlite_store(db) as other, trio.open_nursery() as nursery:
        note = await CliOperator(ctx, other, args, nursery).follow_up("demo", text)
        assert note.startswith("follow-up sent to demo"), note


_LIVE = "return document.getElementById('live').textContent;"
_RUNS = "return document.querySelectorAll('#runs tr').length - 1;"
_LAST_RUN_STATUS = "return document.querySelector('#runs tr:last-child .status').textContent;"


async def test_a_send_from_another_process_shows_in_the_tree_and_the_runs_within_a_second(
    browser: webdriver.Chrome, db: Path
) -> None:
    """``powertrio send`` from another terminal (the CLI in a thread here: its own store,
    its own connection to the file): the open page follows it without a reload."""
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/demo"))
        await _until(browser, "return document.getElementById('tree').dataset.updates;")
        await _until(browser, _LIVE, "(live)")
        assert await _in_browser(lambda: browser.execute_script(_RUNS)) == 1
        await _in_browser(lambda: browser.execute_script("window.__same_page = 42;"))
        await _send_through_another_store(db, "and the budget?")
        done = time.monotonic()
        await _within(browser, _node("demo", "rounds"), "3", done)
        await _within(browser, _node("demo", "status"), "completed", done)
        await _within(browser, _RUNS, 2, done)
        await _within(browser, _LAST_RUN_STATUS, "completed", done)
        assert await _in_browser(lambda: browser.execute_script("return window.__same_page;")) == 42
        assert await _in_browser(lambda: browser.execute_script(_LIVE)) == "(live)"
        await _shot(browser, "session-after-send-from-another-process")


async def test_a_send_from_a_real_process_shows_on_the_fleet_and_log_pages_within_a_second(
    browser: webdriver.Chrome, db: Path
) -> None:
    """The same from a real ``powertrio send`` process, on the fleet page; then the
    newest page of the log follows another send."""
    from _cli import command, environment

    fleet_runs = (
        "const row = Array.from(document.querySelectorAll('#fleet tr'))"
        ".find(r => r.cells[0] && r.cells[0].textContent === 'demo');"
        "return row && row.cells[2].textContent;"
    )
    newest = "return document.querySelector('#log tr:nth-child(2) code').textContent;"
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/"))
        await _until(browser, _LIVE, "(live)")
        assert await _in_browser(lambda: browser.execute_script(fleet_runs)) == "1"
        sent = await trio.run_process(
            [*command(), "send", "demo", "and the budget?", "--demo", "--db", str(db)],
            cwd=db.parent,
            env=environment(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        done = time.monotonic()
        assert sent.returncode == 0, sent.stderr.decode()
        await _within(browser, fleet_runs, "2", done)
        await _shot(browser, "fleet-after-send-from-another-process")
        await _in_browser(lambda: browser.get(console.url + "/sessions/demo/log"))
        await _until(browser, _LIVE, "(live)")
        assert await _in_browser(lambda: browser.execute_script(newest)) == "session.run_finished"
        await _in_browser(lambda: browser.execute_script("window.__same_page = 42;"))
        await _send_through_another_store(db, "and the food?")
        done = time.monotonic()
        # The follow-up's own events come first: the page moved on to them.
        first = "return document.querySelector('#log tr:nth-child(2) td').textContent;"
        version = (await console.client.get("/api/sessions/demo/log")).json()["version"]
        await _within(browser, first, str(version), done)
        assert await _in_browser(lambda: browser.execute_script("return window.__same_page;")) == 42


async def test_the_page_says_when_it_lost_its_feed(browser: webdriver.Chrome, db: Path) -> None:
    """The console goes away: "(live)" turns into "(offline — retrying)"."""
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/demo"))
        await _until(browser, _LIVE, "(live)")
    await _until(browser, _LIVE, "(offline \u2014 retrying)")
    await _shot(browser, "session-offline")


async def test_a_commit_of_another_postgresql_connection_shows_within_a_second(
    browser: webdriver.Chrome, postgres_server: Any
) -> None:
    """On PostgreSQL: another store's commits (another connection, as another process's
    would be) show on the session page and the fleet page, by the log's ``NOTIFY``."""
    import _postgres
    from _console import record_into

    from actors import spawn_session
    from actors.console import console_app, serve_console
    from protocols import LLMResponse
    from runtime import open_runtime
    from runtime.postgres import open_postgres_store
    from runtime.testing import ScriptedLLM

    schema = _postgres.fresh_schema()
    fleet_row = (
        "return Array.from(document.querySelectorAll('#fleet td:first-child'))"
        ".some(td => td.textContent === 'pg-other');"
    )
    try:
        async with (
            open_postgres_store(postgres_server.dsn(), schema=schema) as shown,
            open_postgres_store(postgres_server.dsn(), schema=schema) as other,
            trio.open_nursery() as nursery,
        ):
            await record_into(shown)
            url = await nursery.start(partial(serve_console, console_app(shown), port=0))
            await _in_browser(lambda: browser.get(url + "/"))
            await _until(browser, _LIVE, "(live)")
            async with open_runtime(store=other) as runtime:
                session = await spawn_session(
                    runtime,
                    llm=ScriptedLLM([LLMResponse(content="one"), LLMResponse(content="two")]),
                    session_id="pg-other",
                )
                assert (await session.send("first")).status == "completed"
                done = time.monotonic()
                await _within(browser, fleet_row, True, done)
                await _in_browser(lambda: browser.get(url + "/sessions/pg-other"))
                await _until(browser, _node("pg-other", "rounds"), "1")
                await _until(browser, _LIVE, "(live)")
                assert (await session.send("second")).status == "completed"
                done = time.monotonic()
                await _within(browser, _node("pg-other", "rounds"), "2", done)
                await _within(browser, _RUNS, 2, done)
                await _shot(browser, "session-postgres-other-connection")
            nursery.cancel_scope.cancel()
    finally:
        await _postgres.drop_schema(postgres_server, schema)


async def test_the_chart_legend_s_labels_do_not_overlap_in_the_browser(
    browser: webdriver.Chrome,
) -> None:
    """Measured by the browser with the console's style sheet: no legend label runs into
    another, and none runs out of the chart."""
    from urllib.parse import quote

    from actors.console._chart import stacked_bars
    from actors.console._static import CONSOLE_CSS

    names = [f"research-{k}.{k + 100}" for k in range(1, 6)]
    names += ["MONITORING-WWW-7", "a-rather-long-agent-name-of-the-fleet"]
    svg = str(stacked_bars("tokens per day", ["2026-11-27"], {n: [1.0] for n in names}))
    page = f"<!doctype html><style>{CONSOLE_CSS}</style><body><main>{svg}</main>"
    await _in_browser(lambda: browser.get("data:text/html;charset=utf-8," + quote(page)))
    boxes, chart = await _in_browser(
        lambda: browser.execute_script(
            "const box = (e) => { const r = e.getBoundingClientRect();"
            " return [r.left, r.top, r.right, r.bottom]; };"
            "const labels = Array.from(document.querySelectorAll('figure text, figure li'))"
            ".filter(e => /research|WWW|fleet/.test(e.textContent)).map(box);"
            "return [labels, box(document.querySelector('figure'))];"
        )
    )
    assert len(boxes) == len(names)
    for i, (left, top, right, bottom) in enumerate(boxes):
        assert chart[0] <= left and right <= chart[2], f"label {i} runs out of the chart"
        for left2, top2, right2, bottom2 in boxes[i + 1 :]:
            apart = right <= left2 or right2 <= left or bottom <= top2 or bottom2 <= top
            assert apart, f"label {i} overlaps another: {boxes}"
    await _shot(browser, "usage-legend")


DOCS = Path(__file__).resolve().parent.parent / "docs"
"""Where ``POWERTRIO_DOCS_SHOTS=1`` puts the screenshots of the newer views: they are the
docs' pictures. Without it they go with the other artifacts, and a test run leaves the
checkout as it was."""


def _picture(name: str) -> str:
    folder = DOCS if os.environ.get("POWERTRIO_DOCS_SHOTS") == "1" else ARTIFACTS
    return str(folder / name)


_BARS = (
    "return Array.from(document.querySelectorAll('#trace g.bar')).map("
    "g => [g.dataset.kind, g.querySelector('text').textContent.split(' · ')[0]]);"
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from _console_trace import record_trace_log

    path = tmp_path_factory.mktemp("console-trace") / "trace.sqlite"
    trio.run(record_trace_log, path)
    return path


async def test_the_trace_of_a_run_draws_its_tool_child_and_human_wait_in_order(
    browser: webdriver.Chrome, traced: Path, tmp_path: Path
) -> None:
    db = copy_log(traced, tmp_path / "trace.sqlite")
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/plan"))
        await _in_browser(lambda: browser.find_element(By.CSS_SELECTOR, "a.trace-link").click())
        await _until(browser, "return location.pathname;", "/sessions/plan/trace")
        bars = await _until(browser, _BARS)
        run = bars[0][1]
        assert run.startswith("run run_")
        assert [b for b in bars if b[0] not in {"round", "model"}] == [
            ["run", run],
            ["tool", "tool current_time"],
            ["tool", "tool schedule_wakeup"],
            ["timer", "timer look again<script>window.__xss=3<…"],
            ["tool", "tool spawn_agent"],
            ["child", "sub-agent helper plan.1"],
            ["run", "run plan.1:task"],
            ["tool", "tool current_time"],
            ["human", "waiting for a human (question)"],
        ]
        # The helper's two rounds nest inside the root's second.
        rounds = [b[1] for b in bars if b[0] == "round"]
        assert rounds == ["round 1", "round 2", "round 1", "round 2", "round 3", "round 4"]
        # Bars go left to right in time: each starts no earlier than the run does.
        xs = await _in_browser(
            lambda: browser.execute_script(
                "return Array.from(document.querySelectorAll('#trace rect.span'))"
                ".map(r => Number(r.getAttribute('x')));"
            )
        )
        assert min(xs) == xs[0]
        human = browser.find_element(By.CSS_SELECTOR, "#trace g.kind-human")
        await _in_browser(human.click)
        shown = "return document.getElementById('trace-detail').dataset.shown || '';"
        await _until(browser, shown, human.get_attribute("id"))
        detail = await _in_browser(lambda: browser.find_element(By.ID, "trace-detail").text)
        assert "session.human_requested" in detail and "state here" in detail
        assert "waiting for a human (question) · answered" in detail
        assert await _in_browser(lambda: browser.execute_script("return window.__xss;")) is None
        await _in_browser(lambda: browser.save_screenshot(_picture("console-trace.png")))
        await _in_browser(lambda: browser.find_element(By.ID, "state-here").click())
        await _until(browser, "return location.pathname;", "/sessions/plan/state")
        await _in_browser(browser.back)
        child = await _in_browser(
            lambda: browser.find_element(By.CSS_SELECTOR, "#trace g.kind-child")
        )
        await _in_browser(child.click)
        await _until(browser, shown, child.get_attribute("id"))
        await _in_browser(lambda: browser.find_element(By.ID, "child-trace").click())
        await _until(browser, "return location.pathname;", "/sessions/plan.1/trace")
        assert (await _until(browser, _BARS))[0] == ["run", "run plan.1:task"]


async def test_a_live_trace_grows_when_the_human_answers(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    from _console_trace import record_trace_log

    db = tmp_path / "live.sqlite"
    await trio.to_thread.run_sync(lambda: trio.run(lambda: record_trace_log(db, answer=False)))
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/plan/trace"))
        await _until(
            browser,
            "return Number(document.getElementById('trace').dataset.updates || 0) > 0;",
            True,
        )
        open_bars = await _in_browser(
            lambda: browser.execute_script(
                "return Array.from(document.querySelectorAll('#trace g.bar.open'))"
                ".map(g => g.dataset.kind);"
            )
        )
        assert open_bars == ["run", "timer", "round", "human"]
        request = (await console.client.get("/api/sessions/plan")).json()["requests"][0]
        sent = await console.client.post(
            "/api/sessions/plan/answer",
            json={"request": request["request_id"], "answer": "Saturday", "verdict": "reply"},
            headers={"X-CSRF-Token": await console.csrf()},
        )
        assert sent.status_code == 200, sent.text
        await _until(browser, "return document.getElementById('trace-summary').dataset.live;", "0")
        kinds = [b[0] for b in await _until(browser, _BARS)]
        assert kinds.count("round") == 6  # the root's four, the helper's two
        await _shot(browser, "trace-live-finished")


async def test_the_replay_diff_reads_side_by_side(browser: webdriver.Chrome, db: Path) -> None:
    from test_console_pictures import tamper_system_prompt

    tamper_system_prompt(db)
    async with serve(db) as console:
        await _in_browser(lambda: browser.get(console.url + "/sessions/demo/replay"))
        cells = await _until(
            browser,
            "return Array.from(document.querySelectorAll('#replay-diff tr.changed td'))"
            ".map(td => td.textContent);",
        )
        assert cells[0].endswith("Answer concisely.")
        assert cells[1].endswith("Answer <b>at length</b>.")
        await _in_browser(lambda: browser.save_screenshot(_picture("console-replay.png")))


async def test_the_fleet_page_shows_each_agent_s_latest_runs_at_a_glance(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    import trio.testing
    from _console_fleet import HOUR, START, run_fleet

    from actors import Price
    from actors.console import LogFleetSource
    from runtime import open_sqlite_store

    path = tmp_path / "fleet.sqlite"
    await trio.to_thread.run_sync(
        lambda: trio.run(run_fleet, path, 13.0, clock=trio.testing.MockClock(autojump_threshold=0))
    )
    async with open_sqlite_store(path) as store:
        source = LogFleetSource(store, now=lambda: START + 13 * HOUR)
        prices = {"": Price(prompt=1.0, completion=1.0)}
        async with serve(path, writable=False, fleet=source, prices=prices) as console:
            await _in_browser(lambda: browser.get(console.url + "/"))
            strip = await _until(
                browser,
                "return Array.from(document.querySelectorAll("
                "'#agents tr[data-agent=pinger] svg.runs rect'))"
                ".map(r => r.getAttribute('class'));",
            )
            assert strip == ["run completed", "run completed"]
            await _in_browser(lambda: browser.save_screenshot(_picture("console-fleet.png")))
            await _in_browser(lambda: browser.get(console.url + "/usage"))
            titles = await _until(
                browser,
                "return Array.from(document.querySelectorAll('section.group-chart h2'))"
                ".map(h => h.textContent);",
            )
            assert titles == [
                "Tokens per tree",
                "Cost per tree",
                "Tokens per fleet agent",
                "Cost per fleet agent",
            ]
            await _in_browser(
                lambda: browser.execute_script(
                    "document.querySelectorAll('section.group-chart')[2].scrollIntoView();"
                )
            )
            await _in_browser(lambda: browser.save_screenshot(_picture("console-usage.png")))
