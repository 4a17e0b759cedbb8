"""Cron expressions for fleet schedules: five fields, in UTC, parsed here.

Why our own parser and not a dependency: the five-field grammar (``*``, numbers, ranges
``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``, month and weekday names) fits in one
small module whose behaviour the tests pin with Hypothesis against a brute-force
minute-by-minute search; a dependency would bring time zones, seconds fields and
``@reboot``-style extensions a durable schedule must not depend on, and its own release
cycle. A schedule is evaluated in UTC only, so a log replays the same on any host.

Day of month and day of week follow Vixie cron: when both are restricted (neither is
``*``), a day matches if either matches.
"""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta
from typing import final

import attrs

from ._errors import CronSyntaxError

__all__ = ["CronSchedule"]

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_SEARCH_DAYS = 366 * 8 + 2
"""How far ahead :meth:`CronSchedule.next_after` looks: a 29 February comes within 8 years."""


def _number(text: str, field: int, expression: str) -> int:
    name, low, high = _FIELDS[field]
    names = _MONTHS if field == 3 else _DAYS if field == 4 else {}
    value = names.get(text.lower())
    if value is None:
        if not text.isdigit():
            raise CronSyntaxError(expression, f"{name}: {text!r} is not a number")
        value = int(text)
    if not low <= value <= high:
        raise CronSyntaxError(expression, f"{name}: {value} is outside {low}-{high}")
    return value


def _field(text: str, field: int, expression: str) -> frozenset[int]:
    name, low, high = _FIELDS[field]
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronSyntaxError(expression, f"{name}: empty item in list {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronSyntaxError(expression, f"{name}: step {step_text!r} must be >= 1")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _number(first, field, expression), _number(last, field, expression)
            if start > end:
                raise CronSyntaxError(expression, f"{name}: range {base!r} runs backwards")
        else:
            start = _number(base, field, expression)
            end = high if slash else start  # `5/15`: from 5, every 15 (Vixie)
        values.update(range(start, end + 1, step))
    if field == 4 and 7 in values:  # 7 is Sunday too
        values = (values - {7}) | {0}
    return frozenset(values)


@final
@attrs.frozen
class CronSchedule:
    """A parsed five-field cron expression (minute hour day-of-month month day-of-week).

    Raises:
        CronSyntaxError: (from :meth:`parse`) a field is malformed or out of range, there
            are not five fields, or the expression never matches (``0 0 31 2 *``).
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 is Sunday."""
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        """Parse ``expression``; it is checked to match at least one time."""
        fields = expression.split()
        if len(fields) != 5:
            msg = f"needs 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
            raise CronSyntaxError(expression, msg)
        parsed = [_field(text, i, expression) for i, text in enumerate(fields)]
        minutes, hours, days, months, weekdays = parsed
        schedule = cls(
            expression,
            minutes,
            hours,
            days,
            months,
            weekdays,
            days_restricted=not fields[2].startswith("*"),
            weekdays_restricted=not fields[4].startswith("*"),
        )
        if schedule.next_after(0.0) is None:
            raise CronSyntaxError(expression, "never matches a date")
        return schedule

    def matches_day(self, day: datetime) -> bool:
        """Whether the schedule fires on ``day`` (UTC) at all."""
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def matches(self, epoch: float) -> bool:
        """Whether the minute holding ``epoch`` (UTC) is one of the schedule's."""
        moment = datetime.fromtimestamp(epoch, UTC)
        return (
            self.matches_day(moment) and moment.hour in self.hours and moment.minute in self.minutes
        )

    def next_after(self, epoch: float) -> float | None:
        """The first whole minute strictly after ``epoch`` that the schedule matches, in
        epoch seconds; ``None`` if none comes within eight years."""
        start = datetime.fromtimestamp(epoch, UTC)
        day = start.replace(hour=0, minute=0, second=0, microsecond=0)
        hours = sorted(self.hours)
        minutes = sorted(self.minutes)
        for _ in range(_SEARCH_DAYS):
            if self.matches_day(day):
                for hour in hours:
                    for minute in minutes:
                        candidate = day.replace(hour=hour, minute=minute).timestamp()
                        if candidate > epoch:
                            return candidate
            day += timedelta(days=1)
        return None
