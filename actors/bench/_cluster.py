"""``python -m actors.bench cluster``: a fleet of node processes on one PostgreSQL.

Adds to the kernel's ``cluster`` figures (``append_ratio``: the store beside raw psycopg
inserts, from ``runtime.bench``) what needs sessions, so it lives with the agents:

- ``sends_per_s_1_node`` and ``sends_per_s_3_nodes``: sends answered per second (one
  instant tool call each) by one node process driving every session, and by three each
  driving a third (about two thirds of their sends then go through another node's
  inbox). All processes share the machine's cores: on 2 cores three nodes are CPU-bound,
  so this shows the cost of relaying, not a scale-out.
- ``failover_s_p50`` (and ``_max``): seconds from a node's SIGKILL, while it drives sends
  to every session, to each of its own sessions answering a send made through another
  node (lease expiry, takeover, resume of the interrupted run, then the probe);
  bounded by the lease TTL (``ttl_s``) plus one renewal period plus that work.
- ``lost`` (runs the log started that never ended, and probes never answered) and
  ``duplicates`` (tool calls run twice, runs ended twice) of that kill run: both 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from runtime.bench import Figures
from runtime.bench._cluster import run as kernel_run

from ._child import NodeProcess

__all__ = ["run"]

TTL = 3.0
"""The nodes' lease TTL (``Node``'s default)."""


def _nodes(dsn: str, schema: str, names: str, base: Path, env: dict[str, str]) -> list[NodeProcess]:
    module = "actors.bench._cluster_node"
    children = [
        NodeProcess(
            name,
            [sys.executable, "-m", module, dsn, schema, name, str(TTL)],
            env,
            base / f"{name}.log",
        )
        for name in names
    ]
    for child in children:
        child.wait_for("ready")
    return children


def _drive(children: list[NodeProcess], sessions: int, seconds: float) -> float:
    """Sends answered per second, every node driving its share of the sessions at once."""
    bounds = [sessions * i // len(children) for i in range(len(children) + 1)]
    for child, first, last in zip(children, bounds, bounds[1:], strict=False):
        child.tell(f"drive {first} {last} {seconds}")
    answered = 0
    for child in children:
        answered += int(child.wait_for("drove")[-1].split()[1])
    return answered / seconds


def _settled(dsn: str, schema: str) -> tuple[int, int, int]:
    """Runs started, runs ended, distinct runs ended (from the log)."""
    import psycopg  # noqa: PLC0415  # the optional extra

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (schema,))
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE type = 'session.run_started'), "
            "count(*) FILTER (WHERE type = 'session.run_finished') FROM events"
        ).fetchone()
        ended = conn.execute(
            "SELECT count(DISTINCT (stream, convert_from(data, 'UTF8')::json->>'run_id')) "
            "FROM events WHERE type = 'session.run_finished'"
        ).fetchone()
    assert row is not None
    assert ended is not None
    return int(row[0]), int(row[1]), int(ended[0])


def _cluster(dsn: str, *, quick: bool) -> Figures:
    sessions = 30 if quick else 99
    seconds = 2.0 if quick else 5.0
    with tempfile.TemporaryDirectory(prefix="powertrio-bench-") as tmp:
        base = Path(tmp)
        tools = base / "tools.jsonl"  # of the fleet's run (run ids restart per process)
        one = _nodes(dsn, "one", "a", base, dict(os.environ))
        try:
            single = _drive(one, sessions, seconds)
        finally:
            for child in one:
                child.close()
        three = _nodes(dsn, "three", "abc", base, {**os.environ, "BENCH_TOOL_LOG": str(tools)})
        try:
            time.sleep(TTL)  # the first node took every shard: let the others take theirs
            fleet = _drive(three, sessions, seconds)
            victim, prober, _ = three
            victim.tell("owned")
            owned = victim.wait_for("owned")[-1].removeprefix("owned").strip()
            keys = [k for k in owned.split(",") if k]
            # Sends to every session in flight at the kill, the victim's own among them.
            victim.tell(f"drive 0 {sessions} 60")
            time.sleep(0.5)
            killed_at = time.time()
            victim.proc.send_signal(signal.SIGKILL)
            prober.tell("probe " + ",".join(keys))
            prober.wait_for("probe done", seconds=60)
            probed = [line for line in prober.lines() if line.startswith("probed ")]
            deadline = time.monotonic() + 60
            while True:
                started, ended, distinct = _settled(dsn, "three")
                if started == ended or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            for child in three:
                child.close()
        failovers = sorted(float(line.split()[2]) - killed_at for line in probed)
        # A call is its key (stable across resumes) within its send (the task names it).
        lines = [json.loads(line) for line in tools.read_text().splitlines()]
        runs = Counter((line["call"], line["task"]) for line in lines)
    return {
        "sessions": sessions,
        "ttl_s": TTL,
        "sends_per_s_1_node": single,
        "sends_per_s_3_nodes": fleet,
        "failover_sessions": len(keys),
        "failover_s_p50": statistics.median(failovers) if failovers else float("nan"),
        "failover_s_max": failovers[-1] if failovers else float("nan"),
        "lost": (started - ended) + (len(keys) - len(probed)),
        "duplicates": sum(n - 1 for n in runs.values()) + (ended - distinct),
    }


def run(args: argparse.Namespace) -> Figures:
    """The kernel's store figures, then the fleet's (see the module's docstring)."""
    from runtime.testing import postgres_missing, running_postgres  # noqa: PLC0415

    figures = kernel_run(args)
    if "skipped" in figures or postgres_missing() is not None:
        return figures
    with running_postgres(durable=True, database="nodes") as server:
        figures.update(_cluster(server.dsn(), quick=args.quick))
    return figures
