"""MCP tool sources against real servers: a small MCPServer over stdio and streamable HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

pytest.importorskip("mcp")

from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from actors import McpServer, ToolRegistry, mcp_http, mcp_stdio, mcp_tools, spawn_session
from actors._mcp import render_result
from actors.events import ToolFinished
from actors.lowlevel import run_tool_calls
from protocols import LLMRequest, LLMResponse, ToolCall, ToolOutcome, decode_record
from protocols.errors import ConfigError, McpServerError, McpToolError
from runtime import Backoff, open_runtime
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
        assert sorted(by_name) == ["add", "die", "picture", "pid", "readme", "refuse", "shout"]
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
        assert {
            k: block[k] for k in ("type", "mime_type", "bytes")
        } == {"type": "image", "mime_type": "image/png", "bytes": 12}
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
        sys.executable, ["-c", "raise SystemExit(3)"], name="broken",
        connect_timeout=0.5, backoff=FAST,
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
    from actors import replay_session

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
