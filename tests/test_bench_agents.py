"""The agents benchmark's counts: appends and commits of a sequential session, and the
fewest commits the invariants allow, read from its log."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actors.bench._agents import (
    _min_dependent_commits,
    _sessions,
    idle_session_figures,
    reactivation_ms,
)


def test_a_sequential_session_counts_its_appends_and_the_commits_they_share(
    tmp_path: Path,
) -> None:
    """Each send appends 4 times (its run's start, the tool call, the tool's result, the
    answer), counted through the pipelined path too; the commits they take are between
    the fewest the invariants allow (3: one before the tool round, one of its result
    before the model call that reads it, one before the reply) and one per append."""
    sends = 3
    measured = trio.run(lambda: _sessions(1, sends, tmp_path / "log.db", count=True, memory=True))
    assert measured.counted == 4 * sends
    assert measured.state_copies == 0  # nobody asked for the state: no copy of it
    assert measured.blocks > 0  # each send's share of the transcript and results stays
    assert _min_dependent_commits(measured.events) == 3 * sends
    assert 3 * sends <= measured.commits <= 4 * sends
    assert [e.type for e in measured.events[:7]] == [
        "session.created",
        "session.run_started",
        "session.assistant",
        "session.tool_started",
        "session.tool_finished",
        "session.assistant",
        "session.run_finished",
    ]


@pytest.mark.slow
def test_the_idle_figures_measure_passivated_sessions_and_their_re_activation(
    tmp_path: Path,
) -> None:
    """Five waves of sessions each made one send and passivated (every one of them:
    the wave waits for their ``ActorPassivated``); each was started again by a look at
    its state, and so was a long session, from its snapshot and tail."""
    _first, _marginal, live, p50, p99, sqlite_heap = trio.run(
        idle_session_figures, "20", str(tmp_path / "waves.db")
    )
    assert 0 < live < 64 * 1024
    assert sqlite_heap > 0  # its page caches, at least
    assert 0 < p50 <= p99
    long_p50, long_p99, version = trio.run(reactivation_ms, "12", "3", str(tmp_path / "l.db"))
    assert 0 < long_p50 <= long_p99
    assert version == 1 + 6 * 12  # created, then 6 events a send
