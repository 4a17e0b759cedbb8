"""Fleets: declared agents, nodes that host them, their status; for now, their errors."""

from __future__ import annotations

from ._fleet._errors import (
    CronSyntaxError,
    FleetAgentNotFoundError,
    FleetFileError,
    FleetNodeNotFoundError,
)

__all__ = [
    "CronSyntaxError",
    "FleetAgentNotFoundError",
    "FleetFileError",
    "FleetNodeNotFoundError",
]
