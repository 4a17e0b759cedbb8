"""The capacity suite measures the server's own CPU per append, lease round and notify."""

from __future__ import annotations

import argparse

import pytest

from runtime.bench import SUITES
from runtime.bench._capacity import run
from runtime.testing import postgres_missing


@pytest.mark.slow
def test_the_quick_capacity_suite_reports_the_servers_cost_per_unit() -> None:
    if postgres_missing() is not None:
        pytest.skip(str(postgres_missing()))
    assert SUITES["capacity"] == "runtime.bench._capacity"
    figures = run(argparse.Namespace(quick=True))
    assert set(figures) == {
        "store_appends_per_s",
        "pg_cpu_us_per_append",
        "appends_per_pg_core_s",
        "lease_round_us_21_shards",
        "lease_round_us_4096_shards",
        "lease_round_us_per_shard",
        "lease_round_us_fixed",
        "notify_us_1_listener",
        "notify_us_32_listeners",
        "notify_us_per_listener",
    }
    assert figures["store_appends_per_s"] > 0
    assert figures["pg_cpu_us_per_append"] > 0
    # Renewing 4096 leases costs the server more than renewing 21.
    # (The kernel counts CPU in 10 ms ticks: a quick run's smallest figures may read 0.)
    assert figures["lease_round_us_4096_shards"] > figures["lease_round_us_21_shards"] >= 0
    assert figures["notify_us_32_listeners"] > figures["notify_us_1_listener"] >= 0
