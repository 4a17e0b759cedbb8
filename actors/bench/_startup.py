"""Start-up: the CPU a fresh process spends importing powertrio and running a short command.

Every figure is the median, over ``runs`` fresh interpreters, of the CPU time (user + system,
in milliseconds) of one child process from its start to its exit, read from
``getrusage(RUSAGE_CHILDREN)`` around it: CPU rather than wall time, because the machines
are shared and a busy neighbour stretches wall time, not the work done.

* ``python_pass_cpu_ms``: ``python -c pass``, the interpreter's own floor.
* ``import_httpx_cpu_ms``, ``import_trio_httpx_cpu_ms``: the libraries every powertrio
  process needs; ``import actors`` is judged beside ``import trio, httpx``.
* ``import_actors_cpu_ms``: ``import actors`` (names load on first use).
* ``import_agent_api_cpu_ms``: ``from actors import AgentSpec, spawn_agent, tool``, what a
  program that runs agents imports.
* ``help_cpu_ms``: ``powertrio --help``.
* ``sessions_cpu_ms``, ``log_cpu_ms``: ``powertrio sessions`` and ``powertrio log ID`` on
  the log of one demo run (made once, before the figures).
* ``run_demo_cpu_ms``: ``powertrio run --demo TASK`` in a new directory, its model
  answering at once.

The module needs only the standard library and runs each child with this interpreter and
environment, so ``PYTHONPATH=OTHER python actors/bench/_startup.py`` measures another
checkout with the same code. Run it with ``python -m actors.bench startup [--json] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

POWERTRIO = "import sys; from actors.cli import main; sys.argv[0] = 'powertrio'; sys.exit(main())"
"""What the ``powertrio`` console script runs (``-c`` makes ``sys.argv[1:]`` its arguments)."""

IMPORTS: dict[str, str] = {
    "python_pass_cpu_ms": "pass",
    "import_httpx_cpu_ms": "import httpx",
    "import_trio_httpx_cpu_ms": "import trio, httpx",
    "import_actors_cpu_ms": "import actors",
    "import_agent_api_cpu_ms": "from actors import AgentSpec, spawn_agent, tool",
}
"""Figure -> the code a fresh interpreter runs."""


_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "POWERTRIO_DEMO_DELAY": "0",
}
"""The children's environment: bytecode written, as an installed program's imports find
theirs, and the demo model answering at once (its pacing is wall time, not CPU)."""


def cpu_ms(code: str, *args: str, cwd: Path | None = None) -> float:
    """The CPU milliseconds of one ``python -c code args...`` child, start to exit.

    Raises:
        subprocess.CalledProcessError: the child failed (its output is in the error).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        check=True,
        env=_ENV,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used * 1000


def median_cpu_ms(runs: int, code: str, *args: str, cwd: Path | None = None) -> float:
    """The median of :func:`cpu_ms` over ``runs`` children, after one unmeasured run that
    warms the file cache and writes the bytecode (when there are several to take)."""
    if runs > 1:
        cpu_ms(code, *args, cwd=cwd)
    return round(statistics.median(cpu_ms(code, *args, cwd=cwd) for _ in range(runs)), 1)


def _demo_log(directory: Path) -> str:
    """Run the demo once in ``directory`` and return its root session's id."""
    subprocess.run(
        [sys.executable, "-c", POWERTRIO, "run", "--demo", "Compare two ideas."],
        cwd=directory,
        capture_output=True,
        check=True,
        env=_ENV,
    )
    listed = subprocess.run(
        [sys.executable, "-c", POWERTRIO, "sessions", "--json"],
        cwd=directory,
        capture_output=True,
        check=True,
        env=_ENV,
    )
    roots = [s for s in json.loads(listed.stdout) if s.get("parent_id") is None]
    return str(roots[0]["session_id"])


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    runs = 1 if args.quick else 11
    figures: dict[str, float | int | str] = {}
    # Every child starts in an empty directory: ``-c`` puts the working directory first
    # on ``sys.path``, and a checkout there would win over the one being measured.
    with tempfile.TemporaryDirectory() as directory:
        empty = Path(directory) / "empty"
        empty.mkdir()
        for name, code in IMPORTS.items():
            figures[name] = median_cpu_ms(runs, code, cwd=empty)
        figures["help_cpu_ms"] = median_cpu_ms(runs, POWERTRIO, "--help", cwd=empty)
        log = Path(directory) / "log"
        log.mkdir()
        session = _demo_log(log)
        figures["sessions_cpu_ms"] = median_cpu_ms(runs, POWERTRIO, "sessions", cwd=log)
        figures["log_cpu_ms"] = median_cpu_ms(runs, POWERTRIO, "log", session, cwd=log)
        demos = []
        for i in range(runs):
            fresh = Path(directory) / f"demo{i}"
            fresh.mkdir()
            demos.append(cpu_ms(POWERTRIO, "run", "--demo", "Compare two ideas.", cwd=fresh))
        figures["run_demo_cpu_ms"] = round(statistics.median(demos), 1)
    figures["startup_runs"] = runs
    return figures


if __name__ == "__main__":  # the same figures for whatever checkout PYTHONPATH names
    parser = argparse.ArgumentParser(prog="python actors/bench/_startup.py")
    parser.add_argument("--quick", action="store_true")
    for name, value in run(parser.parse_args()).items():
        print(f"{name:<26}  {value}")
