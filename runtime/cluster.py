"""Nodes sharing one PostgreSQL log: ``Node`` says how a runtime joins (``open_runtime(
node=...)``), ``ClusterNode`` is the running node (``Runtime.node``): its leases on shards
of streams, its fence, its inbox; ``ShardChange`` is what it tells each ``ShardListener``
registered with it (``ClusterNode.add_shard_listener``) as its shards move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

__all__ = [
    "ClusterNode",
    "Node",
    "ShardChange",
    "ShardListener",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._cluster._node import ClusterNode, Node, ShardChange, ShardListener
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._cluster._node": (
                "ClusterNode",
                "Node",
                "ShardChange",
                "ShardListener",
            ),
        },
    )
