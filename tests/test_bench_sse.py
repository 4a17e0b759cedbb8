"""The SSE benchmark streams its big events through the transport and reports every figure."""

from __future__ import annotations

import argparse

from actors.bench import SUITES
from actors.bench._sse import run


def test_the_quick_sse_suite_reports_cpu_beside_the_raw_read() -> None:
    """--quick streams 8 and 16 MB (each checked whole) and reports ours, raw and the ratio."""
    assert SUITES["sse"] == "actors.bench._sse"
    figures = run(argparse.Namespace(quick=True))
    assert sorted(figures) == sorted(
        f"sse_event_{mb}mb_{what}" for mb in (8, 16) for what in ("cpu_s", "raw_cpu_s", "ratio")
    )
    assert all(isinstance(value, float) and value > 0 for value in figures.values())
