"""Every example runs offline to completion, so none rots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("[0-9]*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_offline(example: Path) -> None:
    """The example exits 0 and prints a completed run."""
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "[completed]" in done.stdout


def test_there_is_at_least_one_example() -> None:
    """The glob above is not silently empty."""
    assert [p.name for p in EXAMPLES][:1] == ["01_hello_agent.py"]
