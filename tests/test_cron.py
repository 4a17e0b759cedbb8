"""The fleet's own cron parser: the grammar, its errors, and ``next_after`` against a
brute-force search, minute by minute."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from actors._fleet._cron import CronSchedule
from actors.fleet import CronSyntaxError


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_fields_ranges_steps_lists_and_names() -> None:
    """Each form of a field gives the values cron gives it."""
    cron = CronSchedule.parse("*/15 9-17/4 1,15 jan-mar mon-fri")
    assert cron.minutes == {0, 15, 30, 45}
    assert cron.hours == {9, 13, 17}
    assert cron.days == {1, 15}
    assert cron.months == {1, 2, 3}
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert CronSchedule.parse("5/20 * * * 7").minutes == {5, 25, 45}
    assert CronSchedule.parse("0 0 * * 7").weekdays == {0}  # 7 is Sunday


def test_next_after_examples() -> None:
    """Weekdays at 07:00 UTC: Friday evening's next slot is Monday morning."""
    cron = CronSchedule.parse("0 7 * * 1-5")
    friday_evening = _epoch("2026-11-20T18:00:00")
    assert cron.next_after(friday_evening) == _epoch("2026-11-23T07:00:00")
    assert cron.next_after(_epoch("2026-11-23T07:00:00")) == _epoch("2026-11-24T07:00:00")
    leap = CronSchedule.parse("0 0 29 2 *")
    assert leap.next_after(_epoch("2026-03-01T00:00:00")) == _epoch("2028-02-29T00:00:00")


def test_day_of_month_or_day_of_week_when_both_are_given() -> None:
    """Vixie cron: the 13th, or any Friday."""
    cron = CronSchedule.parse("0 12 13 * 5")
    assert cron.next_after(_epoch("2026-11-01T00:00:00")) == _epoch("2026-11-06T12:00:00")
    assert cron.next_after(_epoch("2026-11-10T00:00:00")) == _epoch("2026-11-13T12:00:00")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "needs 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("60 * * * *", "minute: 60 is outside 0-59"),
        ("* 24 * * *", "hour: 24 is outside 0-23"),
        ("* * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * 13 *", "month: 13 is outside 1-12"),
        ("* * * * 8", "day of week: 8 is outside 0-7"),
        ("*/0 * * * *", "minute: step '0' must be >= 1"),
        ("5-1 * * * *", "minute: range '5-1' runs backwards"),
        ("1,,2 * * * *", "minute: empty item in list '1,,2'"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("* * * foo *", "month: 'foo' is not a number"),
        ("0 0 31 2 *", "never matches a date"),
    ],
)
def test_bad_expressions_say_what_is_wrong(expression: str, message: str) -> None:
    """Each malformed expression gets a typed error naming the field and the problem."""
    with pytest.raises(CronSyntaxError) as raised:
        CronSchedule.parse(expression)
    assert raised.value.code == "config.cron"
    assert str(raised.value) == f"cron {expression!r}: {message}"


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    single = number.map(str)
    ranged = st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}")
    stepped = st.tuples(st.sampled_from(["*", f"{low}-{high}"]), st.integers(1, 7)).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    item = st.one_of(st.just("*"), single, ranged, stepped)
    return st.lists(item, min_size=1, max_size=3).map(",".join)


# Dense day fields keep the brute-force search short (every expression fires within days).
_EXPRESSIONS = st.tuples(
    _field(0, 59), _field(0, 23), st.just("*"), st.just("*"), _field(0, 6)
).map(" ".join)


@settings(max_examples=examples(60), deadline=None)
@given(expression=_EXPRESSIONS, start=st.integers(1_600_000_000, 1_900_000_000))
def test_next_after_is_the_first_matching_minute(expression: str, start: int) -> None:
    """``next_after(t)`` matches, is after ``t``, and no minute in between matches."""
    cron = CronSchedule.parse(expression)
    found = cron.next_after(float(start))
    assert found is not None
    assert found > start
    assert found % 60 == 0
    assert cron.matches(found)
    minute = (start // 60 + 1) * 60
    while minute < found:
        assert not cron.matches(minute), datetime.fromtimestamp(minute, UTC)
        minute += 60


@settings(max_examples=examples(100), deadline=None)
@given(expression=_EXPRESSIONS)
def test_parsing_is_stable(expression: str) -> None:
    """Parsing never fails on a well-formed expression, and gives the same sets twice;
    every value lies in its field's range."""
    cron = CronSchedule.parse(expression)
    assert cron == CronSchedule.parse(expression)
    assert all(0 <= m <= 59 for m in cron.minutes)
    assert all(0 <= h <= 23 for h in cron.hours)
    assert all(0 <= d <= 6 for d in cron.weekdays)
