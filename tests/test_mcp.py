"""MCP tool sources against real servers: a small MCPServer over stdio and streamable HTTP."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import trio

pytest.importorskip("mcp")

from _cli import run_cli
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from actors import AgentSpec, ToolRegistry, replay_session, spawn_session
from actors._mcp._link import render_result
from actors.events import ToolFinished
from actors.lowlevel import run_tool_calls
from actors.mcp import McpServer, McpServerError, McpToolError, mcp_http, mcp_stdio, mcp_tools
from protocols import LLMRequest, LLMResponse, ToolCall, ToolOutcome
from protocols.codec import decode_record
from protocols.errors import AgentSpecError, ConfigError, ToolDefinitionError
from runtime import open_runtime, open_sqlite_store
from runtime.supervision import Backoff
from runtime.testing import (
    FunctionLLM,
    InMemoryEventStore,
)

SERVER = str(Path(__file__).with_name("_mcp_server.py"))
FAST = Backoff(initial=0.01, factor=2.0, maximum=0.2, jitter=0.0)


def stdio_server(**options: object) -> McpServer:
    return mcp_stdio(sys.executable, [SERVER], backoff=FAST, **options)  # type: ignore[arg-type]


def call(name: str, arguments: object = None, call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=orjson.dumps(arguments or {}).decode())


async def run_one(tools: tuple[object, ...], tool_call: ToolCall) -> ToolOutcome:
    registry = ToolRegistry.of(*tools)  # type: ignore[arg-type]
    [outcome] = await run_tool_calls([tool_call], registry, session_id="s1")
    return outcome


async def test_stdio_server_tools_are_listed_with_their_schemas() -> None:
    """Every server tool becomes a Tool whose spec carries the server's JSON Schema."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        by_name = {t.name: t for t in tools}
        assert sorted(by_name) == [
            "add", "die", "env_value", "picture", "pid", "readme", "refuse",
            "refuse_with_env", "shout",
        ]  # fmt: skip
        add = by_name["add"]
        assert add.spec.description == "Add two integers."
        assert {"a", "b"} == set(add.spec.parameters["properties"])  # type: ignore[arg-type]
        assert add.validator.problems({"a": 1, "b": 2}) == ()
        assert add.validator.problems({"a": "x", "b": 2}) != ()


async def test_a_text_result_is_recorded_as_its_text() -> None:
    """A tool answering text gives the model exactly that text."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        outcome = await run_one(tools, call("add", {"a": 19, "b": 23}))
        assert (outcome.status, outcome.content) == ("ok", "42")
        outcome = await run_one(tools, call("shout", {"text": "hi"}))
        assert (outcome.status, outcome.content) == ("ok", "HI")


async def test_an_image_is_recorded_as_a_small_json_description() -> None:
    """The log holds the MIME type, size and a digest of an image, never its bytes."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        outcome = await run_one(tools, call("picture"))
        [block] = orjson.loads(outcome.content)
        assert outcome.status == "ok"
        assert {k: block[k] for k in ("type", "mime_type", "bytes")} == {
            "type": "image",
            "mime_type": "image/png",
            "bytes": 12,
        }
        assert len(block["sha256"]) == 16


async def test_an_embedded_resource_is_recorded_with_its_uri_and_text() -> None:
    """A text resource keeps its URI, MIME type and text."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        outcome = await run_one(tools, call("readme"))
        expected = [
            {
                "type": "resource",
                "uri": "file:///README.md",
                "mime_type": "text/markdown",
                "text": "# hi",
            }
        ]
        assert expected == orjson.loads(outcome.content)


async def test_a_tool_error_reported_by_the_server_reaches_the_model() -> None:
    """``isError`` results become an ``error`` outcome coded ``tool.mcp_error``."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        outcome = await run_one(tools, call("refuse", {"reason": "no way"}))
        assert (outcome.status, outcome.error_code) == ("error", "tool.mcp_error")
        assert "refuse" in outcome.content


async def test_bad_arguments_are_rejected_locally_by_the_servers_schema() -> None:
    """The schema is checked before the call, like a local tool's."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        outcome = await run_one(tools, call("add", {"a": "x"}))
        assert (outcome.status, outcome.error_code) == ("invalid_arguments", "tool.invalid_args")


async def test_a_server_that_dies_mid_call_is_restarted_and_the_next_call_works() -> None:
    """The dying call is a tool error; the connection restarts the server for the next."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server())
        first_pid = (await run_one(tools, call("pid"))).content
        died = await run_one(tools, call("die"))
        assert (died.status, died.error_code) == ("error", "tool.mcp_server")
        assert "McpServerError" in died.content
        after = await run_one(tools, call("add", {"a": 1, "b": 2}))
        assert (after.status, after.content) == ("ok", "3")
        second_pid = (await run_one(tools, call("pid"))).content
        assert first_pid != second_pid


async def test_crash_policy_is_abort_by_default_and_can_be_set_per_tool() -> None:
    """Each MCP tool has a crash policy: the server's default, or its own."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, stdio_server(crash_policies={"pid": "retry"}))
        policies = {t.name: t.spec.crash_policy for t in tools}
        assert policies["add"] == "abort"
        assert policies["pid"] == "retry"


async def test_prefix_and_include_select_and_rename_tools() -> None:
    """``include`` picks server tools by their own names; ``prefix`` renames them."""
    async with open_runtime() as runtime:
        server = stdio_server(name="calc", prefix="calc_", include=["add"], timeout=5.0)
        tools = await mcp_tools(runtime, server)
        assert [t.name for t in tools] == ["calc_add"]
        assert tools[0].spec.timeout == 5.0
        outcome = await run_one(tools, call("calc_add", {"a": 2, "b": 2}))
        assert outcome.content == "4"


async def test_a_session_takes_an_mcp_server_in_its_tools_and_logs_the_results() -> None:
    """``spawn_session(tools=[mcp_stdio(...)])`` offers the tools; results are in the log."""

    def answer(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].role == "tool":
            return LLMResponse(content=f"the sum is {request.messages[-1].content}")
        return LLMResponse(tool_calls=[call("add", {"a": 40, "b": 2})])

    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        llm = FunctionLLM(answer)
        session = await spawn_session(runtime, llm=llm, tools=[stdio_server(name="sums")])
        result = await session.send("add 40 and 2")
        assert (result.status, result.text) == ("completed", "the sum is 42")
        offered = {t.name for t in llm.requests[0].tools}
        assert "add" in offered
    records = await store.read(f"session/{session.id}", 1)
    finished = [e for e in map(decode_record, records) if isinstance(e, ToolFinished)]
    assert [e.outcome.content for e in finished] == ["42"]


async def test_a_dying_server_never_crashes_the_session() -> None:
    """The model reads the error of the call that killed the server and goes on."""
    seen: list[str] = []

    def answer(request: LLMRequest) -> LLMResponse:
        last = request.messages[-1]
        if last.role == "tool":
            seen.append(str(last.content))
            if len(seen) == 1:
                return LLMResponse(tool_calls=[call("add", {"a": 1, "b": 1}, "c2")])
            return LLMResponse(content="done")
        return LLMResponse(tool_calls=[call("die")])

    async with open_runtime() as runtime:
        session = await spawn_session(runtime, llm=FunctionLLM(answer), tools=[stdio_server()])
        result = await session.send("go")
    assert result.status == "completed"
    assert "McpServerError" in seen[0]
    assert seen[1] == "2"


@pytest.fixture
def http_url() -> Iterator[str]:
    """A streamable HTTP MCP server on a free loopback port, for the test's duration."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail("the HTTP MCP server exited at start")
                import time

                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_streamable_http_server_tools_work(http_url: str) -> None:
    """The same tools over streamable HTTP: listed, called, images described."""
    async with open_runtime() as runtime:
        tools = await mcp_tools(runtime, mcp_http(http_url, backoff=FAST))
        assert "add" in {t.name for t in tools}
        outcome = await run_one(tools, call("add", {"a": 3, "b": 4}))
        assert (outcome.status, outcome.content) == ("ok", "7")
        picture = await run_one(tools, call("picture"))
        assert orjson.loads(picture.content)[0]["type"] == "image"


async def test_an_unreachable_server_fails_with_a_typed_error() -> None:
    """A server that never comes up ends ``mcp_tools`` with ``McpServerError``."""
    server = mcp_stdio(
        sys.executable,
        ["-c", "raise SystemExit(3)"],
        name="broken",
        connect_timeout=0.5,
        backoff=FAST,
    )
    async with open_runtime() as runtime:
        with pytest.raises(McpServerError) as info:
            await mcp_tools(runtime, server)
    assert (info.value.server, info.value.code) == ("broken", "tool.mcp_server")


@pytest.mark.parametrize(
    "build",
    [
        lambda: mcp_stdio(""),
        lambda: mcp_http("ftp://example.invalid/mcp"),
        lambda: mcp_stdio("python", crash_policy="maybe"),  # type: ignore[arg-type]
        lambda: mcp_stdio("python", timeout=0),
    ],
    ids=["no-command", "bad-url", "bad-policy", "bad-timeout"],
)
def test_bad_server_options_fail_with_config_error(build: object) -> None:
    """Misconfiguration fails at once, naming the option."""
    with pytest.raises(ConfigError):
        build()  # type: ignore[operator]


def test_default_names_come_from_the_script_or_the_host() -> None:
    """``mcp_stdio(python, [x/tools.py])`` is ``tools``; an HTTP server is its host-port."""
    assert mcp_stdio("python", ["x/tools.py"]).name == "tools"
    assert mcp_http("http://127.0.0.1:8000/mcp").name == "127.0.0.1-8000"


def test_render_result_joins_text_and_describes_everything_else() -> None:
    """The pure rendering: text joined; blobs, links and resources as JSON descriptions."""
    text = CallToolResult(content=[TextContent(text="a"), TextContent(text="b")])
    assert render_result("s", "t", text) == "a\nb"
    mixed = CallToolResult(
        content=[
            TextContent(text="see"),
            ImageContent(data="AAAA", mime_type="image/gif"),
            ResourceLink(uri="file:///x", name="x", mime_type="text/plain"),
            EmbeddedResource(
                resource=TextResourceContents(uri="file:///y", mime_type="text/plain", text="y")
            ),
        ]
    )
    blocks = orjson.loads(render_result("s", "t", mixed))
    assert [b["type"] for b in blocks] == ["text", "image", "resource_link", "resource"]
    assert blocks[1]["bytes"] == 3
    structured = CallToolResult(content=[], structured_content={"n": 1})
    assert render_result("s", "t", structured) == '{"n":1}'
    failed = CallToolResult(content=[TextContent(text="nope")], is_error=True)
    with pytest.raises(McpToolError, match="nope"):
        render_result("s", "t", failed)


async def test_replay_of_a_session_needs_no_server() -> None:
    """The results are in the log: replay with the same tools calls nothing."""

    def answer(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].role == "tool":
            return LLMResponse(content="ok")
        return LLMResponse(tool_calls=[call("shout", {"text": "x"})])

    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        tools = await mcp_tools(runtime, stdio_server(name="replayed"))
        session = await spawn_session(runtime, llm=FunctionLLM(answer), tools=tools)
        assert (await session.send("go")).status == "completed"
    # The runtime is closed: the server process is gone.
    replay = await replay_session(store, session.id, tools=tools)
    assert replay is not None


# --- a replay takes the tool sources a spawn takes --------------------------------------


def _sum_model(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "tool":
        return LLMResponse(content=f"the sum is {request.messages[-1].content}")
    return LLMResponse(tool_calls=[call("add", {"a": 40, "b": 2})])


@pytest.mark.slow
async def test_replay_takes_an_mcp_server_as_spawn_session_does() -> None:
    """``replay_session(tools=[server])`` lists the server's tools and checks every
    recorded request against them; no tool is called."""
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(_sum_model), tools=[stdio_server(name="sums-live")]
        )
        assert (await session.send("add 40 and 2")).text == "the sum is 42"
    replay = await replay_session(store, session.id, tools=[stdio_server(name="sums-replay")])
    assert replay.checked == 2
    narrowed = stdio_server(name="sums-narrow", include=["add"])
    with pytest.raises(Exception, match="tools") as diverged:
        await replay_session(store, session.id, tools=[narrowed])
    assert diverged.value.code == "replay.divergence"  # type: ignore[attr-defined]


def _plain(text: str) -> str:
    return text


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            42,
            "tools holds 42, which is not a tool source: give Tool objects (@tool), MCP "
            "servers (mcp_stdio, mcp_http) or a ToolRegistry",
        ),
        (_plain, "a plain callable: decorate it with @tool to make it a Tool"),
    ],
    ids=["not-a-tool", "undecorated-function"],
)
async def test_spawn_and_replay_say_alike_what_a_tool_source_is(
    item: object, expected: str
) -> None:
    """Both read ``tools=`` with one function: the same typed error, the same words."""
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        with pytest.raises(ToolDefinitionError) as spawned:
            await spawn_session(runtime, llm=FunctionLLM(_sum_model), tools=[item])
    with pytest.raises(ToolDefinitionError) as replayed:
        await replay_session(store, "any", tools=[item])
    assert str(spawned.value) == str(replayed.value)
    assert expected in str(replayed.value)
    assert replayed.value.code == "tool.bad_definition"


# --- a server's environment never shows ------------------------------------------------

TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"
"""Shaped like a GitHub personal access token (``ghp_`` and 36 characters)."""


def _env_model(request: LLMRequest) -> LLMResponse:
    results = [m for m in request.messages if m.role == "tool"]
    if results:
        return LLMResponse(content="I read: " + " | ".join(str(m.content) for m in results))
    return LLMResponse(
        tool_calls=[
            call("env_value", {"name": "GITHUB_TOKEN"}, "c1"),
            call("refuse_with_env", {"name": "GITHUB_TOKEN"}, "c2"),
        ]
    )


def test_a_token_in_a_servers_env_shows_on_no_surface(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """repr, errors, events, logs, the server's stderr, the CLI and the console: the
    token of a server's environment is never shown, its masked form is."""
    pytest.importorskip("starlette", reason="the console extra is not installed")
    from _console import serve

    caplog.set_level(logging.DEBUG)
    server = stdio_server(name="gh", env={"GITHUB_TOKEN": TOKEN, "DEBUG": "1"})
    shown: dict[str, str] = {"repr": repr(server), "str": str(server), "env": repr(server.env)}
    assert "'GITHUB_TOKEN': Secret('**********')" in shown["repr"]
    with pytest.raises(AgentSpecError) as in_spec:
        AgentSpec(name="a", system_prompt="", tools=[server])  # type: ignore[list-item]
    shown["spec error"] = str(in_spec.value)
    with pytest.raises(ToolDefinitionError) as in_registry:
        ToolRegistry.of(server)  # type: ignore[arg-type]
    shown["registry error"] = str(in_registry.value)
    assert all("Secret('**********')" in shown[k] for k in ("spec error", "registry error"))

    db = tmp_path / "log.db"
    seen: list[str] = []

    async def record() -> str:
        async with open_sqlite_store(db) as store, open_runtime(store=store) as runtime:
            session = await spawn_session(
                runtime, llm=FunctionLLM(_env_model), tools=[server], session_id="gh-run"
            )
            result = await session.send("what is the token?")
            seen.append(result.text)
            replayed = await replay_session(store, session.id, tools=[server])
            assert replayed.checked == 2
            return session.id

    session_id = trio.run(record)
    shown["answer"] = seen[0]
    assert "I read: *** | McpToolError" in seen[0] and "refused with ***" in seen[0]
    shown["log file"] = b"".join(p.read_bytes() for p in tmp_path.glob("log.db*")).decode(
        errors="replace"
    )
    shown["log records"] = "\n".join(
        r.getMessage() + (caplog.text if r.exc_info else "") for r in caplog.records
    )
    for command in (("show", session_id), ("log", session_id), ("show", session_id, "--json")):
        done = run_cli(*command, "--db", str(db), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        shown[" ".join(command[::2])] = done.stdout + done.stderr
    assert "refused with ***" in shown["show"]

    async def browse() -> None:
        async with serve(db, writable=False) as console:
            for path in (f"/sessions/{session_id}", f"/sessions/{session_id}/log"):
                shown[path] = (await console.client.get(path)).text
            api = await console.client.get(f"/api/sessions/{session_id}")
            shown["console api"] = api.text

    trio.run(browse)
    shown["stderr"] = capfd.readouterr().err
    assert "refusing with ***" in shown["stderr"]  # the server's own stderr, passed on masked
    leaked = [surface for surface, text in shown.items() if TOKEN in text]
    assert leaked == []
    assert [surface for surface, text in shown.items() if not text] == []


# --- a server that dies while idle ---------------------------------------------------------


def _pid_model(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "tool":
        return LLMResponse(content=str(request.messages[-1].content))
    return LLMResponse(tool_calls=[call("pid")])


class _Heard(logging.Handler):
    """Collects the MCP logger's records holding ``words`` and sets ``event`` at the first.

    Records are emitted in the Trio thread, so a test can wait on the event.
    """

    def __init__(self, words: str) -> None:
        super().__init__(logging.WARNING)
        self.words = words
        self.records: list[logging.LogRecord] = []
        self.event = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.records.append(record)
            self.event.set()

    async def wait(self, seconds: float = 20.0) -> None:
        with trio.fail_after(seconds):
            await self.event.wait()


@contextlib.contextmanager
def heard(words: str) -> Iterator[_Heard]:
    handler = _Heard(words)
    logger = logging.getLogger("powertrio.mcp")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_a_server_killed_while_idle_is_restarted_before_the_next_call() -> None:
    """SIGKILL the idle server: the connection sees the exit, logs it and starts the
    server again; the model's next call (sent while it restarts) waits and succeeds."""
    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(_pid_model), tools=[stdio_server(name="idle")]
        )
        first = await session.send("pid?")
        assert first.status == "completed"
        with heard("the server process exited") as exits:
            os.kill(int(first.text), signal.SIGKILL)
            await exits.wait()
            second = await session.send("pid again?")
        assert second.status == "completed"
        assert second.text.isdigit() and second.text != first.text
    [restart] = exits.records
    assert restart.getMessage().startswith(
        "MCP server 'idle': the server process exited; restarting it in"
    )


async def test_a_crash_looping_server_stops_restarting_until_a_call_needs_it() -> None:
    """More than ``max_restarts`` restarts in the window: an error is logged and the
    connection waits; each later call starts the server once more."""
    server = mcp_stdio(
        sys.executable,
        ["-c", "raise SystemExit(3)"],
        name="looping",
        connect_timeout=0.5,
        backoff=FAST,
        max_restarts=2,
        restart_window=600.0,
    )
    with heard("restarts in") as gave_up:
        async with open_runtime() as runtime:
            with pytest.raises(McpServerError) as info:
                await mcp_tools(runtime, server)
            await gave_up.wait()
    error = gave_up.records[0]
    assert error.levelno == logging.ERROR
    assert error.getMessage().startswith("MCP server 'looping': more than 2 restarts in 600 s")
    assert "not connected after 0.5 s" in str(info.value)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_restarts": -1}, "max_restarts must be an int >= 0, got -1"),
        ({"restart_window": 0}, "restart_window must be > 0 s, got 0"),
    ],
)
def test_bad_restart_limits_fail_with_config_error(
    options: dict[str, object], problem: str
) -> None:
    """The restart limit is checked when the server is described."""
    with pytest.raises(ConfigError) as info:
        mcp_stdio("python", **options)  # type: ignore[arg-type]
    assert str(info.value) == f"MCP server 'python': {problem}"
