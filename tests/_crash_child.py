"""Crash-test child: append from many tasks and report each acknowledged append on stdout.

Usage: ``python tests/_crash_child.py DB_PATH WRITERS``. Prints ``ready`` once the store is
open, then one ``<stream> <version>`` line per acknowledged append, written with a single
``os.write`` (atomic on a pipe) only after ``append`` returned. The parent kills it with
SIGKILL at a random moment.
"""

from __future__ import annotations

import os
import sys

import trio

from runtime import NewEvent, SqliteEventStore, open_sqlite_store


def payload(stream: str, version: int, end: int) -> bytes:
    """The bytes the parent expects at ``stream``/``version``; ``end`` is the batch's last."""
    pad = b"p" * (1500 if version % 7 == 0 else 10)  # some go to the blob table
    return b'{"s":"%s","v":%d,"end":%d,"pad":"%s"}' % (stream.encode(), version, end, pad)


async def writer(store: SqliteEventStore, index: int) -> None:
    """Append batches of 1-3 events to one stream forever, reporting each ack."""
    stream = f"w/{index}"
    version = await store.stream_version(stream)
    while True:
        size = 1 + (version + index) % 3
        end = version + size
        events = [
            NewEvent(type="crash.test", schema_version=1, data=payload(stream, v, end))
            for v in range(version + 1, end + 1)
        ]
        result = await store.append(stream, events, version)
        version = result.version
        os.write(1, f"{stream} {version}\n".encode())


async def main(path: str, writers: int) -> None:
    """Open the store and run the writers until killed."""
    async with open_sqlite_store(path, blob_threshold=1024, verify=False) as store:
        os.write(1, b"ready\n")
        async with trio.open_nursery() as nursery:
            for index in range(writers):
                nursery.start_soon(writer, store, index)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
