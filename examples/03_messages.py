"""Everything is a message: follow-ups, a human in the loop, a durable wake-up, a cancel.

python examples/03_messages.py
"""

from __future__ import annotations

import orjson
import trio
import trio.testing

from actors import ask_human, spawn_session, wakeup_tools
from protocols import LLMRequest, LLMResponse, ToolCall, Usage
from runtime import open_runtime
from runtime.testing import FunctionLLM


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"{name}-1", name=name, arguments=orjson.dumps(arguments).decode())


async def model(request: LLMRequest) -> LLMResponse:
    """A stand-in model that reacts to the last thing it was told."""
    usage = Usage(prompt_tokens=50, completion_tokens=10)
    last = request.messages[-1]
    text = last.text
    if text == "Book me a table.":
        return LLMResponse(tool_calls=[call("ask_human", question="For how many?")], usage=usage)
    if last.role == "tool" and "timer_id" in text:
        return LLMResponse(content="Table booked; I will confirm in a moment.", usage=usage)
    if last.role == "tool":  # the human's answer: set a reminder to confirm
        schedule = call(
            "schedule_wakeup", action="schedule", delay_seconds=1, note="confirm the booking"
        )
        return LLMResponse(tool_calls=[schedule], usage=usage)
    if text.startswith("[timer"):
        return LLMResponse(content="Booking confirmed.", usage=usage)
    if text == "Write me a long poem.":
        await trio.sleep(10)  # long enough to be cancelled
    return LLMResponse(content=f"Noted: {text}", usage=usage)


async def main() -> None:
    async with open_runtime() as runtime:
        session = await spawn_session(
            runtime, llm=FunctionLLM(model), tools=[ask_human, *wakeup_tools(runtime)]
        )
        # A human in the loop: the run parks, the reply resumes it.
        waiting = await session.send("Book me a table.")
        request = waiting.human_requests[0]
        print(f"[{waiting.status}] the agent asks: {request.prompt}")
        booked = await session.reply(request.request_id, "Four people, 8 pm.")
        print(f"[{booked.status}] {booked.text}")

        # The wake-up it scheduled fires a second later and starts a run by itself.
        await trio.sleep(1.5)
        woken = list((await session.state()).results.values())[-1]
        print(f"[{woken.status}] woken by its timer: {woken.text}")

        # A follow-up on an idle session starts a run; the same id again does nothing.
        await session.follow_up("Vegetarian, please.", id="msg-42")
        assert not await session.follow_up("Vegetarian, please.", id="msg-42")
        noted = await session.wait("fu-msg-42")
        print(f"[{noted.status}] {noted.text}")

        # A cancel stops a run now; the session stays usable.
        async with trio.open_nursery() as nursery:
            results = []

            async def poem() -> None:
                results.append(await session.send("Write me a long poem."))

            nursery.start_soon(poem)
            await trio.sleep(0.1)
            await session.cancel("changed my mind")
        print(f"[{results[0].status}] {results[0].error}")
        after = await session.send("Thanks!")
        print(f"[{after.status}] {after.text}")


if __name__ == "__main__":
    # Virtual time: the wake-up and the cancel land at the same points on every machine,
    # and the waits take no real time.
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
