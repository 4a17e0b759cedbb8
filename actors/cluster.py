"""Sessions and boards on nodes that share a PostgreSQL log: hosting a node's sessions
(``host_node``, ``NodeHost``), a session reached wherever it lives (``ClusterSession``), and
the errors of a call relayed to the node that owns a session or a board.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

from ._board._errors import RemoteBoardError
from ._fleet._errors import RemoteSessionError

__all__ = [
    "ClusterSession",
    "NodeHost",
    "RemoteBoardError",
    "RemoteSessionError",
    "host_node",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._fleet._cluster import ClusterSession, NodeHost, host_node
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._fleet._cluster": (
                "ClusterSession",
                "NodeHost",
                "host_node",
            ),
        },
    )
