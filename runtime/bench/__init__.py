"""Benchmarks: each suite prints its figures beside a physical-limit baseline from the same run.

Run ``python -m runtime.bench SUITE [--json]``. Suites live in private modules named
``_<suite>.py`` exposing ``run(args) -> dict[str, float | int | str]``.
"""

from __future__ import annotations

SUITES: dict[str, str] = {
    "actors": "runtime.bench._actors",
    "log": "runtime.bench._log",
    "agents": "runtime.bench._agents",
    "providers": "runtime.bench._providers",
}
