"""Sessions and boards across nodes that share a PostgreSQL log: the errors of relayed calls."""

from __future__ import annotations

from ._cluster_errors import RemoteBoardError, RemoteSessionError

__all__ = [
    "RemoteBoardError",
    "RemoteSessionError",
]
