"""Sessions and boards across nodes that share a PostgreSQL log: the errors of relayed calls."""

from __future__ import annotations

from ._board._errors import RemoteBoardError
from ._fleet._errors import RemoteSessionError

__all__ = [
    "RemoteBoardError",
    "RemoteSessionError",
]
