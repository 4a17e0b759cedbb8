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
* ``allocations_per_send_main`` beside ``raw_allocations_per_send_main``: the Trio
  thread's calls of CPython's object allocator (``_PyObject_Malloc`` and
  ``_PyObject_Calloc``, counted by callgrind): every object a send makes, freed again or
  not.

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


_ALLOCATORS = frozenset({"_PyObject_Malloc", "_PyObject_Calloc"})
"""CPython's object allocator (every ``PyObject_Malloc``, ``PyMem_Malloc`` and object
creation goes through one of them)."""


def _count(kind: str, n: int, sends: int) -> tuple[int, int, int]:
    """Instructions of the Trio thread and of all threads, and the Trio thread's
    allocations, of one run under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import sys, trio; from pathlib import Path; "
            "from actors.bench._instructions import _workload; "
            "kind, n, sends, folder = sys.argv[1:]; "
            "trio.run(_workload, kind, int(n), int(sends), Path(folder))"
        )
        totals, allocations = callgrind_counts(
            [sys.executable, "-c", code, kind, str(n), str(sends), tmp]
        )
    return totals[0], sum(totals), allocations[0]


def callgrind(argv: list[str]) -> list[int]:
    """The instructions each thread of ``argv`` ran under callgrind, the main thread first."""
    return callgrind_counts(argv)[0]


def callgrind_counts(argv: list[str]) -> tuple[list[int], list[int]]:
    """The instructions each thread of ``argv`` ran under callgrind, and its calls of the
    object allocator, the main thread first."""
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
        texts = [path.read_text() for path in files]
        return [_summary(text, path.name) for text, path in zip(texts, files, strict=True)], [
            _calls(text, _ALLOCATORS) for text in texts
        ]


def _summary(text: str, name: str) -> int:
    for line in text.splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"{name} holds no instruction count")


def _calls(text: str, functions: frozenset[str]) -> int:
    """The calls of ``functions`` a callgrind profile records, from every caller.

    A callee is named once, ``cfn=(id) name`` (or ``fn=``), then by its id alone; the
    line after a ``cfn=`` is its ``calls=N ...``.
    """
    names: dict[str, str] = {}
    total = 0
    counting = False
    for line in text.splitlines():
        if counting and line.startswith("calls="):
            total += int(line[6:].split(None, 1)[0])
        counting = False
        if line.startswith(("fn=(", "cfn=(")):
            ref, _, name = line.partition("=")[2].partition(" ")
            if name:
                names[ref] = name
            counting = line.startswith("cfn=") and names.get(ref) in functions
    return total


def _per_send(kind: str, n: int, sends: int) -> tuple[float, float, float]:
    main_few, all_few, alloc_few = _count(kind, n, sends)
    main_more, all_more, alloc_more = _count(kind, n, 3 * sends)
    counted = n * 2 * sends
    return (
        (main_more - main_few) / counted,
        (all_more - all_few) / counted,
        (alloc_more - alloc_few) / counted,
    )


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
    main, every, allocations = _per_send("sessions", n, sends)
    raw_main, raw_every, raw_allocations = _per_send("raw", n, sends)
    return {
        "sessions": n,
        "instructions_per_send_main": round(main),
        "instructions_per_send_all": round(every),
        "raw_instructions_per_send_main": round(raw_main),
        "raw_instructions_per_send_all": round(raw_every),
        "main_ratio_to_raw": round(main / raw_main, 2) if raw_main > 0 else 0.0,
        "allocations_per_send_main": round(allocations),
        "raw_allocations_per_send_main": round(raw_allocations),
    }
