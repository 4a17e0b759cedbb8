"""The providers benchmark times the first token three ways and says how long the run's
start took to commit, which a session's first token waits for."""

from __future__ import annotations

import trio

from actors.bench import SUITES
from actors.bench._providers import _measure


def test_the_providers_suite_reports_the_run_starts_commit_beside_the_first_token() -> None:
    """Each figure is there, the commit of a thinking session's run start timed from its
    own sessions' appends."""
    assert SUITES["providers"] == "actors.bench._providers"
    figures = trio.run(_measure, 3)
    assert figures["requests"] == 3
    commit = figures["ttft_thinking_run_start_commit_p50_ms"]
    assert isinstance(commit, float)
    assert commit > 0
    assert all(
        isinstance(value, float) and value > 0
        for name, value in figures.items()
        if name.endswith("_p50_ms")
    )
