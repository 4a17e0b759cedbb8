"""``python -m actors.bench fleet_sim`` (a kernel suite): hundreds of simulated nodes, faults.

Runs ``runtime._cluster._fleet_sim``: the node's own lease and placement rules, a seeded
scheduler, a virtual clock, an in-memory model of the lease table's semantics, and
single failures one after another (a node crashing and restarting, pausing, cut off
from the database, losing its replies, running a skewed clock; the database slow or
unavailable). The simulation checks its invariants after every event and stops at the
first broken one; the figures:

- ``max_owners_per_shard_epoch``: the most nodes that believed they held one shard at
  one epoch (must be 1); ``late_fenced_appends``: appends committed after their lease
  was taken over or handed back (0); ``fenced_appends``: stale writes the fence refused;
- ``reowned_s_p99_after_failure`` (and ``_max``): seconds a session waited for a running
  owner after a failure, beside ``reowned_bound_s`` (TTL plus the rounds and latencies
  the design allows);
- ``max_load_over_fair_share``: the most sessions a node held, settled, over the
  sessions per running node; ``max_shards_over_fair_share`` (0: never over);
- ``moves_per_failure``: shards that changed owner per failure (``moves_after_<kind>``
  by kind; the start, where the first node takes everything and hands most of it back,
  is not a failure); ``settled_moves``: moves while settled (flapping, 0);
- ``steps_per_s``: simulated events per second of this process.
"""

from __future__ import annotations

import argparse
from typing import TypeVar

from .._cluster._fleet_sim import SimConfig, SimViolation, simulate, single_failures
from ._main import Figures

__all__ = ["add_arguments", "run"]

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fleet's size, the simulated time and the seed."""
    parser.add_argument("--nodes", type=int, default=None, help="nodes (200; --quick: 20)")
    parser.add_argument("--sessions", type=int, default=None, help="sessions (1,000,000)")
    parser.add_argument("--shards", type=int, default=None, help="shards (4096; --quick: 512)")
    parser.add_argument("--seconds", type=float, default=None, help="virtual seconds (600)")
    parser.add_argument("--ttl", type=float, default=None, help="lease TTL in seconds (3)")
    parser.add_argument("--seed", type=int, default=None, help="the scheduler's seed (1)")


def run(args: argparse.Namespace) -> Figures:
    """Simulate the fleet; its figures."""
    quick = bool(getattr(args, "quick", False))

    def option(name: str, default: T, quick_default: T) -> T:
        # ``powertrio bench`` runs every suite with ``quick`` and ``json`` alone.
        value = getattr(args, name, None)
        return (quick_default if quick else default) if value is None else value

    nodes = option("nodes", 200, 20)
    sessions = option("sessions", 1_000_000, 100_000)
    seconds = option("seconds", 600.0, 120.0)
    shards = option("shards", 4096, 512)
    ttl = option("ttl", 3.0, 3.0)
    seed = option("seed", 1, 1)
    faults = single_failures(nodes, seconds, ttl=ttl, seed=seed)
    config = SimConfig(
        nodes=nodes,
        shards=shards,
        sessions=sessions,
        seed=seed,
        duration=seconds,
        ttl=ttl,
        faults=faults,
    )
    try:
        result = simulate(config)
    except SimViolation as exc:  # a broken invariant: the run failed, say which
        raise RuntimeError(str(exc)) from exc
    figures: Figures = {
        "nodes": nodes,
        "shards": shards,
        "sessions": sessions,
        "virtual_s": seconds,
        "failures": sum(1 for f in faults if f.kind != "skew"),
        "max_owners_per_shard_epoch": result.max_owners_per_shard_epoch,
        "late_fenced_appends": result.late_fenced,
        "fenced_appends": result.fenced,
        "committed_appends": result.commits,
        "reowned_s_p99_after_failure": round(result.reowned_s_p99, 3),
        "reowned_s_max_after_failure": round(max((w for w, _ in result.reowned_s), default=0), 3),
        "reowned_bound_s": round(result.reowned_bound_s, 3),
        "max_load_over_fair_share": round(result.max_load_over_fair_share, 4),
        "max_shards_over_fair_share": result.max_shards_over_fair_share,
        "moves_per_failure": round(result.moves_per_failure, 2),
        "settled_moves": result.settled_moves,
    }
    for kind, moves in result.moves_by_fault.items():
        figures[f"moves_after_{kind}"] = moves
    figures["steps"] = result.steps
    figures["steps_per_s"] = round(result.steps_per_s)
    figures["digest"] = result.digest[:16]
    return figures
