"""The start-up benchmark's plumbing: every figure present, each a CPU time of a child that ran."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from actors.bench import SUITES
from actors.bench._startup import cpu_ms, run


@pytest.mark.slow
def test_the_startup_suite_measures_every_figure_in_a_child_process() -> None:
    """``python -m actors.bench startup --quick`` gives each figure a positive CPU time (no
    threshold: timings are the benchmark's to print, not a test's to judge)."""
    assert SUITES["startup"] == "actors.bench._startup"
    figures = run(argparse.Namespace(quick=True))
    expected = [
        "help_cpu_ms",
        "import_actors_cpu_ms",
        "import_agent_api_cpu_ms",
        "import_httpx_cpu_ms",
        "import_trio_httpx_cpu_ms",
        "log_cpu_ms",
        "python_pass_cpu_ms",
        "run_demo_cpu_ms",
        "sessions_cpu_ms",
        "startup_runs",
    ]
    assert expected == sorted(figures)
    timings = {name: value for name, value in figures.items() if name.endswith("_cpu_ms")}
    not_positive: list[str] = []
    assert not_positive == [
        name for name, value in timings.items() if not (isinstance(value, float) and value > 0)
    ]
    runs = 1
    assert runs == figures["startup_runs"]


def test_a_child_that_fails_is_an_error_not_a_figure() -> None:
    """A command that exits non-zero raises instead of reporting the CPU of its failure."""
    with pytest.raises(subprocess.CalledProcessError):
        cpu_ms("raise SystemExit(3)")
