"""The kernel's LLM test doubles: FunctionLLM, the general one, and ScriptedLLM built on it."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from protocols import LLM, LLMRequest, LLMResponse, ToolCall, UserMessage
from protocols.errors import LLMRateLimitedError, ScriptExhaustedError
from protocols.streaming import FinishDelta, TextDelta, ToolCallDelta, UsageDelta
from runtime.testing import FunctionLLM, ScriptedLLM


def _request(text: str) -> LLMRequest:
    return LLMRequest(messages=[UserMessage(text)])


CALL = LLMResponse(
    tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')],
    finish_reason="tool_calls",
)
ANSWER = LLMResponse(content="The answer is 3.")


async def test_scripted_fifo_records_and_raises() -> None:
    """Answers come out in order, errors are raised in place, requests are recorded."""
    error = LLMRateLimitedError("slow down", status=429)
    llm = ScriptedLLM([CALL, error, ANSWER])
    assert await llm.complete(_request("one")) == CALL
    with pytest.raises(LLMRateLimitedError) as info:
        await llm.complete(_request("two"))
    assert info.value is error
    assert await llm.complete(_request("three")) == ANSWER
    assert [r.messages[0] for r in llm.requests] == [
        UserMessage("one"),
        UserMessage("two"),
        UserMessage("three"),
    ]
    llm.assert_complete()
    assert repr(llm) == "ScriptedLLM(remaining=0, requests=3)"


async def test_scripted_exhausted() -> None:
    """Asking once too often raises ScriptExhaustedError and still records the request."""
    llm = ScriptedLLM([ANSWER])
    await llm.complete(_request("a"))
    with pytest.raises(ScriptExhaustedError) as info:
        await llm.complete(_request("b"))
    assert info.value.code == "llm.script_exhausted"
    assert str(info.value) == (
        "ScriptedLLM was asked for answer #2 but its script held only 1; add more answers "
        "or check why the agent called the model again"
    )
    assert len(llm.requests) == 2


async def test_assert_complete_lists_what_is_left() -> None:
    """assert_complete names every unused answer, in order."""
    llm = ScriptedLLM()
    llm.add(CALL, LLMRateLimitedError("later"), ANSWER)
    await llm.complete(_request("a"))
    with pytest.raises(AssertionError) as info:
        llm.assert_complete()
    assert str(info.value) == (
        "ScriptedLLM: 2 scripted answer(s) not used after 1 request(s):\n"
        "  1. raise LLMRateLimitedError(code='llm.rate_limited', message='later')\n"
        "  2. LLMResponse(content='The answer is 3.', finish_reason='stop')"
    )
    assert llm.remaining[1] == ANSWER


async def test_scripted_streams_deltas() -> None:
    """A scripted response streams as text, tool-call fragments, usage and finish."""
    llm = ScriptedLLM([CALL], chunk_size=4)
    async with llm.stream(_request("s")) as stream:
        deltas = [d async for d in stream]
        response = await stream.final_response()
    assert response == CALL
    fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert "".join(f.arguments for f in fragments) == '{"a": 1, "b": 2}'
    assert (fragments[0].id, fragments[0].name) == ("c1", "add")
    assert all(f.id is None for f in fragments[1:])
    assert isinstance(deltas[-2], UsageDelta)
    assert deltas[-1] == FinishDelta("tool_calls")
    assert len(llm.requests) == 1


async def test_scripted_stream_raises_scripted_error_on_first_read() -> None:
    """A scripted error surfaces when the stream is read."""
    llm = ScriptedLLM([LLMRateLimitedError("no")])
    stream = llm.stream(_request("x"))
    assert llm.requests == []
    async with stream:
        with pytest.raises(LLMRateLimitedError):
            await stream.final_response()
    assert len(llm.requests) == 1


async def test_scripted_complete_checkpoints() -> None:
    """complete() is a checkpoint, like every public async function."""
    llm = ScriptedLLM([ANSWER])
    with trio.testing.assert_checkpoints():
        await llm.complete(_request("x"))


async def test_function_llm_sync_and_async() -> None:
    """A plain or an async function computes the answer from the request."""

    def echo(request: LLMRequest) -> LLMResponse:
        message = request.messages[-1]
        assert isinstance(message, UserMessage)
        return LLMResponse(content=f"you said: {message.text}")

    async def slow_echo(request: LLMRequest) -> LLMResponse:
        await trio.lowlevel.checkpoint()
        return echo(request)

    for function in (echo, slow_echo):
        llm = FunctionLLM(function)
        assert (await llm.complete(_request("hi"))).content == "you said: hi"
        async with llm.stream(_request("yo")) as stream:
            texts = [d.text async for d in stream if isinstance(d, TextDelta)]
        assert "".join(texts) == "you said: yo"
        assert len(llm.requests) == 2


async def test_function_llm_errors_propagate() -> None:
    """An error raised by the function reaches the caller unchanged."""

    def fail(request: LLMRequest) -> LLMResponse:
        raise LLMRateLimitedError("busy", status=429)

    llm = FunctionLLM(fail)
    with pytest.raises(LLMRateLimitedError) as info:
        await llm.complete(_request("x"))
    assert (info.value.code, str(info.value)) == ("llm.rate_limited", "busy")


async def test_the_doubles_satisfy_the_protocol() -> None:
    doubles: list[LLM] = [ScriptedLLM([ANSWER]), FunctionLLM(lambda r: ANSWER)]
    for llm in doubles:
        async with llm.stream(_request("q")) as stream:
            assert await stream.final_response() == ANSWER


async def test_latency_takes_trio_time_spread_over_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call takes ``latency`` seconds of virtual time, whole or spread between deltas."""
    llm = FunctionLLM(lambda r: ANSWER, chunk_size=4, latency=2.0)
    start = trio.current_time()
    assert await llm.complete(_request("q")) == ANSWER
    assert trio.current_time() - start == 2.0
    seen: list[float] = []
    async with llm.stream(_request("q")) as stream:
        async for _ in stream:
            seen.append(trio.current_time() - start)
    assert len(seen) > 2
    assert seen[-1] == pytest.approx(4.0)
    assert seen == sorted(seen)
    assert seen[0] < 3.0
    with pytest.raises(ValueError, match="latency must be >= 0 seconds, got -1"):
        FunctionLLM(lambda r: ANSWER, latency=-1)


async def test_a_call_cancelled_before_it_reaches_the_model_takes_no_answer() -> None:
    """A cancelled call leaves the script and the recorded requests as they were."""
    llm = ScriptedLLM([ANSWER])
    with trio.CancelScope() as scope:
        scope.cancel()
        await llm.complete(_request("q"))
    assert (llm.requests, llm.remaining) == ([], (ANSWER,))
    assert await llm.complete(_request("q")) == ANSWER
    llm.assert_complete()
