"""Errors of fleets: a fleet file that does not check, a cron expression, an unknown agent
or node.

Each is a :class:`~protocols.errors.ConfigError`: the command line exits 2 for them, as
for any bad configuration. ``actors.fleet`` exports them.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocols.errors import ConfigError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "CronSyntaxError",
    "FleetAgentNotFoundError",
    "FleetFileError",
    "FleetNodeNotFoundError",
]


class FleetFileError(ConfigError):
    """A fleet file has problems; ``problems`` holds one ``(line, message)`` per problem.

    Every problem the checker can find is reported at once, each with its line (0 when the
    problem has no line, e.g. an empty file), so one edit fixes them all.
    """

    code = "config.fleet_file"

    def __init__(self, path: str, problems: Sequence[tuple[int, str]]) -> None:
        self.path = path
        self.problems = tuple(problems)
        lines = [
            f"{path}:{line}: {message}" if line else f"{path}: {message}"
            for line, message in self.problems
        ]
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"fleet file {path} has {count} {noun}:\n" + "\n".join(lines))


class CronSyntaxError(ConfigError):
    """A cron expression does not parse, or never matches a time."""

    code = "config.cron"

    def __init__(self, expression: str, problem: str) -> None:
        self.expression = expression
        self.problem = problem
        super().__init__(f"cron {expression!r}: {problem}")


class FleetAgentNotFoundError(ConfigError, LookupError):
    """A command names an agent the fleet does not declare (or has retired)."""

    code = "config.fleet_agent"

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        listed = ", ".join(self.known) if self.known else "none: run `powertrio fleet apply FILE`"
        super().__init__(f"the fleet has no agent {name!r} (agents: {listed})")


class FleetNodeNotFoundError(ConfigError, LookupError):
    """A command names a node that never served this fleet (a typo would go unheeded)."""

    code = "config.fleet_node"

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        listed = ", ".join(self.known) if self.known else "none: start one with `powertrio serve`"
        super().__init__(f"the fleet has no node {name!r} (nodes: {listed})")


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.fleet", globals())
del _fixup
