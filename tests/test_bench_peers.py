"""The peers benchmark: powertrio's figures beside power-loop's, or a clear refusal without it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import actors.bench
from actors.cli._common import CliContext
from actors.cli._ops import cmd_bench

# ``python -m actors.bench peers --quick`` with power-loop's import blocked, as on an
# install without the ``bench`` extra.
_WITHOUT_PEER = (
    "import runpy, sys; sys.modules['power_loop'] = None; "
    "sys.argv = ['actors.bench', 'peers', '--quick']; "
    "runpy.run_module('actors.bench', run_name='__main__')"
)


def test_without_power_loop_the_bench_says_how_to_install_it_and_measures_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PEER], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "python -m actors.bench peers: error [config.invalid]: the peers benchmark compares "
        "powertrio with power-loop 8.0.0, which is not installed: pip install "
        "'powertrio[bench]' (or pip install 'power-loop==8.0.0'); no figures were measured\n"
    )


@pytest.mark.slow
def test_the_quick_run_prints_each_figure_beside_power_loops_and_their_ratio() -> None:
    pytest.importorskip(
        "power_loop", reason="power-loop (the bench extra) is the baseline; not installed"
    )
    done = subprocess.run(
        [sys.executable, "-m", "actors.bench", "peers", "--quick", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    figures = orjson.loads(done.stdout)
    assert str(figures["peer"]).startswith("power-loop ")
    assert figures["repeats"] == 1
    pairs = {
        "sends_per_s_256": "sends_ratio_256_vs_peer",
        "cpu_ms_per_send_256": "cpu_ratio_256_vs_peer",
        "sends_per_s_1": "sends_ratio_1_vs_peer",
        "new_sessions_per_s": "new_sessions_ratio_vs_peer",
        "seconds_100_sends": "seconds_100_sends_ratio_vs_peer",
        "kb_per_idle_session": "kb_per_idle_session_ratio_vs_peer",
    }
    for ours, ratio in pairs.items():
        assert figures[ours] > 0, ours
        assert figures["peer_" + ours] > 0, ours
        assert figures[ratio] == pytest.approx(figures[ours] / figures["peer_" + ours], rel=0.05)
    assert figures["state_copies_per_send"] == 0
    assert figures["objects_allocated_per_send"] > 0
    assert figures["reactivation_ms_p50"] > 0
    assert figures["sequential_sends_measured"] == 20
    assert figures["new_sessions_measured"] == 1_000


@pytest.mark.parametrize(("named", "code", "key"), [(False, 0, "skipped"), (True, 1, "error")])
def test_powertrio_bench_skips_the_peers_suite_without_power_loop_unless_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    named: bool,
    code: int,
    key: str,
) -> None:
    """``powertrio bench`` runs every suite: one whose baseline is not installed must not
    fail the others' run, but ``--suite peers`` asked for it, and fails."""
    monkeypatch.setitem(sys.modules, "power_loop", None)
    monkeypatch.setattr(actors.bench, "SUITES", {"peers": "actors.bench._peers"})
    ctx = CliContext.create(db=str(tmp_path / "log.sqlite"), json=True, debug=False)
    args = argparse.Namespace(suite=["peers"] if named else None, quick=True)
    assert cmd_bench(ctx, args) == code
    reason = orjson.loads(capsys.readouterr().out)["peers"][key]
    assert reason.startswith("ConfigError: the peers benchmark compares powertrio with power-loop")
