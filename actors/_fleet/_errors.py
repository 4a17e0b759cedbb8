"""Errors of fleets: a fleet file that does not check, a cron expression, an unknown agent
or node.

Each is a :class:`~protocols.errors.ConfigError`: the command line exits 2 for them, as
for any bad configuration. ``actors.fleet`` exports them; ``actors.cluster`` exports the
error of a call relayed to the node that owns a session (a fleet's sessions live on nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

from protocols.errors import ConfigError
from protocols.lowlevel import fixup_module_metadata as _fixup

from .._session._errors import SessionError

__all__ = [
    "CronSyntaxError",
    "FleetAgentNotFoundError",
    "FleetFileError",
    "FleetNodeNotFoundError",
    "RemoteSessionError",
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


class RemoteSessionError(SessionError):
    """A call relayed to the node owning a session failed there with a typed error.

    ``remote_code`` is the stable code of the error the owner raised (e.g.
    ``session.busy``), ``remote_message`` its message.
    """

    code = "session.remote"

    def __init__(self, session_id: str, remote_code: str, remote_message: str) -> None:
        self.session_id = session_id
        self.remote_code = remote_code
        self.remote_message = remote_message
        super().__init__(
            f"session {session_id!r} failed on the node that owns it: "
            f"[{remote_code}] {remote_message}"
        )


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.fleet", {n: v for n, v in globals().items() if n != "RemoteSessionError"})
_fixup("actors.cluster", {"RemoteSessionError": RemoteSessionError})
del _fixup
