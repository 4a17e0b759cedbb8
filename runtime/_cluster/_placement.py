"""The lease and placement rules of a fleet, as pure synchronous functions.

A node's lease round (``ClusterNode._tick`` with ``_cluster._sql.lease_tick``) and
the fence of its appends (``_postgres._writer``) decide with these functions; the
simulation of a fleet (``runtime._cluster._fleet_sim``) calls the very same ones against an
in-memory model of the lease table. So what the simulation shows of placement (who
takes what, who hands what back, what a node finds it lost) is what the real node
does, and only the row semantics (expiry by the server's clock, row locks, ``SKIP
LOCKED``) are the database's, modelled there and written in SQL here.

The rules, stated once:

- A lease of a shard is live while ``expires_at > now``, ``now`` being the database's
  clock (:func:`lease_live`); a node never compares its own clock with it.
- A node's fair share is all shards over the live nodes, rounded up (:func:`fair_share`).
- In a round a node renews the leases it holds at the epoch it believes; one whose
  epoch moved is not renewed and is lost (:func:`settle_round`). If it holds no
  surplus, it takes expired shards up to its fair share (:func:`to_take`), the lowest
  numbered first, skipping rows another transaction holds (:func:`pick_free`); every
  takeover moves the shard's epoch on by one (:func:`next_epoch`).
- A node holding more than its fair share marks the highest numbered surplus, stops
  their actors and hands them back (the lease row's owner cleared, expired at once),
  skipping a row an append in flight still holds: that one goes back in a later round,
  so no append commits after its node handed the lease back.
- An append of a placed stream commits only if, in its own transaction, the node
  still holds the shard's lease at the epoch it was made under (:func:`fence_admits`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import attrs

__all__ = [
    "Round",
    "fair_share",
    "fence_admits",
    "lease_live",
    "next_epoch",
    "pick_free",
    "settle_round",
    "to_take",
]


def lease_live(expires_at: float, now: float) -> bool:
    """Whether a lease (or a node's heartbeat) expiring at ``expires_at`` still holds at
    ``now``, both on the database's clock (SQL: ``expires_at > clock_timestamp()``)."""
    return expires_at > now


def fair_share(shards: int, live_nodes: int) -> int:
    """How many shards a node may hold: all over the live nodes, rounded up, so the
    live nodes together can always hold every shard."""
    return -(-shards // max(1, live_nodes))


def to_take(fair: int, holding: int, *, take: bool) -> int:
    """How many expired shards a node takes in a round: up to its fair share, and none
    while it still has surplus to hand back (else it would take and release in turn)."""
    return max(0, fair - holding) if take else 0


def next_epoch(epoch: int) -> int:
    """The epoch of a lease taken over from ``epoch`` (each takeover fences the last)."""
    return epoch + 1


def pick_free(expired: Iterable[int], locked: Collection[int], want: int) -> list[int]:
    """The shards a round takes from ``expired`` (ascending): the lowest numbered not
    held by another transaction (SQL: ``ORDER BY shard LIMIT want FOR UPDATE SKIP
    LOCKED``)."""
    picked: list[int] = []
    if want <= 0:
        return picked
    for shard in expired:
        if shard in locked:
            continue
        picked.append(shard)
        if len(picked) == want:
            break
    return picked


def fence_admits(claim: tuple[int, int], held: Collection[tuple[int, int]]) -> bool:
    """Whether an append made under ``claim`` (shard, epoch) commits, ``held`` being the
    ``(shard, epoch)`` of the live leases the database finds this node holding in the
    append's own transaction."""
    return claim in held


@attrs.frozen
class Round:
    """What a node makes of one lease round's answer."""

    held: dict[int, int]
    """Shard -> epoch held within the fair share (its actors run here)."""
    surplus: dict[int, int]
    """Shard -> epoch held beyond the fair share, to be handed back."""
    lost: list[int]
    """Shards held before the round that are gone (or at another epoch), ascending."""
    changed: bool
    """Whether ``held`` or ``surplus`` differ from before the round."""


def settle_round(
    held: Mapping[int, int],
    surplus: Mapping[int, int],
    renewed: Mapping[int, int],
    fair: int,
) -> Round:
    """The node's shards after a round that renewed or took ``renewed`` (shard -> epoch).

    A surplus shard stays surplus while its lease was renewed at the same epoch; of the
    others, the highest numbered beyond the fair share become surplus (the lowest are
    kept, as a takeover takes the lowest first: both ends agree without talking).
    """
    kept_surplus = {s: e for s, e in surplus.items() if renewed.get(s) == e}
    now = {s: e for s, e in renewed.items() if s not in kept_surplus}
    lost = sorted(s for s, e in held.items() if now.get(s) != e)
    extra = len(now) - fair
    if extra > 0:
        for shard in sorted(now, reverse=True)[:extra]:
            kept_surplus[shard] = now.pop(shard)
    changed = now != dict(held) or kept_surplus != dict(surplus)
    return Round(held=now, surplus=kept_surplus, lost=lost, changed=changed)
