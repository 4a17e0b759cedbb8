"""A deterministic simulation of a fleet's leases: many nodes, one modelled database.

The nodes decide with the rules the real node runs (``runtime._cluster._placement``: the fair
share, what to take, what is lost, what is surplus, what the fence admits); the
database is an in-memory model of the lease table's semantics as the SQL of
``_cluster._sql`` uses them: times from the database's clock only, renewal by
``(node, epoch)``, takeover of expired rows lowest first ``FOR UPDATE SKIP LOCKED``
(which skips a row an append in flight holds ``FOR KEY SHARE``), release (which skips
such a row too: the node hands it back in a later round), heartbeats
counting the live nodes, and the server ending a transaction left idle for a TTL.

Everything runs under a virtual clock from one seeded ``random.Random``, one event at a
time: the same :class:`SimConfig` gives the same :attr:`SimResult.digest`. After every
event the simulation checks its invariants and raises :class:`SimViolation` at the
first broken one:

- no two nodes are granted the same (shard, epoch), and no node believes it holds a
  (shard, epoch) it was not granted;
- no append commits under an epoch after a later epoch of its shard was granted, nor
  after its node handed that lease back (the fence), and every append the fence refuses
  was made under a lease the node no longer held;
- after a single failure every shard the failure left without a running owner is owned
  again within ``ttl`` plus one round (plus the database's latencies; see
  :attr:`SimResult.reowned_bound_s`);
- once settled (no fault for a while), no shard moves; and, checked once a TTL, every
  shard has a running owner and no node holds more than its fair share.

Faults: a node crashes (and restarts), pauses (a GC, ``SIGSTOP``), is cut off from the
database, loses the database's replies (the work was done, the answer is gone), runs a
skewed clock; the database slows down or is unavailable.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
import random
import time
from collections.abc import Callable
from typing import Literal

import attrs

from ._node import shard_of
from ._placement import (
    fair_share,
    fence_admits,
    lease_live,
    next_epoch,
    pick_free,
    settle_round,
    to_take,
)

__all__ = ["Fault", "SimConfig", "SimResult", "SimViolation", "simulate"]

FaultKind = Literal["crash", "pause", "partition", "lost_replies", "skew", "db_slow", "db_down"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "crash",
    "pause",
    "partition",
    "lost_replies",
    "skew",
    "db_slow",
    "db_down",
)


class SimViolation(AssertionError):
    """An invariant of the fleet broke in the simulation (the message says which, when)."""


@attrs.frozen
class Fault:
    """One failure: ``kind`` hits node ``node`` (ignored for the database's) at ``at``
    seconds, for ``duration`` seconds (a crashed node restarts after it)."""

    kind: FaultKind
    at: float
    duration: float
    node: int = 0
    factor: float = 1.0
    """``skew``: the node's clock rate meanwhile; ``db_slow``: the latency multiplier."""


@attrs.frozen
class SimConfig:
    """A fleet, its workload and its faults."""

    nodes: int
    shards: int
    sessions: int
    seed: int = 0
    duration: float = 60.0
    """Virtual seconds simulated."""
    ttl: float = 3.0
    skew: float = 0.05
    """Each node's clock runs at a rate drawn from ``1 ± skew``."""
    latency: float = 0.002
    """Mean one-way latency of a database call, in seconds (exponentially distributed)."""
    append_every: float = 0.5
    """Mean seconds between two appends of one node."""
    release_after: float = 0.05
    """Seconds a host takes to stop the actors of surplus shards before handing them back."""
    faults: tuple[Fault, ...] = ()
    settle: float | None = None
    """Seconds after a fault ends before balance is checked; default ``2 * ttl + 4`` rounds."""
    snapshots: tuple[float, ...] = ()
    """Times at which the lease table is recorded (:attr:`SimResult.snapshots`)."""


@attrs.frozen
class SimResult:
    """What a simulation found (it raised if an invariant broke)."""

    steps: int
    wall_s: float
    digest: str
    """A hash of the history: grants, releases, commits and refusals, in order."""
    max_owners_per_shard_epoch: int
    reowned_s: tuple[tuple[float, int], ...]
    """Per shard a failure left without a running owner: (seconds until owned again,
    its sessions)."""
    reowned_bound_s: float
    max_load_over_fair_share: float
    """The most sessions a node held over the sessions per running node, when settled."""
    max_shards_over_fair_share: int
    """The most shards a node held beyond ``fair_share`` when settled (0: never over)."""
    moves: int
    moves_per_failure: float
    moves_by_fault: dict[str, int]
    """Moves after each kind of fault, until the next one."""
    settled_moves: int
    """Shards that changed owner while the fleet was settled (flapping): 0."""
    settled_checks: int
    """How many times balance and ownership were checked settled."""
    grants: int
    commits: int
    fenced: int
    """Appends the fence refused (a node writing under a lease it had lost)."""
    aborted: int
    """Appends in flight ended by a crash, an outage or the idle timeout."""
    late_fenced: int
    """Appends committed after their lease was taken over or handed back: 0."""
    snapshots: tuple[tuple[tuple[str | None, int], ...], ...] = ()
    """The lease table, ``(node, epoch)`` per shard, at each of ``SimConfig.snapshots``."""

    @property
    def reowned_s_p99(self) -> float:
        """The 99th percentile over sessions of :attr:`reowned_s` (0 without failures)."""
        total = sum(sessions for _, sessions in self.reowned_s)
        if not total:
            return max((waited for waited, _ in self.reowned_s), default=0.0)
        rank = math.ceil(0.99 * total)
        seen = 0
        for waited, sessions in sorted(self.reowned_s):
            seen += sessions
            if seen >= rank:
                return waited
        return 0.0  # pragma: no cover  # the ranks add up to the total

    @property
    def steps_per_s(self) -> float:
        """Events simulated per wall-clock second."""
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0


@attrs.define
class _Append:
    node: str
    shard: int
    epoch: int
    began: float
    done: bool = False
    waiting: bool = False


class _Database:
    """The lease table, heartbeats and row locks, as PostgreSQL applies the fleet's SQL."""

    def __init__(self, shards: int, ttl: float) -> None:
        self.ttl = ttl
        self.owner: list[str | None] = [None] * shards
        self.epoch = [0] * shards
        self.expires = [-math.inf] * shards
        self._heartbeat: dict[str, float] = {}
        self._beats: list[float] = []
        self._expiring: list[tuple[float, int]] = []
        self._free: set[int] = set(range(shards))
        self.key_share: dict[int, int] = {}
        self.shards = shards

    def _set_expiry(self, shard: int, at: float) -> None:
        self.expires[shard] = at
        if at == -math.inf:
            self._free.add(shard)
        else:
            self._free.discard(shard)
            heapq.heappush(self._expiring, (at, shard))

    def _beat(self, node: str, now: float) -> None:
        old = self._heartbeat.get(node)
        if old is not None:
            del self._beats[bisect.bisect_left(self._beats, old)]
        self._heartbeat[node] = now + self.ttl
        bisect.insort(self._beats, now + self.ttl)

    def live_nodes(self, now: float) -> int:
        return len(self._beats) - bisect.bisect_right(self._beats, now)

    def expired(self, now: float) -> list[int]:
        """The shards whose lease is not live at ``now``, ascending."""
        heap = self._expiring
        while heap and not lease_live(heap[0][0], now):
            at, shard = heapq.heappop(heap)
            if self.expires[shard] == at:
                self._free.add(shard)
        return sorted(self._free)

    def lease_tick(
        self, node: str, held: dict[int, int], take: bool, now: float
    ) -> tuple[dict[int, int], int, list[int]]:
        """``lease_tick``: renewed and taken shards, the fair share, the shards taken."""
        self._beat(node, now)
        renewed: dict[int, int] = {}
        for shard, epoch in held.items():
            if self.owner[shard] == node and self.epoch[shard] == epoch:
                self._set_expiry(shard, now + self.ttl)
                renewed[shard] = epoch
        fair = fair_share(self.shards, self.live_nodes(now))
        want = to_take(fair, len(renewed), take=take)
        taken: list[int] = []
        if want > 0:
            taken = pick_free(self.expired(now), self.key_share, want)
            for shard in taken:
                self.owner[shard] = node
                self.epoch[shard] = next_epoch(self.epoch[shard])
                self._set_expiry(shard, now + self.ttl)
                renewed[shard] = self.epoch[shard]
        return renewed, fair, taken

    def release(self, node: str, shards: dict[int, int]) -> tuple[list[int], dict[int, int]]:
        """``release_shards``: the shards handed back, and those kept (still the node's,
        at that epoch) because an append in flight holds the row (``FOR UPDATE SKIP
        LOCKED``)."""
        released: list[int] = []
        kept: dict[int, int] = {}
        for shard, epoch in shards.items():
            if self.owner[shard] != node or self.epoch[shard] != epoch:
                continue
            if shard in self.key_share:
                kept[shard] = epoch
                continue
            self.owner[shard] = None
            self._set_expiry(shard, -math.inf)
            released.append(shard)
        return released, kept

    def begin_append(self, node: str, shard: int, epoch: int, now: float) -> bool:
        """The fence's ``CHECK_LEASES`` in the append's transaction; locks the row if held."""
        held = (
            {(shard, self.epoch[shard])}
            if self.owner[shard] == node and lease_live(self.expires[shard], now)
            else set()
        )
        if not fence_admits((shard, epoch), held):
            return False
        self.key_share[shard] = self.key_share.get(shard, 0) + 1
        return True

    def end_append(self, shard: int) -> None:
        count = self.key_share[shard] - 1
        if count:
            self.key_share[shard] = count
        else:
            del self.key_share[shard]


@attrs.define
class _Node:
    name: str
    rate: float
    state: Literal["up", "paused", "down"] = "up"
    cut: bool = False
    deaf: bool = False
    gen: int = 0
    held: dict[int, int] = attrs.Factory(dict)
    surplus: dict[int, int] = attrs.Factory(dict)
    releasing: bool = False
    handing_back: dict[int, int] = attrs.Factory(dict)
    """Shards handed back but kept for an append in flight: released in a later round."""
    stashed: tuple[dict[int, int], int] | None = None
    inflight: list[_Append] = attrs.Factory(list)

    @property
    def running(self) -> bool:
        return self.state == "up" and not self.cut


Handler = Callable[..., None]


class _Sim:
    def __init__(self, config: SimConfig) -> None:
        self.c = config
        self.rng = random.Random(config.seed)
        self.now = 0.0
        self._queue: list[tuple[float, int, str, tuple[object, ...]]] = []
        self._seq = 0
        self.db = _Database(config.shards, config.ttl)
        self.nodes = [
            _Node(f"n{i}", 1.0 + self.rng.uniform(-config.skew, config.skew))
            for i in range(config.nodes)
        ]
        weights = [0] * config.shards
        for k in range(config.sessions):
            weights[shard_of(f"ses_{k}", config.shards)] += 1
        self.weights = weights
        self.db_down = False
        self.db_factor = 1.0
        self.history = hashlib.sha256()
        self.granted: dict[tuple[int, int], str] = {}
        self.released: dict[tuple[int, int], float] = {}
        self.grant_times: list[list[tuple[float, int]]] = [[] for _ in range(config.shards)]
        self.last_owner: list[str | None] = [None] * config.shards
        # Shard -> (since when it has no running owner, whether by a single failure: no
        # other fault was active then, and none has begun since).
        self.orphaned: dict[int, tuple[float, bool]] = {}
        self.reowned: list[tuple[float, int]] = []
        self.max_owners = 0
        self.reowned_max = 0.0
        self.moves = 0
        self.moves_by_fault: dict[str, int] = {}
        self.last_fault = "start"
        self.settled_moves = 0
        self.commits = self.fenced = self.aborted = self.late = 0
        self.max_over = 0.0
        self.max_shards_over = 0
        self.steps = 0
        self.snapshots: list[tuple[tuple[str | None, int], ...]] = []
        self.settled_checks = 0
        self.active_faults = 0
        self.quiet_since = 0.0
        slowest = 1.0 - config.skew
        for fault in config.faults:
            if fault.kind == "skew":
                slowest = min(slowest, fault.factor)
        self.round = config.ttl / 3 / slowest
        self.settle = (
            config.settle if config.settle is not None else 2 * config.ttl + 4 * self.round
        )
        worst_latency = config.latency * max(
            [1.0] + [f.factor for f in config.faults if f.kind == "db_slow"]
        )
        # The last renewal came before the failure, so the lease lapses within a TTL of
        # it (so does the row lock of an append the failure left open: the server ends
        # a transaction idle for a TTL); the next round of a node with room takes it.
        # The latencies of those calls on top (exponential: a generous multiple).
        self.bound = config.ttl + self.round + 40 * worst_latency

    # -- the event queue -------------------------------------------------------------

    def at(self, when: float, kind: str, *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, kind, args))

    def latency(self) -> float:
        return self.rng.expovariate(1.0 / (self.c.latency * self.db_factor))

    def log(self, *fields: object) -> None:
        self.history.update(repr((round(self.now, 9), *fields)).encode())

    def run(self) -> SimResult:
        started = time.perf_counter()
        for node in self.nodes:
            self.at(self.rng.uniform(0, self.round), "tick", node, node.gen)
            self.at(self.rng.expovariate(1 / self.c.append_every), "append", node, node.gen)
        for fault in self.c.faults:
            self.at(fault.at, "fault", fault)
        self.at(self.c.ttl, "check")
        for when in self.c.snapshots:
            self.at(when, "snapshot")
        handlers: dict[str, Handler] = {
            "tick": self.on_tick,
            "reply": self.on_reply,
            "release": self.on_release,
            "append": self.on_append,
            "commit": self.on_commit,
            "idle": self.on_idle,
            "fault": self.on_fault,
            "heal": self.on_heal,
            "check": self.on_check,
            "snapshot": self.on_snapshot,
        }
        queue = self._queue
        end = self.c.duration
        while queue and queue[0][0] <= end:
            when, _, kind, args = heapq.heappop(queue)
            self.now = when
            handlers[kind](*args)
            self.steps += 1
        wall = time.perf_counter() - started
        failures = sum(1 for f in self.c.faults if f.kind != "skew")
        return SimResult(
            steps=self.steps,
            wall_s=wall,
            digest=self.history.hexdigest(),
            max_owners_per_shard_epoch=self.max_owners,
            reowned_s=tuple(self.reowned),
            reowned_bound_s=self.bound,
            max_load_over_fair_share=self.max_over,
            max_shards_over_fair_share=self.max_shards_over,
            moves=self.moves,
            moves_per_failure=(self.moves - self.moves_by_fault.get("start", 0)) / failures
            if failures
            else 0.0,
            moves_by_fault=dict(sorted(self.moves_by_fault.items())),
            settled_moves=self.settled_moves,
            settled_checks=self.settled_checks,
            grants=len(self.granted),
            commits=self.commits,
            fenced=self.fenced,
            aborted=self.aborted,
            late_fenced=self.late,
            snapshots=tuple(self.snapshots),
        )

    def fail(self, message: str) -> None:
        raise SimViolation(f"at {self.now:.6f} s (seed {self.c.seed}): {message}")

    def settled(self) -> bool:
        return self.active_faults == 0 and self.now - self.quiet_since >= self.settle

    def reachable(self, node: _Node) -> bool:
        return node.running and not self.db_down

    # -- a node's lease round --------------------------------------------------------

    def on_tick(self, node: _Node, gen: int) -> None:
        if gen != node.gen or node.state != "up":
            return
        if not self.reachable(node):
            # The call fails; leases lapse on their own and the fence keeps writes safe.
            self.next_tick(node, self.now)
            return
        if node.handing_back:
            # Done in the database; a lost answer makes the node ask again, which
            # changes nothing (the row moved on), so the node's list is settled here.
            node.handing_back = self.hand_back(node, node.handing_back)
        held = {**node.held, **node.surplus}
        renewed, fair, taken = self.db.lease_tick(node.name, held, not node.surplus, self.now)
        for shard in taken:
            epoch = renewed[shard]
            if (shard, epoch) in self.granted:
                self.fail(f"shard {shard} epoch {epoch} granted twice")
            self.granted[shard, epoch] = node.name
            times = self.grant_times[shard]
            times.append((self.now, epoch))
            previous = self.last_owner[shard]
            if previous is not None and previous != node.name:
                self.moves += 1
                by_fault = self.moves_by_fault
                by_fault[self.last_fault] = by_fault.get(self.last_fault, 0) + 1
                if self.settled():
                    self.settled_moves += 1
                    self.fail(f"settled, shard {shard} moved from {previous} to {node.name}")
            self.last_owner[shard] = node.name
            self.log("grant", node.name, shard, epoch)
        if node.deaf:
            self.next_tick(node, self.now)  # done in the database, the answer lost
            return
        self.at(self.now + self.latency(), "reply", node, node.gen, renewed, fair)

    def next_tick(self, node: _Node, after: float) -> None:
        self.at(after + self.c.ttl / 3 / node.rate, "tick", node, node.gen)

    def on_reply(self, node: _Node, gen: int, renewed: dict[int, int], fair: int) -> None:
        if gen != node.gen or node.state == "down":
            return
        if node.state == "paused":
            node.stashed = (renewed, fair)
            return
        if node.cut or node.deaf:
            self.next_tick(node, self.now)
            return
        self.apply(node, renewed, fair)
        self.next_tick(node, self.now)

    def apply(self, node: _Node, renewed: dict[int, int], fair: int) -> None:
        result = settle_round(node.held, node.surplus, renewed, fair)
        node.held, node.surplus = result.held, result.surplus
        for shard, epoch in renewed.items():
            if self.granted.get((shard, epoch)) != node.name:
                self.fail(f"{node.name} believes it holds shard {shard} epoch {epoch}")
            orphaned = self.orphaned.pop(shard, None)
            if orphaned is not None:
                self.reowned_sample(shard, self.now - orphaned[0], single=orphaned[1])
        if node.surplus and not node.releasing:
            node.releasing = True
            self.at(self.now + self.c.release_after, "release", node, node.gen)

    def reowned_sample(self, shard: int, waited: float, *, single: bool) -> None:
        self.reowned.append((waited, self.weights[shard]))
        self.reowned_max = max(self.reowned_max, waited)
        if single and waited > self.bound:
            self.fail(f"shard {shard} had no owner for {waited:.3f} s > {self.bound:.3f} s")

    def on_release(self, node: _Node, gen: int) -> None:
        if gen != node.gen or node.state != "up":
            return
        node.releasing = False
        surplus, node.surplus = node.surplus, {}
        if not self.reachable(node):
            return  # the leases lapse instead
        node.handing_back.update(self.hand_back(node, surplus))

    def hand_back(self, node: _Node, shards: dict[int, int]) -> dict[int, int]:
        """Release ``shards`` in the database; the ones an append in flight keeps."""
        released, kept = self.db.release(node.name, shards)
        for shard in released:
            self.released[shard, shards[shard]] = self.now
            self.log("release", node.name, shard)
        return kept

    # -- appends under the fence ------------------------------------------------------

    def on_append(self, node: _Node, gen: int) -> None:
        if gen != node.gen or node.state != "up":
            return
        self.at(self.now + self.rng.expovariate(1 / self.c.append_every), "append", node, gen)
        claims = {**node.held, **node.surplus}
        if not claims or not self.reachable(node):
            return
        shard = self.rng.choice(sorted(claims))
        epoch = claims[shard]
        if not self.db.begin_append(node.name, shard, epoch, self.now):
            self.fenced += 1
            self.log("fenced", node.name, shard, epoch)
            db = self.db
            if (
                db.owner[shard] == node.name
                and db.epoch[shard] == epoch
                and lease_live(db.expires[shard], self.now)
            ):
                self.fail(f"{node.name}'s append to shard {shard} refused under its lease")
            return
        tx = _Append(node.name, shard, epoch, self.now)
        node.inflight.append(tx)
        self.at(self.now + self.latency() + self.latency(), "commit", node, tx)

    def on_commit(self, node: _Node, tx: _Append) -> None:
        if tx.done:
            return
        if node.state != "up" or node.cut:
            # The COMMIT waits for the node; the server ends an idle transaction.
            if not tx.waiting:
                tx.waiting = True
                self.at(tx.began + self.c.ttl, "idle", tx, node)
            return
        tx.done = True
        node.inflight.remove(tx)
        self.db.end_append(tx.shard)
        if (tx.shard, tx.epoch) in self.released:
            self.late += 1
            self.fail(
                f"{tx.node} committed to shard {tx.shard} at epoch {tx.epoch} after it "
                "handed that lease back"
            )
        for granted_at, epoch in reversed(self.grant_times[tx.shard]):
            if epoch > tx.epoch and granted_at <= self.now:
                self.late += 1
                self.fail(f"{tx.node} committed to shard {tx.shard} at epoch {tx.epoch} late")
            if epoch <= tx.epoch:
                break
        self.commits += 1
        self.log("commit", tx.node, tx.shard, tx.epoch)

    def on_idle(self, tx: _Append, node: _Node) -> None:
        if not tx.done:
            self.abort(node, tx)

    def abort(self, node: _Node, tx: _Append) -> None:
        tx.done = True
        node.inflight.remove(tx)
        self.db.end_append(tx.shard)
        self.aborted += 1
        self.log("aborted", tx.node, tx.shard, tx.epoch)

    def resume(self, node: _Node) -> None:
        """A paused or cut-off node runs again: pending commits go, the overdue round runs."""
        for tx in list(node.inflight):
            if tx.waiting:
                tx.waiting = False
                self.at(self.now + self.latency(), "commit", node, tx)
        if node.stashed is not None:
            renewed, fair = node.stashed
            node.stashed = None
            self.apply(node, renewed, fair)
        node.gen += 1
        node.releasing = False
        if node.surplus:
            node.releasing = True
            self.at(self.now + self.c.release_after, "release", node, node.gen)
        # What its actors were doing goes first, under the leases it believes it holds:
        # the fence must refuse whatever of them was taken meanwhile.
        self.at(self.now, "append", node, node.gen)
        self.at(self.now, "tick", node, node.gen)

    # -- faults -----------------------------------------------------------------------

    def orphan(self, shards: object) -> None:
        assert isinstance(shards, dict | list | set)
        single = self.active_faults <= 1
        for shard in shards:
            self.orphaned.setdefault(shard, (self.now, single))

    def on_fault(self, fault: Fault) -> None:
        # Shards a failure left unowned are not bound by it alone once another begins.
        for shard, (since, _) in self.orphaned.items():
            self.orphaned[shard] = (since, False)
        self.active_faults += 1
        self.last_fault = fault.kind
        self.log("fault", fault.kind, fault.node)
        node = self.nodes[fault.node % len(self.nodes)]
        kind = fault.kind
        if kind == "crash":
            if node.state == "down":
                self.active_faults -= 1
                return
            self.orphan({**node.held, **node.surplus})
            node.state = "down"
            node.gen += 1
            for tx in list(node.inflight):  # the kernel closes its sockets
                self.abort(node, tx)
            node.held, node.surplus, node.stashed, node.releasing = {}, {}, None, False
            node.handing_back = {}
        elif kind == "pause":
            if node.state != "up":
                self.active_faults -= 1
                return
            self.orphan({**node.held, **node.surplus})
            node.state = "paused"
        elif kind == "partition":
            self.orphan({**node.held, **node.surplus})
            node.cut = True
        elif kind == "lost_replies":
            node.deaf = True
        elif kind == "skew":
            node.rate = fault.factor
        elif kind == "db_slow":
            self.db_factor = fault.factor
        elif kind == "db_down":
            self.db_down = True
            for each in self.nodes:
                self.orphan({**each.held, **each.surplus})
                for tx in list(each.inflight):  # the server restarts: transactions end
                    self.abort(each, tx)
        self.at(fault.at + fault.duration, "heal", fault)

    def on_heal(self, fault: Fault) -> None:
        self.active_faults -= 1
        self.quiet_since = self.now
        self.log("heal", fault.kind, fault.node)
        node = self.nodes[fault.node % len(self.nodes)]
        kind = fault.kind
        if kind == "crash":
            node.state = "up"
            node.gen += 1
            self.at(self.now, "tick", node, node.gen)
            self.at(self.now + self.c.append_every, "append", node, node.gen)
        elif kind == "pause":
            if node.state == "paused":  # (not crashed meanwhile)
                node.state = "up"
                if not node.cut:
                    self.resume(node)
        elif kind == "partition":
            node.cut = False
            if node.state == "up":
                self.resume(node)
        elif kind == "lost_replies":
            node.deaf = False
        elif kind == "skew":
            node.rate = 1.0
        elif kind == "db_slow":
            self.db_factor = 1.0
        elif kind == "db_down":
            self.db_down = False
            # Whatever no node could own meanwhile is measured from the database's return.
            for shard, (_, single) in self.orphaned.items():
                self.orphaned[shard] = (self.now, single)

    def on_snapshot(self) -> None:
        self.snapshots.append(tuple(zip(self.db.owner, self.db.epoch, strict=True)))

    def on_check(self) -> None:
        """Once a TTL: owners per (shard, epoch); when settled, every shard owned by a
        running node and nobody over its fair share."""
        self.at(self.now + self.c.ttl, "check")
        believers: dict[tuple[int, int], int] = {}
        for node in self.nodes:
            if node.state == "down":
                continue
            for claim in (*node.held.items(), *node.surplus.items()):
                believers[claim] = believers.get(claim, 0) + 1
        most = max(believers.values(), default=0)
        self.max_owners = max(self.max_owners, most)
        if most > 1:
            self.fail("two nodes believe they hold the same shard at the same epoch")
        if not self.settled():
            return
        self.settled_checks += 1
        running = [n for n in self.nodes if n.running]
        if not running:
            return
        fair = fair_share(self.c.shards, len(running))
        per_node = self.c.sessions / len(running)
        for node in running:
            load = len(node.held) + len(node.surplus)
            self.max_shards_over = max(self.max_shards_over, load - fair)
            if load > fair:
                self.fail(f"settled, {node.name} holds {load} shards over its share {fair}")
            if per_node:
                sessions = sum(self.weights[s] for s in node.held)
                self.max_over = max(self.max_over, sessions / per_node)
        db = self.db
        by_name = {n.name: n for n in running}
        for shard in range(self.c.shards):
            owner = by_name.get(db.owner[shard] or "")
            if (
                owner is None
                or not lease_live(db.expires[shard], self.now)
                or {**owner.held, **owner.surplus}.get(shard) != db.epoch[shard]
            ):
                self.fail(f"settled, shard {shard} has no running owner")


def simulate(config: SimConfig) -> SimResult:
    """Run the fleet of ``config``; its figures.

    Raises:
        SimViolation: an invariant broke (the message says which, when, with which seed).
    """
    return _Sim(config).run()


def single_failures(
    nodes: int, duration: float, *, ttl: float, seed: int, every: float | None = None
) -> tuple[Fault, ...]:
    """One failure at a time, each healed and settled before the next, kinds in turn."""
    rng = random.Random(seed)
    gap = every if every is not None else 8 * ttl
    faults = []
    at = 2 * ttl
    index = 0
    while at + gap <= duration:
        kind = FAULT_KINDS[index % len(FAULT_KINDS)]
        index += 1
        lasting = {
            "crash": rng.uniform(ttl, 2 * ttl),
            "pause": rng.choice([rng.uniform(0.1, ttl / 2), rng.uniform(ttl, 2 * ttl)]),
            "partition": rng.uniform(ttl, 2 * ttl),
            "lost_replies": rng.uniform(ttl / 3, ttl),
            "skew": rng.uniform(ttl, 2 * ttl),
            "db_slow": rng.uniform(ttl / 3, ttl),
            "db_down": rng.uniform(ttl / 3, 2 * ttl),
        }[kind]
        factor = {"skew": rng.uniform(0.6, 1.5), "db_slow": rng.uniform(5, 20)}.get(kind, 1.0)
        faults.append(Fault(kind, at, lasting, node=rng.randrange(nodes), factor=factor))
        at += gap
    return tuple(faults)
