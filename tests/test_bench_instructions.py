"""The instructions benchmark: the raw workload repeats a session's appends, valgrind counts
a send, and without valgrind the bench says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from actors.bench._agents import _sessions
from actors.bench._instructions import _SHAPE_SENDS, _per_send, _repeated


def test_the_raw_workload_repeats_the_appends_of_a_sessions_sends(tmp_path: Path) -> None:
    shape = trio.run(lambda: _sessions(1, _SHAPE_SENDS, tmp_path / "shape.db"))
    events = _repeated(shape.events, 2, 4)
    # 6 events a send (its run's start, 2 answers, the tool's start and result, its end).
    assert len(events) == 2 * 4 * 6
    assert {e.stream for e in events} == {"session/0", "session/1"}
    # Each send's appends are those of a send of the shape session, in turn: as many, as
    # the store grouped them (appends committed together share their ``recorded_at``).
    starts = [i for i, e in enumerate(shape.events) if e.type == "session.run_started"]
    shape_sends = [shape.events[i:j] for i, j in zip(starts, [*starts[1:], None], strict=True)]
    groups = [len({e.recorded_at for e in send}) for send in shape_sends]
    appends = {(e.stream, e.recorded_at) for e in events}
    assert len(appends) == 2 * sum(groups[i % _SHAPE_SENDS] for i in range(4))
    # The events of each stream are those of the shape's sends, in turn.
    session_0 = [e.type for e in events if e.stream == "session/0"]
    assert session_0 == [e.type for i in range(4) for e in shape_sends[i % _SHAPE_SENDS]]


def test_without_valgrind_the_bench_says_how_to_install_it_and_measures_nothing(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "actors.bench", "instructions", "--quick"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": str(tmp_path)},  # an empty folder: no valgrind on it
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "python -m actors.bench instructions: error [config.invalid]: the instructions "
        "benchmark counts with valgrind, which is not on the PATH: install it (Debian: "
        "apt-get install valgrind); no figures were measured\n"
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_valgrind_counts_a_sends_instructions_in_the_trio_thread_and_the_writers() -> None:
    main, every = _per_send("sessions", 4, 1)
    # Python runs about a thousand instructions a bytecode-heavy call: a send (a decision
    # per event, four appends, a model call and a tool) takes a few hundred thousand.
    assert main > 200_000
    # The SQLite writer and the WAL checkpointer run in threads of their own.
    assert every > main
