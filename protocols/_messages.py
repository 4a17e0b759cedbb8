"""Messages anyone may send to a session: follow-ups, cancels, human replies.

They are plain values, registered with the codec so they can cross a process boundary
(the CLI's ``send``, ``cancel`` and ``reply``) and be kept in a durable inbox.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, final

import attrs

from ._codec import event_type

__all__ = ["Cancel", "CancelMode", "FollowUp", "HumanReply"]

#: ``immediate`` cancels the run's scope now; ``after_turn`` lets the current round finish.
CancelMode: TypeAlias = Literal["immediate", "after_turn"]


def _non_empty(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value:
        msg = f"{type(instance).__name__}.{attribute.name} must not be empty"
        raise ValueError(msg)


@final
@event_type("message.follow_up")
@attrs.frozen(kw_only=True)
class FollowUp:
    """More input for a session, delivered once per ``id``.

    On an idle session it starts a run; during a run it is recorded at once and injected
    at the next round boundary. Consecutive follow-ups of one ``kind`` are merged into one
    user turn; different kinds stay separate turns. Delivering an ``id`` the session has
    seen before does nothing, however long ago it was.
    """

    id: str = attrs.field(validator=_non_empty)
    """Deduplication key, unique per session (e.g. a message id from the chat platform)."""
    content: str
    """What the model reads."""
    kind: str = "user"
    """Where it comes from: ``user``, ``timer``, ``board``, ``system``... (free-form)."""


@final
@event_type("message.cancel")
@attrs.frozen(kw_only=True)
class Cancel:
    """Stop the session's active run; its result has status ``cancelled``."""

    reason: str = ""
    """Why, recorded in the log."""
    mode: CancelMode = "immediate"
    """``immediate``: stop now, closing open tool calls as interrupted. ``after_turn``:
    finish the current round first."""
    by: str = "python"
    """Who asked (recorded in the log)."""

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("immediate", "after_turn"):
            msg = f"Cancel.mode must be 'immediate' or 'after_turn', got {self.mode!r}"
            raise ValueError(msg)


@final
@event_type("message.human_reply")
@attrs.frozen(kw_only=True)
class HumanReply:
    """A human's answer to a request the run is waiting for.

    For a question (the ``ask_human`` tool) ``answer`` is the text the model reads. For an
    approval (a tool that needs one, or a crashed tool whose policy is ``ask``) set
    ``approve``; ``answer`` is then the reason given to the model on a denial.
    """

    request_id: str = attrs.field(validator=_non_empty)
    """The id from ``RunResult.human_requests``."""
    answer: str = ""
    """The reply text."""
    approve: bool | None = None
    """For approvals: allow (``True``) or deny (``False``) the tool call."""
    by: str = "human"
    """Who answered (recorded in the log)."""
