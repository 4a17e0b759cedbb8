"""Every example runs offline to completion, and gives the same output on every run.

Virtual time must be deterministic with the SQLite store and with sync tools in worker
threads (the runtime holds the virtual clock while its own thread work is in flight), so
each example is run several times and every run must print the same thing. Fresh ids
(``ses_`` + 26 characters, made from the wall clock) are the only thing allowed to differ.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("[0-9]*.py"))

RUNS = 10
"""How many times each example runs; every output must equal the first."""

_FRESH_ID = re.compile(r"\b([a-z]+)_[0-9A-Z]{26}\b")


def _run(example: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    # An example prints what it teaches: the faults it injects on purpose end up in its
    # results, not as the library's log on stderr.
    assert done.stderr == "", f"{example.name} wrote on stderr:\n{done.stderr[:4000]}"
    assert "Traceback" not in done.stdout
    return _FRESH_ID.sub(r"\1_<id>", done.stdout)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_offline_and_the_same_every_time(example: Path) -> None:
    """The example exits 0, prints a completed run and nothing on stderr, and prints the
    same on every run."""
    first = _run(example)
    assert "[completed]" in first
    different = [n for n in range(2, RUNS + 1) if _run(example) != first]
    assert different == [], f"runs {different} printed something else than run 1:\n{first}"


def test_there_is_at_least_one_example() -> None:
    """The glob above is not silently empty."""
    assert [p.name for p in EXAMPLES][:1] == ["01_hello_agent.py"]
