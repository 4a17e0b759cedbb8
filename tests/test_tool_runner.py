"""run_tool_calls: each kind of tool, limits, timeouts, failures as outcomes, cancellation."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import attrs
import pytest
import trio
import trio.testing
import trio_asyncio
from _depth import examples
from hypothesis import given, settings
from strategies import tool_calls

from actors import ToolContext, ToolRegistry, tool
from actors.lowlevel import open_tool_runner, run_tool_calls
from protocols import ToolOutcome
from protocols._llm import ToolCall
from protocols.errors import ToolArgumentsError, ToolError, ToolInterruptedError
from protocols.jsonschema import validate_json
from protocols.lowlevel import idempotency_key, parse_tool_arguments


@attrs.frozen
class Reading:
    city: str
    celsius: float


@attrs.frozen
class Positive:
    n: int = attrs.field(validator=attrs.validators.gt(0))


@tool
def weather(city: str, days: int = 1) -> Reading:
    """Weather for a city (sync, runs in a thread)."""
    return Reading(city, 20.0 + days)


@tool
async def echo(text: str) -> str:
    """Echo (a Trio tool)."""
    await trio.lowlevel.checkpoint()
    return text


@tool(asyncio=True)
async def aio_double(x: int) -> int:
    """Double (an asyncio tool)."""
    await asyncio.sleep(0)
    return 2 * x


@tool
async def fail(kind: str) -> str:
    """Always raises."""
    if kind == "powertrio":
        raise ToolInterruptedError("fail")
    raise ValueError(f"bad {kind}")


@tool
def who(ctx: ToolContext) -> dict[str, str]:
    """Report the context the runtime stamped."""
    return {
        "call_id": ctx.call_id,
        "tool_name": ctx.tool_name,
        "session_id": ctx.session_id,
        "key": ctx.idempotency_key,
    }


@tool
def unserializable() -> object:
    """Returns something JSON cannot hold."""
    return object()


@tool
def positive(p: Positive) -> int:
    """Schema-valid but rejected by the attrs validator."""
    return p.n


@tool(needs_approval=True)
def delete_all() -> str:
    """Dangerous."""
    return "deleted"


REGISTRY = ToolRegistry.of(
    weather, echo, aio_double, fail, who, unserializable, positive, delete_all
)


def call(name: str, arguments: str = "{}", call_id: str = "c1") -> ToolCall:
    """A tool call as the model would send it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


async def run_one(name: str, arguments: str = "{}", **kwargs: object) -> ToolOutcome:
    """Run a single call against REGISTRY."""
    (outcome,) = await run_tool_calls(
        [call(name, arguments)],
        REGISTRY,
        session_id="s1",
        **kwargs,  # type: ignore[arg-type]
    )
    return outcome


async def test_sync_trio_and_asyncio_tools_in_call_order() -> None:
    """All three kinds run in one round; outcomes come back in call order."""
    calls = [
        call("aio_double", '{"x": 21}', "a"),
        call("weather", '{"city": "Oslo", "days": 2}', "b"),
        call("echo", '{"text": "hi"}', "c"),
    ]
    assert trio_asyncio.current_loop.get() is None
    outcomes = await run_tool_calls(calls, REGISTRY, session_id="s1")
    assert outcomes == [
        ToolOutcome(call_id="a", tool_name="aio_double", status="ok", content="42"),
        ToolOutcome(
            call_id="b", tool_name="weather", status="ok", content='{"city":"Oslo","celsius":22.0}'
        ),
        ToolOutcome(call_id="c", tool_name="echo", status="ok", content="hi"),
    ]


async def test_runner_opens_an_asyncio_loop_only_when_needed() -> None:
    """open_tool_runner owns a trio-asyncio loop only for registries with an asyncio tool."""
    async with open_tool_runner(REGISTRY.subset(["echo"])) as runner:
        assert trio_asyncio.current_loop.get() is None
        outcomes = await runner.run([call("echo", '{"text": "x"}')], session_id="s1")
    assert outcomes[0].content == "x"
    async with open_tool_runner(REGISTRY) as runner:
        assert trio_asyncio.current_loop.get() is not None
        outcomes = await runner.run([call("aio_double", '{"x": 1}')], session_id="s1")
    assert outcomes[0].content == "2"
    assert trio_asyncio.current_loop.get() is None


async def test_concurrency_limit_is_observed(autojump_clock: trio.testing.MockClock) -> None:
    """No more than `limit` calls run at once; the rest wait their turn."""
    running = 0
    peak = 0

    @tool
    async def nap() -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return "ok"

    start = trio.current_time()
    outcomes = await run_tool_calls(
        [call("nap", call_id=str(i)) for i in range(5)],
        ToolRegistry.of(nap),
        session_id="s1",
        limit=2,
    )
    assert [o.status for o in outcomes] == ["ok"] * 5
    assert peak == 2
    assert trio.current_time() - start == 3


@pytest.mark.parametrize("calls", [1, 3])
async def test_a_round_cancelled_before_it_starts_runs_no_tool(calls: int) -> None:
    """A caller already cancelled gets its cancel, and no tool's body runs: not the lone
    call run without a task or a limiter of its own, nor calls that must wait for one."""
    ran: list[str] = []

    @tool
    async def record(text: str) -> str:
        ran.append(text)
        await trio.lowlevel.checkpoint()
        return text

    with trio.CancelScope() as scope:
        scope.cancel()
        await run_tool_calls(
            [call("record", '{"text": "x"}', str(i)) for i in range(calls)],
            ToolRegistry.of(record),
            session_id="s1",
            limit=2,
        )
    assert scope.cancelled_caught
    assert ran == []


async def test_limit_must_be_positive() -> None:
    """A limit below 1 is a programming error, named precisely."""
    with pytest.raises(ValueError, match=r"^limit must be at least 1, got 0$"):
        await run_tool_calls([], REGISTRY, session_id="s1", limit=0)


async def test_timeout_of_an_async_tool(autojump_clock: trio.testing.MockClock) -> None:
    """A tool past its timeout is cancelled and reported as `timeout`; the round goes on."""

    @tool(timeout=1.5)
    async def slow() -> str:
        await trio.sleep(10)
        return "never"

    start = trio.current_time()
    (outcome,) = await run_tool_calls([call("slow")], ToolRegistry.of(slow), session_id="s1")
    assert outcome == ToolOutcome(
        call_id="c1",
        tool_name="slow",
        status="timeout",
        content="tool 'slow' did not finish within 1.5 s",
        error_code="tool.timeout",
    )
    assert trio.current_time() - start == 1.5


async def test_timeout_of_a_thread_tool_tells_the_thread() -> None:
    """A sync tool is abandoned at its timeout; its context says so, so it can stop."""
    stopped = threading.Event()
    seen: list[bool] = []

    @tool(timeout=0.05)
    def spin(ctx: ToolContext) -> str:
        seen.append(ctx.wait_cancelled(5))
        try:
            ctx.check_cancelled()
        finally:
            stopped.set()
        return "late"

    (outcome,) = await run_tool_calls([call("spin")], ToolRegistry.of(spin), session_id="s1")
    assert (outcome.status, outcome.error_code) == ("timeout", "tool.timeout")
    assert await trio.to_thread.run_sync(stopped.wait, 5)
    assert seen == [True]


async def test_exceptions_become_error_outcomes() -> None:
    """A tool that raises yields an `error` outcome naming the exception; nothing propagates."""
    outcome = await run_one("fail", '{"kind": "a"}')
    assert outcome == ToolOutcome(
        call_id="c1",
        tool_name="fail",
        status="error",
        content="ValueError: bad a",
        error_code="tool",
    )
    typed = await run_one("fail", '{"kind": "powertrio"}')
    assert typed.error_code == "tool.interrupted"
    assert typed.content == (
        "ToolInterruptedError: tool 'fail' was interrupted before it finished; its result is "
        "discarded"
    )


async def test_invalid_json_arguments() -> None:
    """Arguments that are not JSON get an `invalid_arguments` outcome with the parse error."""
    outcome = await run_one("echo", '{"text": ')
    assert outcome == ToolOutcome(
        call_id="c1",
        tool_name="echo",
        status="invalid_arguments",
        content="invalid arguments for tool 'echo': $: not valid JSON (unexpected end of data: "
        "line 1 column 10 (char 9))",
        error_code="tool.invalid_args",
    )


async def test_invalid_arguments_list_every_problem_with_its_path() -> None:
    """Schema violations are reported exactly, so the model can correct its call."""
    outcome = await run_one("weather", '{"city": 42, "days": "2", "ctx": {}}')
    assert outcome.status == "invalid_arguments"
    assert outcome.error_code == "tool.invalid_args"
    assert outcome.content == (
        "invalid arguments for tool 'weather': $.city: expected string, got 42; "
        '$.days: expected integer, got "2"; $.ctx: unexpected property (allowed: city, days)'
    )
    not_object = await run_one("echo", "[1]")
    assert not_object.content == "invalid arguments for tool 'echo': $: expected object, got array"


async def test_arguments_rejected_while_converting() -> None:
    """A value the schema allows but the Python type refuses is still an argument error."""
    outcome = await run_one("positive", '{"p": {"n": -1}}')
    assert outcome.status == "invalid_arguments"
    assert outcome.error_code == "tool.invalid_args"
    assert outcome.content == (
        "invalid arguments for tool 'positive': $.p: ValueError: 'n' must be > 0: -1"
    )


async def test_empty_arguments_mean_no_arguments() -> None:
    """Some models send "" for a call without arguments; that is `{}`."""
    outcome = await run_one("weather", "")
    assert outcome.status == "invalid_arguments"
    assert outcome.content == (
        "invalid arguments for tool 'weather': $.city: missing required property"
    )
    assert (await run_one("delete_all", "  ", approved={"c1"})).content == "deleted"


async def test_unknown_tool() -> None:
    """A call to a tool that is not offered is answered, listing the tools that are."""
    outcome = await run_one("nope")
    assert outcome.status == "error"
    assert outcome.error_code == "tool.not_found"
    assert outcome.content == (
        "no tool named 'nope'; available tools: weather, echo, aio_double, fail, who, "
        "unserializable, positive, delete_all"
    )


async def test_unserializable_result() -> None:
    """A result JSON cannot hold is an error the model sees, not a crash."""
    outcome = await run_one("unserializable")
    assert outcome.status == "error"
    assert outcome.error_code == "tool"
    assert outcome.content == (
        "the tool's result cannot be turned into JSON: object is not JSON-serializable "
        "(Type is not JSON serializable: object)"
    )


async def test_approval_is_enforced() -> None:
    """A tool that needs approval runs only for approved call ids; others are denied."""
    denied = await run_one("delete_all")
    assert denied == ToolOutcome(
        call_id="c1",
        tool_name="delete_all",
        status="denied",
        content="tool 'delete_all' was not run: it needs a human's approval, none was given",
    )
    assert (await run_one("delete_all", approved={"c1"})).status == "ok"


async def test_context_carries_the_runtime_identity() -> None:
    """The context carries call id, session and idempotency key; the model cannot set them."""
    (default, given_key) = await run_tool_calls(
        [call("who", call_id="c1"), call("who", call_id="c2")],
        REGISTRY,
        session_id="session-9",
        idempotency_keys={"c2": "recorded-key"},
    )
    assert default.content == (
        '{"call_id":"c1","tool_name":"who","session_id":"session-9","key":"'
        + idempotency_key("session-9", "c1")
        + '"}'
    )
    assert given_key.content == (
        '{"call_id":"c2","tool_name":"who","session_id":"session-9","key":"recorded-key"}'
    )
    forged = await run_one("who", '{"ctx": {"session_id": "admin"}}')
    assert forged.content == (
        "invalid arguments for tool 'who': $.ctx: unexpected property (allowed: none)"
    )


async def test_cancelling_a_round_interrupts_unfinished_calls() -> None:
    """Cancelling the round: finished calls keep their outcome, the rest are `interrupted`.

    The thread tool is told through its context, and its late result is discarded.
    """
    started = threading.Event()
    finished = threading.Event()
    late: list[str] = []

    @tool
    def blocking(ctx: ToolContext) -> str:
        started.set()
        ctx.wait_cancelled(5)
        late.append("late result")
        finished.set()
        return "late result"

    @tool
    async def forever() -> str:
        await trio.sleep_forever()

    registry = ToolRegistry.of(blocking, forever, echo)
    scope = trio.CancelScope()
    result: list[ToolOutcome] = []

    async def round_() -> None:
        result.extend(
            await run_tool_calls(
                [
                    call("blocking", call_id="a"),
                    call("forever", call_id="b"),
                    call("echo", '{"text": "done"}', "c"),
                ],
                registry,
                session_id="s1",
                cancel_scope=scope,
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(round_)
        assert await trio.to_thread.run_sync(started.wait, 5)
        scope.cancel()
    assert await trio.to_thread.run_sync(finished.wait, 5)
    interrupted = "was interrupted before it finished; its result is discarded"
    assert result == [
        ToolOutcome(
            call_id="a",
            tool_name="blocking",
            status="interrupted",
            content=f"tool 'blocking' {interrupted}",
            error_code="tool.interrupted",
        ),
        ToolOutcome(
            call_id="b",
            tool_name="forever",
            status="interrupted",
            content=f"tool 'forever' {interrupted}",
            error_code="tool.interrupted",
        ),
        ToolOutcome(call_id="c", tool_name="echo", status="ok", content="done"),
    ]
    assert late == ["late result"]


def test_check_cancelled_raises_interrupted() -> None:
    """A sync tool polling its context gets a typed error once the call is cancelled."""
    context = ToolContext("c1", "spin", "s1", "k1")
    context.check_cancelled()
    assert not context.wait_cancelled(0)
    context.cancel()
    assert context.cancelled
    with pytest.raises(ToolInterruptedError) as caught:
        context.check_cancelled()
    assert caught.value.code == "tool.interrupted"
    assert isinstance(caught.value, ToolError)
    assert str(caught.value) == (
        "tool 'spin' was interrupted before it finished; its result is discarded"
    )


@settings(max_examples=examples(40), deadline=None)
@given(tool_calls(["echo", "fail", "who", "nope", "positive"]))
def test_nothing_a_model_sends_raises(calls: list[ToolCall]) -> None:
    """Whatever names and argument text arrive, every call gets exactly one outcome, in order."""
    outcomes = trio.run(lambda: run_tool_calls(calls, REGISTRY, session_id="s1"))
    assert [(o.call_id, o.tool_name) for o in outcomes] == [(c.id, c.name) for c in calls]
    for outcome in outcomes:
        assert (outcome.status == "ok") == (outcome.error_code is None)


@tool
def digits(n: int, x: float = 0.0) -> str:
    """How many digits an integer has (and a float, untouched)."""
    return f"{len(str(abs(n)))} {x}"


def test_huge_integers_pass_number_and_integer_schemas() -> None:
    """Parsed exactly, 10**400 is an "integer" and a "number" to the schema check."""
    huge = 10**400
    value = parse_tool_arguments("t", '{"a": 1' + "0" * 400 + ', "b": 1.5}')
    assert value == {"a": huge, "b": 1.5}
    schema = {
        "type": "object",
        "properties": {"a": {"type": "number", "minimum": 0}, "b": {"type": "number"}},
    }
    assert validate_json(schema, value) == ()
    assert validate_json({"type": "integer", "multipleOf": 10}, huge) == ()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"n": 1, "x": 1e400}', "$: the number 1e400 is too large for a 64-bit float"),
        (
            '{"n": 1' + "0" * 5000 + "}",
            "$: an integer of 5001 digits is too large (the limit is 4300 digits)",
        ),
    ],
)
async def test_numbers_beyond_any_python_number_are_refused_clearly(
    arguments: str, problem: str
) -> None:
    """Numbers Python cannot hold are invalid arguments that say the number is too large."""
    (outcome,) = await run_tool_calls(
        [call("digits", arguments)], ToolRegistry.of(digits), session_id="s1"
    )
    assert (outcome.status, outcome.error_code) == ("invalid_arguments", "tool.invalid_args")
    assert outcome.content == f"invalid arguments for tool 'digits': {problem}"


def _nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    """Arguments whose ``text`` nests ``depth`` arrays or objects (the arguments are one more)."""
    inner = (
        opener * depth + closer * depth if opener == "[" else '{"a": ' * depth + "1" + "}" * depth
    )
    return '{"text": ' + inner + "}"


@pytest.mark.parametrize("depth", [128, 1_023, 1_030, 10_000])
@pytest.mark.parametrize("kind", ["[", "{"])
async def test_arguments_nested_too_deep_are_invalid_arguments(depth: int, kind: str) -> None:
    """Arrays or objects nested past the limit are refused with one clear problem, at any
    depth: the parsers' own limits (orjson at 1024, the stdlib's recursion) never show."""
    (outcome,) = await run_tool_calls(
        [call("echo", _nested(depth, kind))], REGISTRY, session_id="s1"
    )
    assert (outcome.status, outcome.error_code) == ("invalid_arguments", "tool.invalid_args")
    assert outcome.content == (
        "invalid arguments for tool 'echo': $: arrays and objects nest more than 128 levels deep"
    )


async def test_arguments_nested_up_to_the_limit_are_checked_by_the_schema() -> None:
    """127 levels inside the arguments object (128 in all) are parsed and validated."""
    (outcome,) = await run_tool_calls([call("echo", _nested(127))], REGISTRY, session_id="s1")
    assert (
        outcome.content == "invalid arguments for tool 'echo': $.text: expected string, got array"
    )


async def test_huge_integers_nested_too_deep_are_refused_by_the_exact_parser() -> None:
    """The exact-integer parse (beyond orjson) checks the depth too."""
    text = '{"text": ' + "[" * 200 + "1" + "0" * 30 + "]" * 200 + "}"
    with pytest.raises(ToolArgumentsError) as info:
        parse_tool_arguments("echo", text)
    assert info.value.problems == ("$: arrays and objects nest more than 128 levels deep",)


async def test_lone_surrogate_escapes_in_arguments_stay_invalid_json() -> None:
    """A lone surrogate escape is refused as JSON (no text that cannot be encoded passes)."""
    (outcome,) = await run_tool_calls(
        [call("echo", '{"text": "a\\ud800b"}')], REGISTRY, session_id="s1"
    )
    assert outcome.status == "invalid_arguments"
    assert outcome.content.startswith(
        "invalid arguments for tool 'echo': $: not valid JSON (no low surrogate in string"
    )


def test_import_actors_does_not_load_trio_asyncio() -> None:
    """trio-asyncio loads only when an asyncio tool runs, not on ``import actors``.

    Runs in a fresh interpreter, because this test module has imported trio-asyncio.
    """
    code = textwrap.dedent(
        """
        import asyncio, sys, trio
        import actors, actors.lowlevel
        print("trio_asyncio" in sys.modules)

        @actors.tool(asyncio=True)
        async def aio_double(x: int) -> int:
            await asyncio.sleep(0)
            return 2 * x

        from protocols._llm import ToolCall
        registry = actors.ToolRegistry.of(aio_double)
        call = ToolCall(id="a", name="aio_double", arguments='{"x": 21}')
        (outcome,) = trio.run(
            lambda: actors.lowlevel.run_tool_calls([call], registry, session_id="s")
        )
        print(outcome.content, "trio_asyncio" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    expected = ["False", "42 True"]  # not loaded by the import, loaded by the asyncio tool
    assert expected == result.stdout.split("\n")[:2]
