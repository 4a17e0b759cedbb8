"""A long-lived agent under virtual time: an hourly wake for days, reproducible to the event."""

from __future__ import annotations

import statistics

import pytest

import actors._session._persistent as persistent
from actors.bench._longevity import (
    PageSplit,
    _in_turns,
    _io_figures,
    event_bytes_per_run,
    simulate,
)


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
def test_the_bench_weighs_the_runs_that_snapshot_apart() -> None:
    """A day's mean bytes per run moves with how many of its runs saved a snapshot (one
    every 13 runs: one or two of a day's 23); the bench knows which did, and weighs each
    kind of run by their share over the whole simulation."""
    _, costs = simulate(3)
    snapshotting = [c for c in costs if c[3]]
    assert 4 <= len(snapshotting) <= 6, [i for i, c in enumerate(costs) if c[3]]
    median = statistics.median(c[2] for c in costs)
    assert all(c[2] > median for c in snapshotting)
    figures = _io_figures(3, [[list(c) for c in costs]])
    share = float(figures["run_io_snapshot_share"])
    assert share == round(len(snapshotting) / (len(costs) - 1), 4)
    for day in (1, 2):
        plain = float(figures[f"run_io_bytes_no_snapshot_day{day}"])
        snapshot = float(figures[f"run_io_bytes_snapshot_day{day}"])
        assert plain < snapshot
        weighed = float(figures[f"run_io_bytes_at_cadence_day{day}"])
        assert abs(weighed - (plain * (1 - share) + snapshot * share)) <= 1
    assert figures["run_io_snapshot_runs_day1"] == 1
    assert figures["run_io_snapshot_runs_day2"] == 2


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


@pytest.mark.slow
def test_the_split_shows_the_events_tree_gain_a_level_and_its_interior_pages_the_step() -> None:
    """Bytes, not times: deterministic. On a fresh log's first day the events table is a
    root over its leaves, and a run changes that root once; by day 4 it has a level more,
    and its interior pages (the right edge's, balanced with its siblings whenever it
    overflows) are most of what a run's events pages grew by."""
    split = PageSplit((1, 4))
    simulate(4, pages=split)
    assert split.events_depth == {1: 2, 4: 3}
    interior = split.events_interior_per_run
    assert interior[1] == 1024  # the root, once a run (1 KiB pages)
    assert interior[4] >= 1.3 * 1024, interior
    grown = split.bytes_per_run[4]["events"] - split.bytes_per_run[1]["events"]
    assert interior[4] - interior[1] >= 0.5 * grown > 0, (interior, split.bytes_per_run)
