"""Times, counts and text as people read them, in a terminal or a web page."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["fmt_age", "fmt_iso", "fmt_time", "plural", "shorten"]


def fmt_time(epoch: float) -> str:
    """An epoch time as local ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def fmt_iso(epoch: float) -> str:
    """An epoch time as ISO 8601 in UTC (for JSON)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def fmt_age(seconds: float) -> str:
    """A duration the way people say it: ``12s``, ``5m``, ``3h``, ``2d``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def plural(count: int, noun: str) -> str:
    """``count`` and its noun as people say it: ``1 round``, ``2 rounds``, ``1,024 events``."""
    return f"{count:,} {noun if count == 1 else noun + 's'}"


def shorten(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"
