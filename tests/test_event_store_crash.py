"""Crash safety with real processes: SIGKILL a writing child, then check the file."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
import trio
from _depth import repeats

from runtime import NewEvent, open_sqlite_store

CHILD = Path(__file__).with_name("_crash_child.py")
ROOT = Path(__file__).resolve().parent.parent
KILLS = repeats(20, 200)
"""Kills of a busy writer: 20 in the everyday run, 200 in the deep profile."""
WRITERS = 12


def _run_child_until_killed(path: Path, rng: random.Random) -> dict[str, int]:
    """Start the child, kill it at a random moment, return the highest acked version per stream."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), str(WRITERS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[bytes] = []
    ready = threading.Event()

    def drain() -> None:
        # Keep the pipe empty so the child never blocks on a full pipe.
        assert proc.stdout is not None
        for line in proc.stdout:
            if line == b"ready\n":
                ready.set()
            else:
                lines.append(line)
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(30), "the child did not start"
        time.sleep(rng.uniform(0.0, 0.12))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    assert proc.stderr is not None
    errors = proc.stderr.read()
    proc.stderr.close()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, errors.decode(errors="replace")
    acked: dict[str, int] = {}
    for line in lines:
        stream, version = line.decode().split()
        acked[stream] = max(acked.get(stream, 0), int(version))
    return acked


async def _verify(path: Path, acked: dict[str, int]) -> int:
    """Check every acked event is present, versions have no gaps, batches are whole."""
    async with open_sqlite_store(path, blob_threshold=1024) as store:
        everything = await store.read_all()
        positions = [e.position for e in everything]
        assert positions == sorted(set(positions)), "positions must strictly increase"
        for stream, version in acked.items():
            assert await store.stream_version(stream) >= version, (stream, version)
        for info in await store.streams():
            events = await store.read(info.stream)
            assert [e.version for e in events] == list(range(1, info.version + 1))
            for event in events:
                body = orjson.loads(event.data)
                assert (body["s"], body["v"]) == (event.stream, event.version)
            # Appends are all-or-nothing: the last event closes its batch.
            assert orjson.loads(events[-1].data)["end"] == events[-1].version
        assert await store.integrity_check() == []
        return len(everything)


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_event(tmp_path: Path) -> None:
    """Kill a busy writer again and again; every acknowledged event survives, in order, once."""
    rng = random.Random(os.environ.get("CRASH_SEED", "powertrio"))
    path = tmp_path / "crash.db"
    all_acked: dict[str, int] = {}
    runs_with_acks = 0
    stored = 0
    for _ in range(KILLS):
        acked = _run_child_until_killed(path, rng)
        runs_with_acks += bool(acked)
        for stream, version in acked.items():
            all_acked[stream] = max(all_acked.get(stream, 0), version)
        stored = trio.run(_verify, path, all_acked)
    assert stored >= sum(all_acked.values())
    assert runs_with_acks > 0, "the child never got to acknowledge an append"


def _tear(wal: Path, keep: int, how: str) -> None:
    """Damage the WAL after its first ``keep`` bytes, as a killed writer may leave it."""
    if how == "cut":
        size = wal.stat().st_size
        os.truncate(wal, keep + (size - keep) // 2)
    else:
        # The tail's frames are whole but wrong: their checksums no longer match.
        with open(wal, "r+b") as file:
            file.seek(keep + 100)
            file.write(b"\xff" * 64)


@pytest.mark.parametrize("how", ["cut", "garbled"])
async def test_a_torn_wal_tail_is_dropped_on_open(tmp_path: Path, how: str) -> None:
    """A log whose WAL ends inside its last transaction opens cleanly: the transactions
    before it are all there, nothing of the torn one is visible, and appends go on."""
    path = tmp_path / "live.db"
    copy = tmp_path / "copy.db"
    wal = Path(f"{path}-wal")

    def event(n: int) -> NewEvent:
        return NewEvent(type="t", schema_version=1, data=b'{"n":%d,"p":"%s"}' % (n, b"x" * 300))

    # No checkpoint: every transaction stays in the WAL, as in a busy writer's last moments.
    async with open_sqlite_store(path, checkpoint_interval=3600) as store:
        await store.append("a", [event(1)], 0)
        await store.append("b", [event(2), event(3), event(4)], 0)
        kept = (await trio.Path(wal).stat()).st_size
        await store.append("c", [event(5), event(6), event(7)], 0)
        assert (await trio.Path(wal).stat()).st_size > kept
        # What SIGKILL leaves on disk: the database file and its WAL as they are now (the
        # shared-memory index is rebuilt from the WAL by whoever opens the file next).
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, f"{copy}-wal")
    _tear(Path(f"{copy}-wal"), kept, how)

    async with open_sqlite_store(copy) as store:
        assert await store.integrity_check() == []
        assert [(e.stream, e.version, e.position) for e in await store.read_all()] == [
            ("a", 1, 1),
            ("b", 1, 2),
            ("b", 2, 3),
            ("b", 3, 4),
        ]
        assert [i.stream for i in await store.streams()] == ["a", "b"]
        assert await store.stream_version("c") == 0
        assert await store.head_position() == 4
        result = await store.append("c", [event(5)], 0)
        assert (result.version, result.first_position) == (1, 5)
    async with open_sqlite_store(copy) as store:
        assert [e.position for e in await store.read_all()] == [1, 2, 3, 4, 5]
