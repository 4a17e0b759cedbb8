"""The web console over HTTP: a real server on loopback (Hypercorn's Trio worker), httpx
as the client. The browser tests are in ``test_console_browser.py``."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import trio

pytest.importorskip("starlette", reason="the console extra is not installed")
pytest.importorskip("hypercorn", reason="the console extra is not installed")

from _app_session import record_app_session
from _console import PAYLOAD, SECRET, copy_log, record_log, serve
from starlette.applications import Starlette
from starlette.routing import Mount

from actors import Price
from actors._reading._sessions import build_tree, summaries
from actors.cli import main
from actors.console import ConsoleTokenRequiredError, check_bind, console_app
from actors.console._static import STATIC_VERSION
from runtime import open_sqlite_store


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console") / "recorded.sqlite"
    trio.run(record_log, path)
    return path


@pytest.fixture
def db(recorded: Path, tmp_path: Path) -> Path:
    return copy_log(recorded, tmp_path / "powertrio.sqlite")


def _inert(html: str) -> None:
    """No markup of the payload survives: only its escaped text."""
    assert "<script>window.__xss" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html


# -- pages ---------------------------------------------------------------------------------


async def test_fleet_lists_every_agent_with_the_cli_usage_fold(db: Path) -> None:
    async with serve(db) as console:
        page = await console.client.get("/")
        fleet = (await console.client.get("/api/fleet")).json()["sessions"]
        cli = {s.session_id: s for s in await summaries(console.store)}
    assert page.status_code == 200
    assert (
        {row["id"] for row in fleet}
        == set(cli)
        == {"demo", "demo.1", "demo.2", "xss", "ask", "deploy"}
    )
    for row in fleet:
        summary = cli[row["id"]]
        assert row["tokens"] == summary.prompt_tokens + summary.completion_tokens
        assert (row["runs"], row["rounds"]) == (summary.runs, summary.rounds)
        assert row["today"] == row["tokens"]  # all recorded today
    assert {r["id"]: r["status"] for r in fleet}["ask"] == "waiting_for_human"
    assert "demo.1" in page.text and "agents and usage from the log" in page.text


async def test_session_page_shows_the_cli_tree_with_rounds_and_tokens(db: Path) -> None:
    async with serve(db) as console:
        page = await console.client.get("/sessions/demo")
        tree = (await console.client.get("/api/sessions/demo")).json()["tree"]
        cli = await build_tree(console.store, "demo", live=True)
    assert page.status_code == 200
    assert tree == cli.to_json()
    for node in cli.nodes.values():
        assert f'id="node-{node.session_id}"' in page.text
        assert f'<span class="tokens">{node.tokens:,}</span>' in page.text
    assert f"{len(cli.nodes)} agents · {cli.total_tokens:,} tokens in all" in page.text


async def test_a_session_prefix_resolves_and_an_unknown_one_is_a_404_with_its_code(
    db: Path,
) -> None:
    async with serve(db) as console:
        assert (await console.client.get("/api/sessions/xs")).json()["session_id"] == "xss"
        missing = await console.client.get("/sessions/nobody")
        api = await console.client.get("/api/sessions/nobody")
    assert missing.status_code == 404 and "store.stream_not_found" in missing.text
    assert api.json()["error"]["code"] == "store.stream_not_found"


# -- security --------------------------------------------------------------------------------


async def test_script_payloads_in_tool_results_and_answers_render_inert(db: Path) -> None:
    async with serve(db) as console:
        session = (await console.client.get("/sessions/xss")).text
        log = (await console.client.get("/sessions/xss/log")).text
        state = (await console.client.get("/sessions/xss/state?at=99")).text
        fleet = (await console.client.get("/")).text
    for html in (session, state):
        _inert(html)
    assert "The page said &lt;script&gt;" in session and "page says: &lt;script&gt;" in session
    # The log shows the raw JSON of each event: the payload is there, escaped.
    assert "<script>window" not in log and "&lt;script&gt;window.__xss=1" in log
    assert "<script>window" not in fleet


async def test_every_page_carries_a_content_security_policy(db: Path) -> None:
    async with serve(db) as console:
        for path in ("/", "/sessions/demo", "/sessions/demo/log", "/usage"):
            response = await console.client.get(path)
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["x-frame-options"] == "DENY"
            assert "<script>" not in response.text  # no inline script: only the file


async def test_with_no_token_only_loopback_names_are_served(db: Path) -> None:
    async with serve(db) as console:
        served = {
            host: (await console.client.get("/", headers={"Host": host})).status_code
            for host in ("127.0.0.1:8321", "localhost", "[::1]:9000", "127.0.0.2")
        }
        rebound = await console.client.get("/", headers={"Host": "evil.example:8321"})
        bare_ipv6 = await console.client.get("/", headers={"Host": "::1"})
    assert set(served.values()) == {200}
    assert rebound.status_code == 403
    assert rebound.text == (
        "forbidden: with no token this console answers only to a loopback address "
        "(127.0.0.1, localhost, [::1]); give it --token to serve other names"
    )
    assert bare_ipv6.status_code == 403  # an IPv6 host must be bracketed: not read as one


async def test_a_post_without_the_csrf_token_is_refused_and_records_nothing(db: Path) -> None:
    async with serve(db) as console:
        before = await console.store.head_position()
        bare = await console.client.post("/sessions/demo/follow-up", data={"text": "hi"})
        wrong = await console.client.post(
            "/sessions/demo/follow-up", data={"text": "hi", "csrf": "guess"}
        )
        fork = await console.client.post("/sessions/demo/fork", data={"at": "3"})
        after = await console.store.head_position()
    for response in (bare, wrong, fork):
        assert response.status_code == 403
        assert response.text == "forbidden: this action needs the console's CSRF token"
    assert after == before


def test_binding_beyond_loopback_needs_a_token() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        check_bind(host, None)
    check_bind("0.0.0.0", "t0ken")
    with pytest.raises(ConsoleTokenRequiredError) as raised:
        check_bind("0.0.0.0", None)
    assert raised.value.code == "config.console_token"
    assert str(raised.value) == (
        "the console would listen on '0.0.0.0', beyond this machine, with no token: anyone "
        "reaching it could read every log and answer human requests; give --token T (or set "
        "POWERTRIO_UI_TOKEN), or bind to 127.0.0.1"
    )


def test_powertrio_ui_refuses_to_start_beyond_loopback_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POWERTRIO_UI_TOKEN", raising=False)
    code = main(["ui", "--db", str(tmp_path / "none.sqlite"), "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error [config.console_token]: the console would listen on '0.0.0.0'" in err


async def test_with_a_token_every_request_needs_it_and_no_page_shows_it(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-9f8e7d6c5b4a"
    async with serve(db, token=token) as console:
        denied = await console.client.get("/")
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"] == "Bearer"
        bearer = await console.client.get(
            "/sessions/demo", headers={"Authorization": f"Bearer {token}"}
        )
        wrong = await console.client.get("/", headers={"Authorization": "Bearer nope"})
        login = await console.client.get(f"/sessions/demo?token={token}", follow_redirects=False)
        cookie = login.cookies["powertrio_ui"]
        by_cookie = await console.client.get(
            "/sessions/demo", headers={"Cookie": f"powertrio_ui={cookie}"}
        )
    assert (bearer.status_code, wrong.status_code) == (200, 401)
    assert login.status_code == 303 and login.headers["location"] == "/sessions/demo"
    assert "httponly" in login.headers["set-cookie"].lower()
    assert "samesite=strict" in login.headers["set-cookie"].lower()
    assert by_cookie.status_code == 200
    assert token not in bearer.text and token not in by_cookie.text


async def test_no_page_renders_an_api_key_from_the_environment(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTRIO_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    async with serve(db) as console:
        pages = [
            (await console.client.get(path)).text
            for path in (
                "/",
                "/usage",
                "/sessions/demo",
                "/sessions/demo/log",
                "/sessions/demo/state?at=5",
                "/sessions/demo/replay",
                "/api/fleet",
            )
        ]
    assert all(SECRET not in page for page in pages)


# -- the log: keyset pages, filters, time travel ---------------------------------------------


async def test_log_pages_walk_the_stream_newest_first_without_gaps(db: Path) -> None:
    async with serve(db) as console:
        length = await console.store.stream_version("session/demo")
        seen: list[int] = []
        query = "/api/sessions/demo/log"
        while True:
            page = (await console.client.get(query)).json()
            seen += [e["version"] for e in page["events"]]
            if page["older"] is None:
                break
            query = f"/api/sessions/demo/log?before={page['older']}"
        small = (await console.client.get("/api/sessions/demo/log?before=4")).json()
    assert seen == list(range(length, 0, -1))
    assert [e["version"] for e in small["events"]] == [3, 2, 1] and small["older"] is None


async def test_log_filters_by_kind_and_by_run(db: Path) -> None:
    async with serve(db) as console:
        tools = (await console.client.get("/api/sessions/xss/log?kind=session.tool")).json()
        runs = (await console.client.get("/api/sessions/demo")).json()["runs"]
        (run,) = runs
        in_run = (await console.client.get(f"/api/sessions/demo/log?run={run['run_id']}")).json()
        missing = await console.client.get("/sessions/demo/log?run=nope")
        bad = await console.client.get("/sessions/demo/log?before=x")
    assert {e["type"] for e in tools["events"]} == {"session.tool_started", "session.tool_finished"}
    versions = [e["version"] for e in in_run["events"]]
    assert versions == list(range(run["last"], run["first"] - 1, -1))
    assert missing.status_code == 404 and "store.stream_not_found" in missing.text
    assert bad.status_code == 400 and "before must be a whole number, got &#39;x&#39;" in bad.text


async def test_state_at_a_version_is_the_fold_up_to_it(db: Path) -> None:
    from actors.console._data import state_at

    async with serve(db) as console:
        early = (await console.client.get("/api/sessions/xss/state?at=2")).json()
        late = (await console.client.get("/api/sessions/xss/state?at=999")).json()
        folded = await state_at(console.store, "xss", 2)
        html = (await console.client.get("/sessions/xss/state?at=3")).text
    assert len(early["messages"]) == len(folded.transcript) + bool(folded.system_prompt)
    assert early["facts"]["run"] != "(idle)" and late["facts"]["run"] == "(idle)"
    assert late["at"] == (await _version(db, "xss"))
    assert "State of" in html and "at version 3" in html


async def _version(db: Path, session_id: str) -> int:
    async with open_sqlite_store(db) as store:
        return await store.stream_version("session/" + session_id)


# -- replay, fork, follow-ups, human requests ------------------------------------------------


async def test_replay_finds_no_divergence_in_an_untouched_log(db: Path) -> None:
    async with serve(db) as console:
        replay = (await console.client.get("/api/sessions/demo/replay")).json()
        html = (await console.client.get("/sessions/demo/replay")).text
    assert (replay["ok"], replay["checked"], replay["divergence"]) == (True, 6, None)
    assert "no divergence: 6 model answers asked for again, identically" in html


async def test_replay_of_a_tampered_log_shows_the_divergence(db: Path) -> None:
    import sqlite3

    from runtime._sqlite._schema import event_checksum

    with sqlite3.connect(db) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM events WHERE stream = 'session/demo' AND version = 2"
        ).fetchall()
        conn.create_function("checksum", 6, event_checksum)
        conn.execute(
            "UPDATE events SET data = ?1, checksum = checksum(stream, version, type, "
            "schema_version, ?1, metadata) WHERE stream = 'session/demo' AND version = 2",
            (bytes(data).replace(b"Plan the launch", b"Plan a <b>party</b>"),),
        )
    async with serve(db) as console:
        replay = (await console.client.get("/api/sessions/demo/replay")).json()
        html = (await console.client.get("/sessions/demo/replay")).text
    assert replay["ok"] is False
    assert (replay["divergence"]["stream"], replay["divergence"]["version"]) == (
        "session/demo",
        3,
    )
    assert '<p class="status failed">diverges</p>' in html
    assert "the transcript the code builds from the log changed" in html


async def test_replay_from_here_takes_the_log_up_to_a_version_as_recorded(db: Path) -> None:
    """The task changed in the log at version 2: replayed from the start or from version
    2 the first answer (version 3) diverges; from the root's last event on, everything
    before is taken as recorded and nothing after it differs."""
    import sqlite3

    from runtime._sqlite._schema import event_checksum

    with sqlite3.connect(db) as conn:
        [(data,)] = conn.execute(
            "SELECT data FROM events WHERE stream = 'session/demo' AND version = 2"
        ).fetchall()
        conn.create_function("checksum", 6, event_checksum)
        conn.execute(
            "UPDATE events SET data = ?1, checksum = checksum(stream, version, type, "
            "schema_version, ?1, metadata) WHERE stream = 'session/demo' AND version = 2",
            (bytes(data).replace(b"Plan the launch", b"Plan a party"),),
        )
        [(end,)] = conn.execute(
            "SELECT max(version) FROM events WHERE stream = 'session/demo'"
        ).fetchall()
    async with serve(db) as console:
        event = (await console.client.get("/sessions/demo/event?v=4")).text
        assert 'id="replay-here" href="/sessions/demo/replay?from=4">replay from here</a>' in event
        whole = (await console.client.get("/api/sessions/demo/replay")).json()
        before = (await console.client.get("/api/sessions/demo/replay?from=2")).json()
        after = (await console.client.get(f"/api/sessions/demo/replay?from={end}")).json()
        page = (await console.client.get(f"/sessions/demo/replay?from={end}")).text
        past = await console.client.get(f"/api/sessions/demo/replay?from={end + 1}")
        negative = await console.client.get("/sessions/demo/replay?from=-1")
    assert (whole["ok"], whole["divergence"]["version"]) == (False, 3)
    assert (before["ok"], before["from"], before["divergence"]["version"]) == (False, 2, 3)
    assert (after["ok"], after["from"], after["divergence"]) == (True, end, None)
    assert f"from version {end}</h1>" in page
    assert '<p class="status completed">no divergence' in page
    assert past.status_code == 400
    assert past.json()["error"]["code"] == "config.invalid"
    assert past.json()["error"]["message"] == (
        f"'session/demo' has events 1 to {end}: replay from one of them (0 from the start), "
        f"not from {end + 1}"
    )
    assert negative.status_code == 400
    assert "not from -1" in negative.text


async def test_a_follow_up_through_the_api_runs_and_the_tree_grows(db: Path) -> None:
    async with serve(db) as console:
        before = (await console.client.get("/api/sessions/demo")).json()["tree"]
        sent = await console.client.post(
            "/api/sessions/demo/follow-up",
            json={"text": "and the budget?"},
            headers={"X-CSRF-Token": await console.csrf()},
        )
        assert sent.status_code == 200, sent.text
        assert sent.json()["note"].startswith("follow-up sent to demo (run fu-")
        await console.until("demo", "running")
        tree = await console.until("demo", "completed")
    assert tree["rounds"] == before["rounds"] + 1
    assert tree["tokens"] > before["tokens"]


async def test_the_stream_sends_the_tree_again_when_it_changes(db: Path) -> None:
    async with serve(db) as console:
        csrf = await console.csrf()
        events: list[str] = []
        async with console.client.stream("GET", "/sessions/demo/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith("event: "):
                    events.append(line)
                    break
            await console.client.post(
                "/api/sessions/demo/follow-up",
                json={"text": "one more"},
                headers={"X-CSRF-Token": csrf},
            )
            data = ""
            with trio.fail_after(20):
                async for line in lines:
                    if line.startswith("event: "):
                        events.append(line)
                        data = ""
                    elif line.startswith("data: "):
                        data += line + "\n"
                    elif not line and len(events) > 1 and _root_done(data, rounds=3):
                        break
    assert events[0] == "event: tree" and "event: tree" in events[1:]


def _root_done(data: str, *, rounds: int) -> bool:
    root = '<li id="node-demo" data-status="completed">'
    return root in data and f'<span class="rounds">{rounds}</span>' in data


async def test_answering_a_human_request_from_the_form_finishes_the_run(db: Path) -> None:
    async with serve(db) as console:
        page = (await console.client.get("/sessions/ask")).text
        (request,) = (await console.client.get("/api/sessions/ask")).json()["requests"]
        assert request["prompt"] == "Before I start: indoors or outdoors?"
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None and 'name="request" value="' + request["request_id"] in page
        answered = await console.client.post(
            "/sessions/ask/answer",
            data={
                "csrf": csrf.group(1),
                "request": request["request_id"],
                "answer": "outdoors",
                "verdict": "reply",
                "back": "ask",
            },
        )
        tree = await console.until("ask", "completed")
        after = (await console.client.get("/api/sessions/ask")).json()
        replay = (await console.client.get("/api/sessions/ask/replay")).json()
    assert answered.status_code == 200  # followed the 303 back to the session page
    assert f"answered {request['request_id']} of ask" in answered.text
    assert after["requests"] == [] and tree["status"] == "completed"
    # The CLI's own session went on with its recorded agent: every answer replays.
    assert (replay["ok"], replay["checked"], replay["divergence"]) == (True, 2, None)


async def _rows(db: Path) -> list[tuple[object, ...]]:
    """Every row of the log, in order."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM events ORDER BY position").fetchall()


@pytest.mark.parametrize(
    ("session", "action", "form"),
    [
        ("app", "answer", {"request": "call-ask", "answer": "INV-7", "verdict": "reply"}),
        ("deploy", "answer", {"request": "call-deploy", "answer": "", "verdict": "approve"}),
        ("deploy", "answer", {"request": "call-deploy", "answer": "no", "verdict": "deny"}),
        ("app", "follow-up", {"text": "and the other invoice?"}),
        ("app", "cancel", {"reason": "not today"}),
    ],
    ids=["reply", "approve", "deny", "follow-up", "cancel"],
)
async def test_the_forms_refuse_an_app_session_and_record_nothing(
    db: Path, session: str, action: str, form: dict[str, str]
) -> None:
    """A session an app made with its own prompt and tools cannot be rebuilt by the
    console of ``powertrio ui``: answered there it would go on with the CLI's prompt and
    tools (the approved ``deploy`` would not even exist). The form says why, with the
    code, nothing is recorded, and the session still replays."""
    async with open_sqlite_store(db) as store:
        await record_app_session(store)
    before = await _rows(db)
    async with serve(db) as console:
        csrf = await console.csrf()
        page = await console.client.post(
            f"/sessions/{session}/{action}", data={"csrf": csrf, **form}
        )
        api = await console.client.post(
            f"/api/sessions/{session}/{action}", json=form, headers={"X-CSRF-Token": csrf}
        )
        replay = (await console.client.get(f"/api/sessions/{session}/replay")).json()
    own = {
        "app": "system prompt &#39;You are the billing desk agent. Look every invoice up "
        "befor…&#39;; tools ask_human, lookup_invoice",
        "deploy": "no system prompt; tools deploy",
    }
    assert (
        f"[session.foreign_agent] session &#39;{session}&#39; runs an agent of its own "
        f"({own[session]}), which the console cannot rebuild"
    ) in page.text
    assert api.status_code == 409
    assert api.json()["error"]["code"] == "session.foreign_agent"
    assert "Act on the session in the process that runs it" in api.json()["error"]["message"]
    assert await _rows(db) == before
    assert (replay["ok"], replay["divergence"]) == (True, None)


async def test_a_wrong_request_id_comes_back_as_a_flash_with_its_code(db: Path) -> None:
    async with serve(db) as console:
        csrf = await console.csrf()
        answered = await console.client.post(
            "/sessions/ask/answer",
            data={"csrf": csrf, "request": "nope", "answer": "x", "verdict": "reply"},
        )
        cancel = await console.client.post(
            "/api/sessions/demo/cancel", json={}, headers={"X-CSRF-Token": csrf}
        )
    assert "[session.unknown_request] session &#39;ask&#39; is not waiting for request" in (
        answered.text
    )
    assert cancel.status_code == 409
    assert cancel.json()["error"] == {
        "code": "session.no_open_run",
        "message": "session 'demo' has no open run: nothing to cancel",
    }


async def test_fork_from_a_version_makes_a_new_session(db: Path) -> None:
    async with serve(db) as console:
        csrf = await console.csrf()
        forked = await console.client.post(
            "/sessions/xss/fork", data={"csrf": csrf, "at": "4", "as": "branch"}
        )
        inside = await console.client.post(
            "/sessions/xss/fork", data={"csrf": csrf, "at": "3", "as": "other"}
        )
        bad = await console.client.post(
            "/sessions/xss/fork", data={"csrf": csrf, "at": "3", "as": "a.b"}
        )
        length = await console.store.stream_version("session/branch")
    assert forked.status_code == 200
    assert str(forked.url).startswith(console.url + "/sessions/branch")
    assert "forked xss at version 4 as branch" in forked.text
    assert length == 4
    assert "[config.invalid] version 3 of &#39;session/xss&#39; is inside one decision" in (
        inside.text
    )
    assert "[config.invalid] a session id has no &#39;/&#39; or &#39;.&#39;" in bad.text


async def test_a_read_only_console_has_no_forms_and_refuses_actions(db: Path) -> None:
    async with serve(db, writable=False) as console:
        page = (await console.client.get("/sessions/ask")).text
        refused = await console.client.post(
            "/api/sessions/demo/follow-up",
            json={"text": "hi"},
            headers={"X-CSRF-Token": await console.csrf()},
        )
    assert '<form method="post"' not in page and "indoors or outdoors?" in page
    assert refused.status_code == 409
    assert refused.text == "this console is read-only: no operator drives its sessions"


# -- usage, mounting -------------------------------------------------------------------------


async def test_usage_per_agent_per_day_as_svg_with_cost(db: Path) -> None:
    prices = {"payload-model": Price(prompt=1.0, completion=2.0)}
    async with serve(db, prices=prices) as console:
        html = (await console.client.get("/usage")).text
        usage = (await console.client.get("/api/usage")).json()
        cli = {s.session_id: s for s in await summaries(console.store)}
    (day,) = usage["days"]
    totals = {a["id"]: a["total"] for a in usage["agents"]}
    assert totals == {
        sid: s.prompt_tokens + s.completion_tokens for sid, s in cli.items() if s.rounds
    }
    # Per agent, then per session tree and per fleet agent.
    assert html.count('<figure class="chart">') == 4 and "cost per day (USD)" in html
    # xss: 2 answers of 40 + 9 tokens at $1 and $2 per million.
    assert f"xss · {day}: $0.0001" in html


async def test_the_console_mounts_under_a_prefix(db: Path) -> None:
    import httpx

    async with open_sqlite_store(db) as store:
        app = Starlette(routes=[Mount("/console", app=console_app(store))])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            page = (await client.get("/console/sessions/demo")).text
            css = await client.get("/console/static/console.css")
    assert f'href="/console/static/console.css?v={STATIC_VERSION}"' in page
    assert 'data-feed="/console/sessions/demo/stream"' in page
    assert css.status_code == 200
    # Named by their hash, the script and style sheet are kept for good: a page's first
    # paint does not wait for the style sheet again.
    assert css.headers["cache-control"] == "public, max-age=31536000, immutable"
    _ = PAYLOAD


async def test_the_fleet_shows_each_agent_s_next_wake_up_from_its_timer_events(
    db: Path,
) -> None:
    import time

    from protocols.codec import default_registry
    from runtime import NewEvent
    from runtime.timers import TimerCancelled, TimerScheduled

    now = time.time()
    events = [
        TimerScheduled(timer_id="t-late", due_at=now + 7200, note="later"),
        TimerScheduled(timer_id="t-soon", due_at=now + 1800, note="soon"),
        TimerCancelled(timer_id="t-soon", reason="not needed"),
    ]
    async with serve(db) as console:
        first = {
            r["id"]: r["wake_up"]
            for r in (await console.client.get("/api/fleet")).json()["sessions"]
        }
        version = await console.store.stream_version("session/xss")
        encoded = [NewEvent.from_encoded(default_registry.encode(e)) for e in events]
        await console.store.append("session/xss", encoded, version)
        rows = (await console.client.get("/api/fleet")).json()["sessions"]
        page = (await console.client.get("/")).text
    assert set(first.values()) == {""}
    wake_up = {r["id"]: r["wake_up"] for r in rows}
    assert wake_up["xss"] in {"in 1h", "in 59m"}  # the cancelled earlier one is gone
    assert wake_up["demo"] == "" and "<th>next wake-up</th>" in page


async def test_cancel_from_the_console_ends_the_open_run_without_asking_a_model(
    db: Path,
) -> None:
    async with serve(db) as console:
        cancelled = await console.client.post(
            "/api/sessions/ask/cancel",
            json={"reason": "not today"},
            headers={"X-CSRF-Token": await console.csrf()},
        )
        tree = await console.until("ask", "cancelled")
        log = (await console.client.get("/api/sessions/ask/log")).json()["events"]
    assert cancelled.json()["note"].startswith("cancelled run run_")
    assert tree["rounds"] == 1  # no model was asked again
    assert [e["type"] for e in log[:3]] == [
        "session.run_finished",
        "session.cancel_requested",
        "session.human_requested",
    ]
    assert orjson.loads(log[1]["data"])["reason"] == "not today"


def test_powertrio_ui_serves_the_log_until_it_is_stopped(db: Path) -> None:
    """The command itself: ``powertrio ui --port 0 --json`` prints its address, serves the
    fleet, and stops on SIGINT with exit code 130 (Ctrl-C)."""
    import json
    import os
    import signal
    import subprocess
    import sys

    import httpx

    root = Path(__file__).resolve().parent.parent
    env = os.environ | {"PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "actors.cli", "--db", str(db), "ui", "--port", "0"]
    with subprocess.Popen(
        [*command, "--json", "--demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        try:
            assert process.stdout is not None
            started = json.loads(process.stdout.readline())
            assert started["url"].startswith("http://127.0.0.1:")
            fleet = httpx.get(started["url"] + "api/fleet", timeout=30).json()
        finally:
            process.send_signal(signal.SIGINT)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()  # a failure, not a test run that never ends
                raise
    assert {row["id"] for row in fleet["sessions"]} >= {"demo", "xss", "ask"}
    assert code == 130


async def test_a_log_page_links_to_its_neighbours_and_the_state_page_forks(db: Path) -> None:
    from runtime import NewEvent

    # A longer stream: three of its events again, 60 more (a page is 50).
    async with open_sqlite_store(db) as store:
        records = await store.read("session/xss", 2, limit=3)
        version = await store.stream_version("session/xss")
        for _ in range(20):
            again = [
                NewEvent(type=r.type, schema_version=r.schema_version, data=r.data) for r in records
            ]
            version = (await store.append("session/xss", again, version)).version
    async with serve(db) as console:
        newest = (await console.client.get("/sessions/xss/log")).text
        older_query = re.search(r'<a id="older" href="\?([^"]+)"', newest)
        assert older_query is not None
        older = (await console.client.get("/sessions/xss/log?" + older_query.group(1))).text
        newer_query = re.search(r'<a href="\?([^"]+)">← newer</a>', older)
        assert newer_query is not None
        back = (await console.client.get("/sessions/xss/log?" + newer_query.group(1))).text
        state = (await console.client.get("/sessions/xss/state?at=4")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', state)
        assert csrf is not None and "Fork a new session from version 4" in state
        forked = await console.client.post(
            "/sessions/xss/fork", data={"csrf": csrf.group(1), "at": "4", "as": "from-state"}
        )
    assert older_query.group(1) == f"before={version - 49}"
    assert f"<td>{version - 50}</td>" in older and f"<td>{version}</td>" not in older
    assert f"<td>{version}</td>" in back and f"<td>{version - 50}</td>" not in back
    assert "forked xss at version 4 as from-state" in forked.text


async def test_the_fleet_page_answers_before_a_long_log_is_folded_and_catches_up(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors.console import _app
    from runtime import NewEvent

    async with open_sqlite_store(db) as store:
        records = await store.read("session/xss", 2, limit=3)
        version = await store.stream_version("session/xss")
        again = [
            NewEvent(type=r.type, schema_version=r.schema_version, data=r.data) for r in records
        ]
        version = (await store.append("session/xss", again * 1500, version)).version
    monkeypatch.setattr(_app, "FOLD_BUDGET_SECONDS", 0.0)  # one page of the log a load
    async with serve(db) as console:
        first = await console.client.get("/")
        loads = 1
        while True:
            fleet = (await console.client.get("/api/fleet")).json()
            loads += 1
            if fleet["position"] == fleet["head"]:
                break
        cli = {s.session_id: s for s in await summaries(console.store)}
    assert "still folding the log: 2,000 of" in first.text
    assert loads == 3  # 4,5xx events: three pages of 2,000
    tokens = {row["id"]: row["tokens"] for row in fleet["sessions"]}
    assert tokens == {sid: s.prompt_tokens + s.completion_tokens for sid, s in cli.items()}


@pytest.mark.parametrize(
    ("price", "message"),
    [
        ("m=1", "--price takes MODEL=PROMPT,COMPLETION in USD per million tokens, got 'm=1'"),
        ("=1,2", "--price needs a model name before '=', got '=1,2'"),
    ],
)
def test_a_bad_price_is_refused_with_what_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], price: str, message: str
) -> None:
    code = main(["ui", "--db", str(tmp_path / "none.sqlite"), "--price", price])
    assert code == 2
    assert f"error [config.invalid]: {message}" in capsys.readouterr().err


async def test_bad_actions_are_refused_with_their_messages(db: Path) -> None:
    async with serve(db) as console:
        headers = {"X-CSRF-Token": await console.csrf()}
        before = await console.store.head_position()
        post = console.client.post
        empty = await post("/api/sessions/demo/follow-up", json={"text": " "}, headers=headers)
        verdict = await post(
            "/api/sessions/ask/answer",
            json={"request": "c2-ask", "verdict": "maybe"},
            headers=headers,
        )
        fork = await post("/api/sessions/demo/fork", json={"at": "0"}, headers=headers)
        unknown = await post("/api/sessions/demo/explode", json={}, headers=headers)
    assert [r.status_code for r in (empty, verdict, fork)] == [409, 409, 409]
    assert empty.json()["error"] == {
        "code": "config.invalid",
        "message": "the follow-up is empty: write something for the model",
    }
    assert verdict.json()["error"]["message"] == (
        "verdict must be reply, approve or deny, got 'maybe'"
    )
    assert fork.json()["error"]["message"] == (
        "fork needs a version of at least 1 (the last event to keep)"
    )
    assert (unknown.status_code, unknown.text) == (404, "no such action")
    async with open_sqlite_store(db) as store:
        assert await store.head_position() == before


async def test_the_console_reads_a_postgresql_log_too(postgres_server: object) -> None:
    import _postgres
    import httpx
    from _console import record_into

    from runtime.postgres import open_postgres_store

    schema = _postgres.fresh_schema()
    try:
        async with open_postgres_store(postgres_server.dsn(), schema=schema) as store:  # type: ignore[attr-defined]
            await record_into(store)
            cli = await build_tree(store, "demo", live=True)  # type: ignore[arg-type]
            transport = httpx.ASGITransport(app=console_app(store))
            local = "http://127.0.0.1"
            async with httpx.AsyncClient(transport=transport, base_url=local) as client:
                fleet = (await client.get("/api/fleet")).json()["sessions"]
                tree = (await client.get("/api/sessions/demo")).json()["tree"]
                log = (await client.get("/api/sessions/xss/log")).json()
                replay = (await client.get("/api/sessions/demo/replay")).json()
                page = (await client.get("/sessions/xss")).text
    finally:
        await _postgres.drop_schema(postgres_server, schema)  # type: ignore[arg-type]
    assert {r["id"] for r in fleet} == {"demo", "demo.1", "demo.2", "xss", "ask", "deploy"}
    assert tree == cli.to_json()
    assert [e["version"] for e in log["events"]][-1] == 1
    assert replay["ok"] is True
    _inert(page)


async def test_a_whole_session_id_resolves_without_listing_the_log(db: Path) -> None:
    """A page names its session by its whole id: one look at the stream's head, not the
    listing of every stream under the prefix (which, on PostgreSQL, aggregates all the
    events of a long session); a prefix still needs the listing."""
    from actors._reading._log import resolve_session

    class NoListing:
        def __init__(self, store: object) -> None:
            self.store = store

        def __getattr__(self, name: str) -> object:
            return getattr(self.store, name)

        async def streams(self, prefix: str = "") -> list[object]:
            raise AssertionError(f"listed {prefix!r}")

    async with open_sqlite_store(db) as store:
        unlisted = NoListing(store)
        found = await resolve_session(unlisted, "demo")  # type: ignore[arg-type]
        with pytest.raises(AssertionError, match="listed 'session/dep'"):
            await resolve_session(unlisted, "dep")  # type: ignore[arg-type]
        assert await resolve_session(store, "dep") == "deploy"
    assert found == "demo"


# -- what the pages showed wrong --------------------------------------------------------------


_LONG_NAMES = [f"research-{k}.{k + 100}" for k in range(1, 7)] + ["MONITORING-WWW-7"]
"""Agents whose ids fill a legend, as many as a chart names (the rest is "other")."""


def test_the_chart_legend_is_a_list_the_browser_wraps() -> None:
    """The legend's labels are items of a wrapping list under the chart, not text at
    fixed places in the picture (where a long id ran into the next one)."""
    from actors.console._chart import stacked_bars

    svg = str(stacked_bars("tokens per day", ["2026-11-27"], {n: [1.0] for n in _LONG_NAMES}))
    legend = re.search(r'<ul class="legend">(.*?)</ul>', svg, re.S)
    assert legend is not None
    items = re.findall(r"<li>.*?</svg> ([^<]*)</li>", legend.group(1))
    assert items == _LONG_NAMES
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert not [t for t in texts if t in _LONG_NAMES]


async def test_sessions_sort_in_natural_order(tmp_path: Path) -> None:
    """``watch-2`` before ``watch-10``, on the fleet page and in its JSON."""
    from actors import spawn_session
    from protocols import LLMResponse
    from runtime import open_runtime
    from runtime.testing import FunctionLLM

    db = tmp_path / "watch.sqlite"
    async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
        for n in (1, 10, 2, 11, 3):
            llm = FunctionLLM(lambda request: LLMResponse(content="ok"))
            session = await spawn_session(runtime, llm=llm, session_id=f"watch-{n}")
            assert (await session.send("look")).status == "completed"
    async with serve(db) as console:
        rows = (await console.client.get("/api/fleet")).json()["sessions"]
        html = (await console.client.get("/")).text
    ids = ["watch-1", "watch-2", "watch-3", "watch-10", "watch-11"]
    assert [r["id"] for r in rows] == ids
    shown = re.findall(r'<td><a href="/sessions/[^"]*">(watch-\d+)</a></td>', html)
    assert shown == ids


async def test_cancel_shows_only_while_a_run_is_open(db: Path) -> None:
    """A completed session has no run to cancel; a session waiting for a human has."""
    async with serve(db) as console:
        completed = (await console.client.get("/sessions/demo")).text
        waiting = (await console.client.get("/sessions/ask")).text
    assert "Cancel the open run" not in completed
    assert "Cancel the open run" in waiting


async def test_a_live_stream_says_when_the_store_is_lost_and_when_it_is_back(db: Path) -> None:
    """The store cannot be reached: the stream says ``offline`` with the store's error,
    and ``online`` (then the change) once its watcher reaches it again."""
    from collections.abc import AsyncGenerator
    from functools import partial

    import httpx

    from actors.console import serve_console
    from protocols.errors import StoreUnavailableError

    class Flaky:
        """The log, whose watcher cannot reach it the first time."""

        def __init__(self, inner: object) -> None:
            self.inner = inner
            self.failed = False

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        async def changes(self) -> AsyncGenerator[int, None]:
            if not self.failed:
                self.failed = True
                raise StoreUnavailableError("db.example:5432", "lost", "the server went away")
            async for head in self.inner.changes():  # type: ignore[attr-defined]
                yield head

    events: list[tuple[str, str]] = []
    async with open_sqlite_store(db) as store, trio.open_nursery() as nursery:
        app = console_app(Flaky(store))  # type: ignore[arg-type]
        url = await nursery.start(partial(serve_console, app, port=0))
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            client.stream("GET", "/changes") as stream,
        ):
            kind = ""
            with trio.fail_after(20):
                async for line in stream.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: ") and kind != "beat":
                        events.append((kind, line[len("data: ") :]))
                        if kind == "online":
                            break
        nursery.cancel_scope.cancel()
    offline, online = events
    assert offline[0] == "offline"
    assert offline[1].startswith("[store.unavailable] ") and "the server went away" in offline[1]
    assert online[0] == "online"
