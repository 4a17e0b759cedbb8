"""Small server-rendered pictures: an agent's latest runs at a glance, usage per tree and
per fleet agent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from markupsafe import Markup

from .._reading._format import fmt_iso
from ._fleet import RecentRun
from ._templates import fragment

__all__ = ["runs_strip", "usage_by_group"]


def runs_strip(runs: Sequence[RecentRun], *, root: str, now: float) -> Markup:
    """One small bar per run, oldest first: its colour the status, its height the run's
    duration beside the agent's longest (a running run lasts until ``now``; runs that all
    took no time stand full height)."""
    spans = [max(0.0, (r.finished_at or now) - r.started_at) for r in runs]
    longest = max(spans, default=0.0)
    bars = []
    for i, (run, span) in enumerate(zip(runs, spans, strict=True)):
        status = run.status.replace(" ", "_")
        label = (
            f"{run.run_id} · {run.session_id} · {status.replace('_', ' ')} · "
            f"{span:.1f} s · {run.tokens:,} tokens · started {fmt_iso(run.started_at)}"
        )
        bars.append(
            {
                "x": i * 13,
                "h": max(4, round(22 * span / longest)) if longest > 0 else 22,
                "status": status,
                "session": run.session_id,
                "label": label,
            }
        )
    return fragment("runs_strip", runs=bars, width=max(13, len(bars) * 13), root=root)


def usage_by_group(
    values: Mapping[tuple[str, str], float],
    days: Sequence[str],
    group_of: Mapping[str, str] | None = None,
) -> dict[str, list[float]]:
    """``(session, day) → value`` summed per group and day: per tree (a session's root id)
    by default, or per ``group_of[root]`` (a fleet agent; sessions of no group left out)."""
    index = {day: i for i, day in enumerate(days)}
    series: dict[str, list[float]] = {}
    for (sid, day), value in values.items():
        root = sid.split(".")[0]
        group = root if group_of is None else group_of.get(root)
        if group is None or day not in index:
            continue
        series.setdefault(group, [0.0] * len(days))[index[day]] += value
    return series


def invert(groups: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """``group → members`` as ``member → group``."""
    return {member: group for group, members in groups.items() for member in members}
