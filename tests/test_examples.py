"""Every example runs offline to completion, and gives the same output on every run.

Virtual time must be deterministic with the SQLite store and with sync tools in worker
threads (the runtime holds the virtual clock while its own thread work is in flight), so
each example is run several times, in two processes, and every run must print the same
thing. Fresh ids
(``ses_`` + 26 characters, made from the wall clock) are the only thing allowed to differ.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _depth import repeats

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("[0-9]*.py"))

SLOW = {"05_property_test.py", "06_fleet.py", "08_research_app_property.py", "10_mcp_agent.py"}
"""The examples that run for seconds each time (properties, fleets, a tool server): run
first, so the workers share them (``tests/conftest.py``)."""

_FRESH_ID = re.compile(r"\b([a-z]+)_[0-9A-Z]{26}\b")

_AGAIN = """
import contextlib, io, json, runpy, sys, tempfile
runs = []
for _ in range(int(sys.argv[2])):
    # stderr is a file: a stdio MCP server the example starts writes its own there.
    with tempfile.TemporaryFile("w+") as err:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(sys.argv[1], run_name="__main__")
        err.seek(0)
        runs.append([out.getvalue(), err.read()])
print(json.dumps(runs))
"""
"""Runs an example again and again in one process: the interpreter starts once."""


def _printed(example: Path, stdout: str, stderr: str) -> str:
    # An example prints what it teaches: the faults it injects on purpose end up in its
    # results, not as the library's log on stderr.
    assert stderr == "", f"{example.name} wrote on stderr:\n{stderr[:4000]}"
    assert "Traceback" not in stdout
    return _FRESH_ID.sub(r"\1_<id>", stdout)


def _run(example: Path) -> str:
    """One run as its reader starts it: ``python example.py``."""
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return _printed(example, done.stdout, done.stderr)


def _runs(example: Path, count: int) -> list[str]:
    """``count`` more runs, one after another in a second process (another hash seed)."""
    done = subprocess.run(
        [sys.executable, "-c", _AGAIN, str(example), str(count)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [_printed(example, out, err) for out, err in json.loads(done.stdout)]


@pytest.mark.parametrize(
    "example",
    [pytest.param(p, marks=[pytest.mark.slow] if p.name in SLOW else []) for p in EXAMPLES],
    ids=[p.name for p in EXAMPLES],
)
def test_example_runs_offline_and_the_same_every_time(example: Path) -> None:
    """The example exits 0, prints a completed run and nothing on stderr, and prints the
    same on every run: 4 in all (10 in the deep profile), the first as a script of its own,
    the others one after another in a second process."""
    first = _run(example)
    assert "[completed]" in first
    again = _runs(example, repeats(3, 9))
    different = [n for n, printed in enumerate(again, 2) if printed != first]
    assert different == [], f"runs {different} printed something else than run 1:\n{first}"


def test_there_is_at_least_one_example() -> None:
    """The glob above is not silently empty."""
    assert [p.name for p in EXAMPLES][:1] == ["01_hello_agent.py"]
