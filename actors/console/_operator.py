"""How the console acts on sessions: a seam, so whoever drives the sessions does it.

``powertrio ui`` resumes a session from the log the way ``powertrio send``/``reply`` do
(see ``actors.cli``); a server that already runs the sessions (``powertrio serve``) hands
the console its own operator, which talks to the live actors. The console itself only
reads the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, TypeAlias

__all__ = ["FleetSource", "Operator", "Verdict"]

Verdict: TypeAlias = Literal["reply", "approve", "deny"]
"""How a human request is answered: a question's reply, or an approval's verdict."""


class Operator(Protocol):
    """What the console's forms ask for. Each method returns once the request is recorded
    in the log (the run it starts or resumes goes on in the background) and returns a
    line for the person; errors are powertrio errors with their codes."""

    async def follow_up(self, session_id: str, text: str) -> str:
        """Send ``text`` as a follow-up (a new run on an idle session)."""
        ...

    async def answer(self, session_id: str, request_id: str, answer: str, verdict: Verdict) -> str:
        """Answer human request ``request_id`` of ``session_id``."""
        ...

    async def cancel(self, session_id: str, reason: str) -> str:
        """Cancel the session's open run."""
        ...

    async def fork(self, session_id: str, at_version: int, new_id: str | None) -> str:
        """Fork the session at ``at_version``; returns the new session's id."""
        ...


class FleetSource(Protocol):
    """The fleet's agents for the fleet page, beside the sessions of the log: one row
    per agent, its columns given by whoever knows the fleet. The console's default reads
    the agents a fleet file declared from the log (``LogFleetSource``)."""

    @property
    def columns(self) -> Sequence[str]:
        """The column names, in order."""
        ...

    async def agents(self) -> Mapping[str, Mapping[str, str]]:
        """Agent name → column → text. A row's ``session`` (not a column) is the
        session its name links to."""
        ...
