"""A long-lived agent under virtual time: an hourly wake for days, reproducible to the event."""

from __future__ import annotations

import pytest

from actors.bench._longevity import _in_turns, simulate


@pytest.mark.slow
def test_an_hourly_agent_for_three_days_writes_the_same_log_twice() -> None:
    first, costs = simulate(3)
    second, _ = simulate(3)
    assert first == second
    types = [record[2] for record in first]
    assert types.count("session.run_finished") == 3 * 24 == len(costs) + 1
    assert types.count("session.tool_finished") == 3 * 24  # each run called its tool
    assert types.count("timer.fired") == 3 * 24


@pytest.mark.slow
def test_an_old_and_a_young_agent_take_turns_to_the_end() -> None:
    """The bench's turns (two processes, two pipes) end: each side measured every run."""
    old, young = _in_turns(2)
    assert len(old["costs"]) == 2 * 24 - 1
    assert len(young["costs"]) == 24 - 1
    assert all(cost[0] > 0 for cost in old["costs"] + young["costs"])
