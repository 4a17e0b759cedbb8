"""Instructions per send, counted by valgrind: figures that hold still while the machine's
speed moves.

On a shared machine a timed figure moves by 20-50 % within the hour, so a change worth
5 % cannot be seen in sends per second. An instruction count moves by 1-2 % (3-4 % with
other work running beside it: thread timing changes how appends group). Each figure
is the difference of two runs under ``valgrind --tool=callgrind --separate-threads=yes``,
of ``SENDS`` and of ``3 * SENDS`` sends per session, so start-up and set-up cancel:

* ``instructions_per_send_main``: the Trio thread's, with 256 sessions at once (32 with
  ``--quick``). At 256 the Trio thread runs at 100 % and the writer mostly outside the GIL,
  so this is what bounds ``sends_per_s_256`` of the ``agents`` suite.
* ``instructions_per_send_all``: every thread's (the SQLite writer's and the WAL
  checkpointer's too): what ``cpu_ms_per_send`` counts.
* ``raw_instructions_per_send_main`` and ``raw_instructions_per_send_all``, the
  baseline: the same events, in the same appends, at the same concurrency, appended
  straight to the store (no actors, no decisions), as ``raw_sends_per_s_N`` of ``agents``.

Needs ``valgrind`` on the ``PATH``; about 5 minutes (1.5 with ``--quick``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from protocols.errors import ConfigError
from runtime import RecordedEvent
from runtime.bench import Figures

from ._agents import _raw_appends, _sessions

_SHAPE_SENDS = 3
"""Sends of the one session whose events the raw workload repeats (the same in both runs
of a difference, so its cost cancels)."""


def _repeated(events: list[RecordedEvent], n: int, sends: int) -> list[RecordedEvent]:
    """``n`` streams of ``sends`` sends each, every send's appends those of one of the
    shape session's sends (by its ``recorded_at`` groups), in turn."""
    per_send: list[list[RecordedEvent]] = [[] for _ in range(_SHAPE_SENDS)]
    send = -1
    for event in events:
        if event.type == "session.run_started":
            send += 1
        if send >= 0:
            per_send[send].append(event)
    streams: list[RecordedEvent] = []
    for session in range(n):
        for i in range(sends):
            for event in per_send[i % _SHAPE_SENDS]:
                streams.append(
                    RecordedEvent(
                        stream=f"session/{session}",
                        version=0,
                        position=0,
                        type=event.type,
                        schema_version=event.schema_version,
                        data=event.data,
                        metadata=event.metadata,
                        recorded_at=event.recorded_at + 1_000 * i,
                    )
                )
    return streams


async def _workload(kind: str, n: int, sends: int, folder: Path) -> None:
    """What one counted process runs: ``n`` sessions of ``sends`` sends, or their events
    appended raw."""
    if kind == "sessions":
        await _sessions(n, sends, folder / "sessions.sqlite")
        return
    shape = await _sessions(1, _SHAPE_SENDS, folder / "shape.sqlite")
    await _raw_appends(_repeated(shape.events, n, sends), n, sends, folder / "raw.sqlite")


def _count(kind: str, n: int, sends: int) -> tuple[int, int]:
    """Instructions of the Trio thread and of all threads, of one run under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import sys, trio; from pathlib import Path; "
            "from actors.bench._instructions import _workload; "
            "kind, n, sends, folder = sys.argv[1:]; "
            "trio.run(_workload, kind, int(n), int(sends), Path(folder))"
        )
        totals = callgrind([sys.executable, "-c", code, kind, str(n), str(sends), tmp])
    return totals[0], sum(totals)


def callgrind(argv: list[str]) -> list[int]:
    """The instructions each thread of ``argv`` ran under callgrind, the main thread first."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--separate-threads=yes",
                "--dump-instr=no",
                "--collect-jumps=no",
                f"--callgrind-out-file={out}",
                *argv,
            ],
            check=True,
            capture_output=True,
        )
        # One file per thread, ``callgrind.out-01`` the main (Trio) thread's.
        files = sorted(
            Path(tmp).glob("callgrind.out-*"), key=lambda path: int(path.name.rsplit("-", 1)[1])
        )
        return [_summary(path) for path in files]


def _summary(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"{path.name} holds no instruction count")


def _per_send(kind: str, n: int, sends: int) -> tuple[float, float]:
    main_few, all_few = _count(kind, n, sends)
    main_more, all_more = _count(kind, n, 3 * sends)
    counted = n * 2 * sends
    return (main_more - main_few) / counted, (all_more - all_few) / counted


def run(args: argparse.Namespace) -> Figures:
    """The agents' instructions per send, beside the store's alone."""
    if shutil.which("valgrind") is None:
        msg = (
            "the instructions benchmark counts with valgrind, which is not on the PATH: "
            "install it (Debian: apt-get install valgrind); no figures were measured"
        )
        raise ConfigError(msg)
    quick = bool(getattr(args, "quick", False))
    n, sends = (32, 1) if quick else (256, 2)
    main, every = _per_send("sessions", n, sends)
    raw_main, raw_every = _per_send("raw", n, sends)
    return {
        "sessions": n,
        "instructions_per_send_main": round(main),
        "instructions_per_send_all": round(every),
        "raw_instructions_per_send_main": round(raw_main),
        "raw_instructions_per_send_all": round(raw_every),
        "main_ratio_to_raw": round(main / raw_main, 2) if raw_main > 0 else 0.0,
    }
