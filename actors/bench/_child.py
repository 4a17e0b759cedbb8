"""A node process driven through its stdin, for the cluster benchmark and its kill test."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import IO


class NodeProcess:
    """One child process: lines written to its stdin, its output and errors in a file
    read line by line (a file, not a pipe: a child killed mid-line loses nothing)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._out: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=self._out, stderr=subprocess.STDOUT, env=env
        )

    def lines(self) -> list[str]:
        """What it printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def tell(self, line: str) -> None:
        """Write one line to its stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, prefix: str, count: int = 1, seconds: float = 120) -> list[str]:
        """Its lines starting with ``prefix``, once there are ``count``.

        Raises:
            RuntimeError: it exited, or ``seconds`` passed, first (with its last lines).
        """
        deadline = time.monotonic() + seconds
        while True:
            found = [line for line in self.lines() if line.startswith(prefix)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline or self.proc.poll() is not None:
                tail = " | ".join(self.lines()[-5:])
                raise RuntimeError(f"node {self.name} did not print {prefix!r}: {tail}")
            time.sleep(0.02)

    def close(self) -> None:
        """Kill it if it still runs, and wait for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._out.close()
