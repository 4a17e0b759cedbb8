"""The fleet's lease and placement rules under a simulated fleet: a virtual clock, a seeded
scheduler, an in-memory lease table, and faults (crashes, pauses, partitions, lost
replies, skewed clocks, a slow or unavailable database)."""

from __future__ import annotations

import argparse
import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._cluster import _fleet_sim
from runtime._cluster._fleet_sim import FAULT_KINDS, Fault, SimConfig, SimViolation, simulate
from runtime._cluster._placement import Round, fair_share, pick_free, settle_round, to_take

TTL = 3.0


def test_the_rules_the_node_runs() -> None:
    assert fair_share(16, 3) == 6
    assert fair_share(16, 0) == 16
    assert to_take(6, 4, take=True) == 2
    assert to_take(6, 4, take=False) == 0
    assert to_take(6, 9, take=True) == 0
    assert pick_free([1, 3, 5, 7], {3}, 2) == [1, 5]
    # Over its share, a node keeps the lowest shards and hands back the highest; a
    # lease whose epoch moved is lost, a surplus lease renewed stays surplus.
    settled = settle_round({0: 1, 1: 1, 2: 4}, {9: 2}, {0: 1, 1: 1, 5: 3, 7: 1, 9: 2}, 2)
    assert settled.held == {0: 1, 1: 1}
    assert settled.surplus == {9: 2, 5: 3, 7: 1}
    assert settled.lost == [2]
    assert settled.changed


def test_a_takeover_skips_a_row_an_append_in_flight_holds() -> None:
    db = _fleet_sim._Database(shards=2, ttl=TTL)
    held, _, _ = db.lease_tick("a", {}, True, 0.0)
    assert held == {0: 1, 1: 1}
    assert db.begin_append("a", 0, 1, 1.0)
    # a's leases expire; b takes only the row no transaction holds.
    held, fair, taken = db.lease_tick("b", {}, True, 10.0)
    assert (held, fair, taken) == ({1: 2}, 2, [1])
    db.end_append(0)
    assert db.lease_tick("b", held, True, 10.5)[0] == {0: 2, 1: 2}
    # a's stale lease: the fence refuses its append.
    assert not db.begin_append("a", 0, 1, 10.6)


def test_a_hand_back_skips_a_row_an_append_in_flight_holds() -> None:
    db = _fleet_sim._Database(shards=2, ttl=TTL)
    held, _, _ = db.lease_tick("a", {}, True, 0.0)
    assert db.begin_append("a", 0, 1, 0.5)
    # a hands both back: the row its append holds stays a's until the append commits.
    assert db.release("a", held) == ([1], {0: 1})
    assert (db.owner, db.epoch) == (["a", None], [1, 1])
    db.end_append(0)
    assert db.release("a", {0: 1}) == ([0], {})
    # A stale hand-back (another node took the shard since) changes nothing.
    assert db.lease_tick("b", {}, True, 1.0)[0] == {0: 2}
    assert db.release("a", {0: 1}) == ([], {})


def _busy() -> SimConfig:
    """Three nodes start at once and balance (each hands shards back) under many appends
    of slow database calls: some hand-back meets an append in flight."""
    return SimConfig(
        nodes=3, shards=16, sessions=200, seed=0, duration=10.0, latency=0.02, append_every=0.02
    )


def test_no_append_commits_after_its_node_handed_the_lease_back() -> None:
    result = simulate(_busy())
    assert result.late_fenced == 0
    assert result.commits > 1000


def test_a_hand_back_that_ignores_appends_in_flight_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def regardless(
        db: _fleet_sim._Database, node: str, shards: dict[int, int]
    ) -> tuple[list[int], dict[int, int]]:
        db.key_share, held = {}, db.key_share
        try:
            return release(db, node, shards)
        finally:
            db.key_share = held

    release = _fleet_sim._Database.release
    monkeypatch.setattr(_fleet_sim._Database, "release", regardless)
    with pytest.raises(SimViolation, match=r"committed to shard \d+ at epoch \d+ after it handed"):
        simulate(_busy())


def _crash(nodes: int = 3, shards: int = 16) -> SimConfig:
    return SimConfig(
        nodes=nodes,
        shards=shards,
        sessions=2000,
        seed=7,
        duration=60.0,
        faults=(Fault("crash", 12.0, 10.0, node=1), Fault("pause", 28.0, 4.5, node=2)),
    )


def test_after_a_crash_every_session_is_owned_again_within_the_lease_and_a_round() -> None:
    result = simulate(_crash())
    assert result.max_owners_per_shard_epoch == 1
    assert result.late_fenced == 0
    # The crashed node's sessions, then the paused one's, waited at most a TTL and a
    # round (and the latencies); the paused node's stale writes were refused.
    waited = max(w for w, _ in result.reowned_s)
    assert TTL < waited <= result.reowned_bound_s
    assert sum(sessions for _, sessions in result.reowned_s) > 0
    assert result.fenced > 0
    assert result.settled_moves == 0
    assert result.max_shards_over_fair_share <= 0
    assert result.settled_checks > 0
    print(
        f"reowned max {waited:.3f} s (bound {result.reowned_bound_s:.3f} s), "
        f"moves {result.moves}, fenced {result.fenced}, commits {result.commits}"
    )


def test_the_same_seed_gives_the_same_history() -> None:
    first, again = simulate(_crash()), simulate(_crash())
    assert first.digest == again.digest
    assert (first.steps, first.commits, first.fenced) == (again.steps, again.commits, again.fenced)
    other = simulate(attrs.evolve(_crash(), seed=8))
    assert other.digest != first.digest


def test_a_takeover_that_keeps_the_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fleet_sim, "next_epoch", lambda epoch: max(epoch, 1))
    with pytest.raises(SimViolation, match=r"granted twice"):
        simulate(_crash())


def test_a_fence_that_admits_a_lost_lease_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fleet_sim, "fence_admits", lambda claim, held: True)
    with pytest.raises(SimViolation, match=r"committed to shard \d+ at epoch \d+ late"):
        simulate(_crash())


def test_a_node_that_never_hands_surplus_back_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def greedy(
        held: dict[int, int], surplus: dict[int, int], renewed: dict[int, int], fair: int
    ) -> Round:
        return settle_round(held, surplus, renewed, len(renewed))

    monkeypatch.setattr(_fleet_sim, "settle_round", greedy)
    with pytest.raises(SimViolation, match=r"holds \d+ shards over its share"):
        simulate(_crash())


_fault = st.builds(
    lambda kind, node, length, factor: (kind, node, length, factor),
    st.sampled_from(FAULT_KINDS),
    st.integers(0, 7),
    st.floats(0.05, 2.0),
    st.floats(0.5, 1.6),
)


@settings(max_examples=30, deadline=None)
@given(
    nodes=st.integers(2, 6),
    shards=st.sampled_from([4, 8, 16, 32]),
    seed=st.integers(0, 2**32),
    faults=st.lists(_fault, max_size=4),
)
def test_any_fleet_under_single_failures_keeps_its_invariants(
    nodes: int, shards: int, seed: int, faults: list[tuple[str, int, float, float]]
) -> None:
    # One failure at a time: each heals and the fleet settles before the next.
    gap = 8 * TTL
    planned = tuple(
        Fault(
            kind,  # type: ignore[arg-type]
            at=2 * TTL + i * gap,
            duration=length * TTL,
            node=node,
            factor=factor * 10 if kind == "db_slow" else factor,
        )
        for i, (kind, node, length, factor) in enumerate(faults)
    )
    config = SimConfig(
        nodes=nodes,
        shards=shards,
        sessions=500,
        seed=seed,
        duration=2 * TTL + gap * (len(planned) + 1),
        faults=planned,
    )
    # simulate() checks every invariant after every event and raises at the first broken.
    result = simulate(config)
    assert result.max_owners_per_shard_epoch == 1
    assert result.late_fenced == 0
    assert result.settled_moves == 0
    assert result.max_shards_over_fair_share <= 0
    assert all(waited <= result.reowned_bound_s for waited, _ in result.reowned_s)
    assert result.settled_checks >= len(planned) + 1


def test_the_fleet_sim_suite_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from actors.bench import SUITES
    from runtime.bench import main

    argv = ["fleet_sim", "--json", "--nodes", "8", "--shards", "64", "--sessions", "5000"]
    assert main([*argv, "--seconds", "60"], suites=SUITES, prog="python -m actors.bench") == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["max_owners_per_shard_epoch"] == 1
    assert figures["late_fenced_appends"] == 0
    assert figures["settled_moves"] == 0
    assert 0 < figures["reowned_s_p99_after_failure"] <= figures["reowned_bound_s"]
    assert 1 <= figures["max_load_over_fair_share"] < 1.5
    assert figures["moves_per_failure"] > 0
    assert figures["steps_per_s"] > 0


def test_powertrio_bench_runs_the_fleet_sim_suite_without_its_options() -> None:
    from runtime.bench._fleet_sim import run

    figures = run(argparse.Namespace(quick=True, json=True))
    assert (figures["nodes"], figures["shards"], figures["sessions"]) == (20, 512, 100_000)
    assert figures["max_owners_per_shard_epoch"] == 1


@settings(max_examples=20, deadline=None)
@given(
    nodes=st.integers(2, 6),
    shards=st.sampled_from([4, 16]),
    seed=st.integers(0, 2**32),
    faults=st.lists(st.tuples(_fault, st.floats(0.0, 40.0)), min_size=1, max_size=6),
)
def test_overlapping_failures_never_break_ownership_or_the_fence(
    nodes: int, shards: int, seed: int, faults: list[tuple[tuple[str, int, float, float], float]]
) -> None:
    # Several failures at once: the bound of a single failure is not claimed, but no two
    # owners of a (shard, epoch), no late commit, and no flapping once all have healed.
    planned = tuple(
        Fault(kind, at=at, duration=length * TTL, node=node, factor=factor)  # type: ignore[arg-type]
        for (kind, node, length, factor), at in faults
    )
    config = SimConfig(nodes=nodes, shards=shards, sessions=200, seed=seed, duration=80.0)
    result = simulate(attrs.evolve(config, faults=planned))
    assert result.max_owners_per_shard_epoch == 1
    assert result.late_fenced == 0
    assert result.settled_moves == 0
