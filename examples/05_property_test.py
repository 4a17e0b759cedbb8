"""Property-test an agent: generated conversations and operations, invariants checked.

Runs offline, in virtual time, as a script or under pytest:

    python examples/05_property_test.py
    pytest examples/05_property_test.py

Hypothesis scripts the model (tool calls with valid and broken arguments, provider
errors, token usage) and what happens to the session (sends, follow-ups, cancels,
timers, blackboard writes, crashes, restarts, time passing); the harness runs each case
deterministically and the kit's invariants check it. Under pytest, the `runtime_harness`
fixture (with a `harness_agent` fixture returning your agent) can replace the
module-level harness.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actors import AgentSpec, Budget, tool
from actors.testing import (
    RuntimeHarness,
    Send,
    assert_crash_equivalent,
    assert_invariants,
    conversations,
    operations,
    property_settings,
)

EXAMPLES = 100


@tool(crash_policy="retry")
async def forecast(city: str, days: int = 1) -> str:
    """The weather forecast of a city (read-only, so safe to re-run after a crash).

    Args:
        city: the city.
        days: how many days ahead.
    """
    return f"{city}: sunny for {days} day(s)"


@tool(crash_policy="retry")
async def to_fahrenheit(celsius: float) -> float:
    """Convert a temperature to Fahrenheit.

    Args:
        celsius: degrees Celsius.
    """
    return celsius * 9 / 5 + 32


AGENT = AgentSpec(
    name="weather",
    system_prompt="You answer questions about the weather.",
    tools=[forecast, to_fahrenheit],
    max_rounds=4,
    budget=Budget(max_tokens=400),
)
harness = RuntimeHarness(AGENT, tool_delays={"forecast": 3.0})  # a slow tool


@property_settings(examples=EXAMPLES)
@given(conversation=conversations(AGENT), ops=operations())
def test_the_agent_keeps_its_invariants(conversation, ops):
    """Whatever happens (crashes and runtime restarts too): replay equals the live state,
    requests are provider-valid, no recorded answer is requested again, the token budget
    holds to within one call, each follow-up is read once."""
    assert_invariants(harness.run(conversation, ops))


@property_settings(examples=EXAMPLES)
@given(
    conversation=conversations(AGENT, unknown_tools=False),
    questions=st.lists(st.sampled_from(["Oslo?", "Lima?"]), min_size=1, max_size=2),
    data=st.data(),
)
def test_a_crash_anywhere_changes_nothing(conversation, questions, data):
    """Crash the session at any event of its log: it ends exactly as without the crash."""
    ops = [Send(question, wait=True) for question in questions]
    clean = harness.run(conversation, ops)
    crash_at = data.draw(st.integers(1, clean.session_events), label="crash_at")
    assert_crash_equivalent(clean, harness.run(conversation, ops, crash_at=crash_at))


if __name__ == "__main__":
    for test in (test_the_agent_keeps_its_invariants, test_a_crash_anywhere_changes_nothing):
        test()
        checked = " ".join((test.__doc__ or "").split())
        print(f"[completed] {test.__name__} ({EXAMPLES} generated cases): {checked}")
