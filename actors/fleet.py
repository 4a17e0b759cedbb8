"""Fleets: agents declared in a fleet file, nodes that host them, and their status.

Parse and check a file (``parse_fleet_file``, ``FleetFile``, ``AgentDecl``,
``ScheduleDecl``, ``CronSchedule``), apply it to a log (``apply_fleet``), host it
(``FleetNode``), read and steer it (``fleet_status``, ``read_fleet_status``,
``set_paused``, ``request_drain``). Its errors are configuration errors: the command line
exits 2 for them. See ``docs/fleet.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._fleet._errors import (
    CronSyntaxError,
    FleetAgentNotFoundError,
    FleetFileError,
    FleetNodeNotFoundError,
)

__all__ = [
    "AgentDecl",
    "AgentStatus",
    "ApplyReport",
    "CronSchedule",
    "CronSyntaxError",
    "FLEET_PLACED",
    "FleetAgentNotFoundError",
    "FleetFile",
    "FleetFileError",
    "FleetNode",
    "FleetNodeNotFoundError",
    "FleetStatus",
    "NodeService",
    "NodeStatus",
    "ScheduleDecl",
    "apply_fleet",
    "code_version",
    "fleet_status",
    "load_tool",
    "parse_fleet_file",
    "read_fleet_status",
    "request_drain",
    "set_paused",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._fleet._control import (
        ApplyReport,
        apply_fleet,
        read_fleet_status,
        request_drain,
        set_paused,
    )
    from ._fleet._cron import CronSchedule
    from ._fleet._events import AgentStatus, FleetStatus, NodeStatus, fleet_status
    from ._fleet._file import (
        AgentDecl,
        FleetFile,
        ScheduleDecl,
        code_version,
        load_tool,
        parse_fleet_file,
    )
    from ._fleet._node import FLEET_PLACED, FleetNode, NodeService
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._fleet._control": (
                "ApplyReport",
                "apply_fleet",
                "read_fleet_status",
                "request_drain",
                "set_paused",
            ),
            "._fleet._cron": ("CronSchedule",),
            "._fleet._events": (
                "AgentStatus",
                "FleetStatus",
                "NodeStatus",
                "fleet_status",
            ),
            "._fleet._file": (
                "AgentDecl",
                "FleetFile",
                "ScheduleDecl",
                "code_version",
                "load_tool",
                "parse_fleet_file",
            ),
            "._fleet._node": (
                "FLEET_PLACED",
                "FleetNode",
                "NodeService",
            ),
        },
    )
