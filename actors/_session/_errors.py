"""Errors of sessions (``session.*``): a run refused, an answer that does not fit, a
hook's veto.

Only the agents raise them, so they live here rather than in ``protocols.errors``; the
package ``actors`` exports them (``actors.observe`` the hook's veto).
"""

from __future__ import annotations

from protocols.errors import PowertrioError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = [
    "ForeignAgentError",
    "HookVetoError",
    "HumanRequestNotFoundError",
    "NoOpenRunError",
    "OutputInvalidError",
    "OutputTypeError",
    "SessionBusyError",
    "SessionError",
]


class SessionError(PowertrioError):
    """A session could not take or finish a run."""

    code = "session"


class SessionBusyError(SessionError):
    """A send arrived while a run was active and the session's policy is ``reject``."""

    code = "session.busy"

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        super().__init__(
            f"session {session_id!r} is busy with run {run_id!r} and rejects new input; "
            "wait for the run to end, send a follow-up, or use the queue or interrupt policy"
        )


class NoOpenRunError(SessionError):
    """A cancel named a session that has no run open: there is nothing to cancel."""

    code = "session.no_open_run"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} has no open run: nothing to cancel")


class OutputInvalidError(SessionError):
    """The model's final answer did not match the response format, even after a repair.

    The run ends ``failed`` with this error's code; the raw text is kept in the result.
    """

    code = "session.output_invalid"

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("the answer does not match the response format: " + "; ".join(problems))


class OutputTypeError(SessionError):
    """A run's recorded JSON answer does not fit the class the caller asked for.

    The log keeps the JSON; the class is applied when the result is read. This error
    means the class changed since the answer was recorded (a field renamed, a type
    narrowed): read ``raw_output`` of the result with ``response_format=None``, or
    give the class the run was made with.
    """

    code = "session.output_type"

    def __init__(self, run_id: str, type_name: str, problems: tuple[str, ...]) -> None:
        self.run_id = run_id
        self.type_name = type_name
        self.problems = problems
        super().__init__(
            f"the recorded output of run {run_id!r} does not fit {type_name}: "
            + "; ".join(problems)
        )


class HumanRequestNotFoundError(SessionError, LookupError):
    """A human reply names a request the session is not waiting for."""

    code = "session.unknown_request"

    def __init__(self, session_id: str, request_id: str, open_requests: tuple[str, ...]) -> None:
        self.session_id = session_id
        self.request_id = request_id
        self.open_requests = open_requests
        waiting = ", ".join(open_requests) or "none"
        super().__init__(
            f"session {session_id!r} is not waiting for request {request_id!r} "
            f"(answered already, or its run ended); open requests: {waiting}"
        )


class ForeignAgentError(SessionError):
    """An operator action would resume a session with an agent other than its own.

    The CLI and its console resume a session in their own process, where they can rebuild
    only the CLI's agent; a session an application made with its own prompt or tools runs
    only where that code is. The action is refused before anything is recorded, so the
    session never runs with a prompt or tools it was not given.
    """

    code = "session.foreign_agent"

    def __init__(self, session_id: str, action: str, reasons: tuple[str, ...]) -> None:
        self.session_id = session_id
        self.action = action
        self.reasons = reasons
        super().__init__(
            f"session {session_id!r} runs an agent of its own ({'; '.join(reasons)}), which "
            f"{action} cannot rebuild: it has only the CLI's agent and would run the session "
            "with that instead, so nothing was recorded. Act on the session in the process "
            "that runs it (its Session's reply, approve, deny, follow_up or cancel), or on a "
            "fleet through the node that owns it (NodeHost.session(id))"
        )


class HookVetoError(SessionError):
    """A hook refused an LLM call or a tool call.

    Raise it from a hook to veto. For a tool call the model reads the reason as the tool's
    result; for an LLM call the run ends ``failed`` with this code and the reason.
    """

    code = "session.hook_vetoed"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"vetoed by a hook: {reason}")


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors", {n: v for n, v in globals().items() if n != "HookVetoError"})
_fixup("actors.observe", {"HookVetoError": HookVetoError})
del _fixup
