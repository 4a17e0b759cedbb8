"""Kernel benchmarks: each figure is printed beside a physical-limit baseline of the same run.

Run ``python -m runtime.bench SUITE [--json]`` with ``SUITE`` one of ``actors``,
``capacity`` (the server's CPU per append, lease round and notify), ``cluster`` (the
PostgreSQL store), ``fleet_sim`` (a simulated fleet of hundreds of nodes under faults:
``--nodes 200 --sessions 1000000``), ``log`` and ``outage`` (the PostgreSQL store through
a server restart; the agent suites live in ``actors.bench``, which runs these too). Suites
live in private modules named ``_<suite>.py`` exposing
``run(args) -> dict[str, float | int | str]``.
"""

from __future__ import annotations

from ._main import Figures as Figures
from ._main import in_fresh_process as in_fresh_process
from ._main import main as main
from ._main import rss_bytes as rss_bytes

SUITES: dict[str, str] = {
    "actors": "runtime.bench._actors",
    "capacity": "runtime.bench._capacity",
    "cluster": "runtime.bench._cluster",
    "fleet_sim": "runtime.bench._fleet_sim",
    "log": "runtime.bench._log",
    "outage": "runtime.bench._outage",
}
"""Suite name -> the module whose ``run(args)`` measures it."""
