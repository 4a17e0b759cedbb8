"""The ``powertrio`` command line run in this process: ``main(argv)`` with its output captured.

A subprocess pays the import of the command's modules for every call; the
behaviour tests call ``main`` here instead, with the same working directory, environment,
exit code, stdout and stderr a real run would have. Start-up, signals, exit codes of the
console script and the terminal keep a few real subprocess tests of their own.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from actors.cli import main

SCRIPT = Path(sys.executable).parent / "powertrio"
"""The installed console script (``pip install -e .`` puts it beside the interpreter)."""

_PROVIDER_PREFIXES = ("POWERTRIO_", "OPENAI_", "ANTHROPIC_")


def command() -> list[str]:
    """How to start the CLI in a subprocess: the console script, else its entry point."""
    if SCRIPT.exists():
        return [str(SCRIPT)]
    return [sys.executable, "-c", "from actors.cli import main; raise SystemExit(main())"]


def environment(**extra: str) -> dict[str, str]:
    """This environment without any provider settings, with an instant demo model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PROVIDER_PREFIXES)}
    env.update({"POWERTRIO_DEMO_DELAY": "0", "COLUMNS": "200"}, **extra)
    return env


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is exactly ``values`` inside the block, and as it was after it."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``powertrio ARGS`` in this process, in ``cwd``, and return what it did.

    The result has the shape of :func:`subprocess.run`'s, so a test reads ``returncode``,
    ``stdout`` and ``stderr`` as it would from a real process.
    """
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environ(environment() if env is None else env),
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(
        ["powertrio", *args], code, stdout.getvalue(), stderr.getvalue()
    )
