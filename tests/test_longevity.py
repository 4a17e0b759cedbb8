"""A long-lived agent under virtual time: an hourly wake for days, reproducible to the event."""

from __future__ import annotations

import pytest

import actors._persistent as persistent
from actors.bench._longevity import PageSplit, _in_turns, event_bytes_per_run, simulate


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


@pytest.mark.slow
def test_the_split_shows_where_a_run_writes_and_a_snapshot_does_not_grow_with_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bytes, not times: deterministic. With chunks of 4 items an hourly agent seals a
    chunk every run, so in a few days its snapshot would carry hundreds of addresses if it
    listed one per chunk; it holds one (the root of their index tree) and stays flat."""
    monkeypatch.setattr(persistent, "CHUNK", 4)
    split = PageSplit((1, 2, 6))
    records, _ = simulate(6, pages=split)
    by_day = split.bytes_per_run
    assert set(by_day) == {1, 2, 6}
    for kinds in by_day.values():
        assert {"events", "snapshots", "blobs", "chunk_refs", "bookkeeping"} <= set(kinds)
        assert all(size > 0 for size in kinds.values())
    assert by_day[6]["snapshots"] <= by_day[2]["snapshots"] * 1.1, by_day
    events = event_bytes_per_run(records, (1, 2, 6))
    assert set(events[6]) >= {"session.assistant", "session.tool_finished", "timer.fired"}
    totals = [sum(events[day].values()) for day in (1, 2, 6)]
    assert max(totals) <= min(totals) * 1.01, totals
