"""The web console in a real browser: Debian's chromium, headless, driven by selenium.

Skipped, with the reason, where chromium or its driver is missing or cannot start;
``.ci/run`` installs both. Screenshots go to ``test-artifacts/console/`` (git-ignored).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
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


DOCS = Path(__file__).resolve().parent.parent / "docs"
"""The browser tests' screenshots of the newer views are the docs' pictures."""

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
        await _in_browser(lambda: browser.save_screenshot(str(DOCS / "console-trace.png")))
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
        await _in_browser(lambda: browser.save_screenshot(str(DOCS / "console-replay.png")))


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
            await _in_browser(lambda: browser.save_screenshot(str(DOCS / "console-fleet.png")))
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
            await _in_browser(lambda: browser.save_screenshot(str(DOCS / "console-usage.png")))
