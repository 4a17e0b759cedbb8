"""What a session takes as a follow-up from a feature it does not know (a board's change).

The session sits below the features that tell it things: a board that a session watches
is built on the session, not the other way round. So the board's message says itself
what follow-up it is, and the session asks it, knowing only this base class.
"""

from __future__ import annotations

from protocols import FollowUp

__all__ = ["FollowUpSource"]


class FollowUpSource:
    """A message a session reads as the follow-up :meth:`as_follow_up` returns.

    Subclass it (with ``__slots__``, as attrs classes have) and give the follow-up a
    stable ``id``: the session takes each id once however often it is told.
    """

    __slots__ = ()

    def as_follow_up(self) -> FollowUp:
        """The follow-up this message is, as the session records it."""
        raise NotImplementedError
