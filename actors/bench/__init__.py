"""Benchmarks of the agents, beside the kernel's: every figure next to its same-run baseline.

Run ``python -m actors.bench SUITE [--json] [--quick]`` with ``SUITE`` one of ``actors``,
``log`` (the kernel's suites, from ``runtime.bench``), ``cluster`` (the kernel's store
figures, then a fleet of node processes: sends/s, failover, lost, duplicates),
``agents``, ``providers``, ``sse`` (CPU to read one SSE event of 8 to 50 MB beside
the raw bytes), ``longevity`` (what a session of months costs), ``console``
(the web console's log page on a session of a million events), ``limits`` (the fleet
limiter), ``fleet`` (a node's drain), ``peers`` (the agents' sends beside power-loop's,
the baseline our performance goals are stated against; needs the ``bench`` extra) and
``instructions`` (the agents' instructions per send beside the store's alone, counted by
valgrind: figures that hold still while the machine's speed moves) and ``startup`` (the
CPU of a fresh process importing powertrio and running ``powertrio --help`` and short
commands, beside ``import trio, httpx``).
"""

from __future__ import annotations

from runtime.bench import SUITES as _KERNEL_SUITES

SUITES: dict[str, str] = {
    **_KERNEL_SUITES,
    "cluster": "actors.bench._cluster",
    "agents": "actors.bench._agents",
    "providers": "actors.bench._providers",
    "sse": "actors.bench._sse",
    "longevity": "actors.bench._longevity",
    "console": "actors.bench._console",
    "limits": "actors.bench._limits",
    "fleet": "actors.bench._fleet",
    "peers": "actors.bench._peers",
    "instructions": "actors.bench._instructions",
    "startup": "actors.bench._startup",
}
"""Suite name -> the module whose ``run(args)`` measures it: the kernel's and the agents'."""
