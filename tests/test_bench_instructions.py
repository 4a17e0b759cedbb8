"""The instructions benchmark: the raw workload repeats a session's appends, valgrind counts
a send, and without valgrind the bench says so."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import trio

from actors.bench import SUITES, _instructions
from actors.bench._agents import _sessions
from actors.bench._instructions import (
    _ALLOCATORS,
    _SHAPE_SENDS,
    _calls,
    _per_send,
    _repeated,
    callgrind,
    callgrind_counts,
)
from runtime.bench import main


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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no valgrind on it
    code = main(["instructions", "--quick"], suites=SUITES, prog="python -m actors.bench")
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err == (
        "python -m actors.bench instructions: error [config.invalid]: the instructions "
        "benchmark counts with valgrind, which is not on the PATH: install it (Debian: "
        "apt-get install valgrind); no figures were measured\n"
    )


def test_a_sends_figure_is_the_difference_of_two_runs_so_start_up_cancels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each figure divides the difference of a run with 3x the sends and one with 1x by the
    sends between them: what the process does once (start-up, imports) drops out."""
    start_up, per_send_main, per_send_all, allocations = 5_000_000, 700_000, 900_000, 3_000

    def count(kind: str, n: int, sends: int) -> tuple[int, int, int]:
        assert kind == "sessions"
        done = n * sends
        return (
            start_up + per_send_main * done,
            3 * start_up + per_send_all * done,
            40_000 + allocations * done,
        )

    monkeypatch.setattr(_instructions, "_count", count)
    assert _per_send("sessions", 4, 1) == (700_000.0, 900_000.0, 3_000.0)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_callgrind_counts_each_threads_instructions_the_main_thread_first() -> None:
    """A tiny program under the bench's callgrind run (seconds, not the bench's minutes):
    one count per thread, the main thread's first, the busy thread's the larger."""
    code = (
        "import threading; "
        "t = threading.Thread(target=sum, args=(range(1_000_000),)); t.start(); t.join()"
    )
    main, worker = callgrind([sys.executable, "-S", "-c", code])
    # Summing a million numbers takes tens of instructions each.
    assert worker > 10_000_000
    assert 0 < main < worker


def test_the_allocator_calls_are_summed_over_every_caller() -> None:
    """A callee is named at its first mention and by id after; each ``calls=`` line after a
    ``cfn=`` of an allocator counts, whoever the caller."""
    profile = "\n".join(
        [
            "fn=(1) main",
            "cfn=(2) _PyObject_Malloc",
            "calls=7 12",
            "5 100",
            "cfn=(3) other",
            "calls=100 3",
            "fn=(4) helper",
            "cfn=(2)",
            "calls=5 12",
            "cfn=(5) _PyObject_Calloc",
            "calls=2 1",
        ]
    )
    assert _calls(profile, _ALLOCATORS) == 14


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_callgrind_counts_the_objects_a_program_allocates() -> None:
    code = "kept = [object() for _ in 'x' * 50_000]"  # one-letter strings: cached
    few = callgrind_counts([sys.executable, "-S", "-c", "pass"])[1][0]
    many = callgrind_counts([sys.executable, "-S", "-c", code])[1][0]
    assert 50_000 <= many - few < 60_000
