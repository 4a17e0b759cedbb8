"""The agents benchmark's counts: appends and commits of a sequential session, and the
fewest commits the invariants allow, read from its log."""

from __future__ import annotations

from pathlib import Path

import trio

from actors.bench._agents import _min_dependent_commits, _sessions


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
