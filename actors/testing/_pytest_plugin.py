"""The pytest plugin of the test kit: ``virtual_clock``, ``scripted_llm``, ``runtime_harness``.

Installed with powertrio through the ``pytest11`` entry point ``powertrio``, so the
fixtures are there in every test without an import. Without the installed entry point
(a source checkout on ``sys.path``), load it in the top-level ``conftest.py``::

    pytest_plugins = ["actors.testing._pytest_plugin"]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import trio.testing

import actors
from runtime.testing import ScriptedLLM

from ._harness import RuntimeHarness

if TYPE_CHECKING:
    from actors import AgentSpec


@pytest.fixture
def virtual_clock() -> trio.testing.MockClock:
    """A ``MockClock`` that jumps ahead whenever every task is blocked.

    pytest-trio runs an async test on a clock fixture it is given, so a test asking for
    this one sleeps days in milliseconds (timers, budgets, backoff)::

        async def test_reminder(virtual_clock, scripted_llm):
            ...
            await trio.sleep(86_400)  # instant
    """
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """An empty :class:`~runtime.testing.ScriptedLLM`; every answer added must be used.

    Add answers with ``scripted_llm.add(...)``; at the end of the test it checks that the
    agent used them all (``assert_complete``)::

        async def test_answer(scripted_llm):
            scripted_llm.add(LLMResponse(content="hi"))
            async with open_runtime() as runtime:
                session = await spawn_session(runtime, llm=scripted_llm)
                assert (await session.send("hello")).text == "hi"
    """
    llm = ScriptedLLM()
    yield llm
    llm.assert_complete()


@pytest.fixture
def harness_agent() -> AgentSpec:
    """The agent :func:`runtime_harness` runs: override this fixture with yours.

    The default is a plain agent with no tools::

        @pytest.fixture
        def harness_agent():
            return AgentSpec(name="weather", system_prompt="...", tools=[lookup])
    """
    agent: AgentSpec = actors.AgentSpec(name="agent")
    return agent


@pytest.fixture
def runtime_harness(harness_agent: AgentSpec) -> RuntimeHarness:
    """A :class:`~actors.testing.RuntimeHarness` for ``harness_agent``, seed 0.

    It is stateless between runs, so a Hypothesis test may use it for every example
    (:func:`~actors.testing.property_settings` turns off the health check that warns
    about function-scoped fixtures)::

        @property_settings()
        @given(conversation=conversations([lookup]), ops=operations())
        def test_weather(runtime_harness, conversation, ops):
            assert_invariants(runtime_harness.run(conversation, ops))
    """
    return RuntimeHarness(harness_agent)
