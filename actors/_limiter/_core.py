"""The fleet limiter's pure core: its policy, its events, their fold, and the fair admission.

Everything here is a function of its arguments: the time is a parameter, the waiting
callers are a :class:`FairQueue` the actor keeps in memory, and the state is the fold of
the limiter's events. The actor (``actors/_limiter/_actor.py``) only adds the mailbox, the clock
and the log; the property tests drive this module directly.

The rules, for every bucket a call counts against (its provider and model, its tenant, its
agent tree) that has a :class:`Limit`:

* requests: a grant at time ``t`` is issued only if the bucket's grants in ``(t - 60, t]``
  plus this one are at most ``requests_per_minute``; so every window ``(s, s + 60]`` holds
  at most that many grants (the last grant of such a window saw all the others);
* tokens: likewise with each grant's tokens: its estimate until the call settles, then the
  usage the provider reported (reconciliation: a call that used more than estimated delays
  later grants);
* concurrency: grants not yet settled (or expired) are at most ``concurrent``;
* a provider's 429 closes its provider-and-model bucket until its ``Retry-After``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar, final

import attrs

from protocols.codec import event_type

WINDOW = 60.0
"""Seconds of the sliding window that per-minute limits count over."""

CHUNK = 64
"""Grants per chunk of the folded window."""

T = TypeVar("T")


def _optional_positive_int(
    instance: object, attribute: attrs.Attribute[int | None], value: object
) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        msg = f"{attribute.name} must be a positive int or None, got {value!r}"
        raise ValueError(msg)


@final
@attrs.frozen(kw_only=True)
class Limit:
    """The limits of one bucket; ``None`` leaves that dimension unlimited."""

    requests_per_minute: int | None = attrs.field(default=None, validator=_optional_positive_int)
    tokens_per_minute: int | None = attrs.field(default=None, validator=_optional_positive_int)
    """Prompt plus completion tokens (estimated at the grant, reported at the settle)."""
    concurrent: int | None = attrs.field(default=None, validator=_optional_positive_int)
    """Calls granted and not yet settled."""


@final
@attrs.frozen(kw_only=True)
class LimiterPolicy:
    """What the limiter enforces, and how it estimates and recovers.

    ``models`` is keyed by ``"provider/model"``, ``"provider/*"`` or ``"*"`` (the most
    specific key applies); ``tenants`` by tenant name or ``"*"``; ``tree`` applies to each
    agent tree (a top-level session and its sub-agents) on its own.
    """

    models: Mapping[str, Limit] = attrs.field(factory=dict)
    tenants: Mapping[str, Limit] = attrs.field(factory=dict)
    tree: Limit | None = None
    completion_reserve: int = attrs.field(default=512, validator=attrs.validators.ge(0))
    """Completion tokens a call is estimated to use when its request sets no ``max_tokens``."""
    grant_ttl: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    """Seconds after which a grant never settled gives its concurrency slot back (its
    caller is presumed dead)."""
    default_retry_after: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    """Seconds a 429 without ``Retry-After`` closes its bucket for."""
    rate_limit_retries: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    """How often the session hook asks again, through the limiter, after a 429."""

    def model_limit(self, provider: str, model: str) -> Limit | None:
        models = self.models
        return models.get(f"{provider}/{model}") or models.get(f"{provider}/*") or models.get("*")

    def tenant_limit(self, tenant: str) -> Limit | None:
        return self.tenants.get(tenant) or self.tenants.get("*")

    def limit_of(self, bucket: str) -> Limit | None:
        """The limit of a bucket named by :func:`buckets_of`."""
        kind, _, name = bucket.partition(":")
        if kind == "model":
            provider, _, model = name.partition("/")
            return self.model_limit(provider, model)
        if kind == "tenant":
            return self.tenant_limit(name)
        return self.tree


def model_bucket(provider: str, model: str) -> str:
    return f"model:{provider}/{model}"


def buckets_of(provider: str, model: str, tenant: str, tree: str) -> tuple[str, ...]:
    """The buckets one call counts against."""
    return (model_bucket(provider, model), f"tenant:{tenant}", f"tree:{tree}")


# -- events -------------------------------------------------------------------------------


@final
@event_type("limiter.granted")
@attrs.frozen(kw_only=True)
class GrantIssued:
    """A call may go to its provider now; it counts ``tokens`` (an estimate) until settled."""

    grant_id: str
    provider: str
    model: str
    tenant: str
    tree: str
    tokens: int
    at: float
    """Wall time of the grant (the runtime's clock)."""


@final
@event_type("limiter.settled")
@attrs.frozen(kw_only=True)
class GrantSettled:
    """The granted call ended; ``tokens`` is what it used (the provider's usage, else the
    estimate), and its concurrency slot is free."""

    grant_id: str
    tokens: int
    at: float


@final
@event_type("limiter.expired")
@attrs.frozen(kw_only=True)
class GrantsExpired:
    """Grants whose calls will never settle (their callers outlived ``grant_ttl``, or the
    limiter restarted under them) give their concurrency slots back; their tokens keep
    counting at their estimate until they leave the window."""

    grant_ids: tuple[str, ...]
    reason: str


@final
@event_type("limiter.backed_off")
@attrs.frozen(kw_only=True)
class BackoffRecorded:
    """The provider answered 429: no grant for this provider and model before ``until``."""

    provider: str
    model: str
    until: float
    at: float


# -- state --------------------------------------------------------------------------------


@final
@attrs.frozen
class Held:
    """One grant as the window counts it."""

    grant_id: str
    buckets: tuple[str, ...]
    tokens: int
    at: float


@final
@event_type("limiter.state")
@attrs.frozen(kw_only=True)
class LimiterState:
    """The fold of the limiter's stream: what the windows hold now."""

    window: tuple[tuple[Held, ...], ...] = ()
    """Grants of the last :data:`WINDOW` seconds (as of the newest event), oldest first, in
    chunks of at most :data:`CHUNK` (so that adding, settling or dropping one copies a chunk
    and the list of chunks, not every grant)."""
    totals: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    """Bucket → the requests and tokens of its grants in :attr:`window`."""
    busy: Mapping[str, int] = attrs.field(factory=dict)
    """Bucket → its grants in :attr:`open` (buckets with none are absent)."""
    open: Mapping[str, Held] = attrs.field(factory=dict)
    """Grants holding a concurrency slot (granted, neither settled nor expired)."""
    backoff: Mapping[str, float] = attrs.field(factory=dict)
    """Provider-and-model bucket → the time its 429 lets grants start again."""
    issued: int = 0
    """Grants issued in the stream's life (the next grant's id is its number)."""
    settled: int = 0
    tokens_granted: int = 0
    """Estimated tokens of every grant."""
    tokens_used: int = 0
    """Tokens settled (reported usage, or the estimate when none was reported)."""


def in_window(state: LimiterState) -> Iterator[Held]:
    """The grants of the state's window, oldest first."""
    for chunk in state.window:
        yield from chunk


def _prune(
    window: tuple[tuple[Held, ...], ...], totals: dict[str, tuple[int, int]], now: float
) -> tuple[tuple[Held, ...], ...]:
    """``window`` without the grants of more than :data:`WINDOW` seconds before ``now``,
    taking them out of ``totals`` (a copy the caller owns)."""
    horizon = now - WINDOW
    while window and window[0][0].at <= horizon:
        chunk = window[0]
        gone = 0
        while gone < len(chunk) and chunk[gone].at <= horizon:
            held = chunk[gone]
            for bucket in held.buckets:
                requests, tokens = totals[bucket]
                if requests == 1:
                    del totals[bucket]
                else:
                    totals[bucket] = (requests - 1, tokens - held.tokens)
            gone += 1
        if gone < len(chunk):
            return (chunk[gone:], *window[1:])
        window = window[1:]
    return window


def _find(window: tuple[tuple[Held, ...], ...], grant_id: str) -> tuple[int, int] | None:
    """Where a grant is in the window (its chunk and its place there), or ``None``. Ids are
    issue numbers, so the window is in id order."""
    number = int(grant_id)
    low, high = 0, len(window)
    while low < high:  # the last chunk whose first id is at most the number
        middle = (low + high) // 2
        if int(window[middle][0].grant_id) <= number:
            low = middle + 1
        else:
            high = middle
    if low == 0:
        return None
    chunk = window[low - 1]
    first = int(chunk[0].grant_id)
    place = number - first  # ids within a chunk are consecutive but for pruned heads
    if 0 <= place < len(chunk) and chunk[place].grant_id == grant_id:
        return low - 1, place
    for place, held in enumerate(chunk):
        if held.grant_id == grant_id:
            return low - 1, place
    return None


def _appended(window: tuple[tuple[Held, ...], ...], held: Held) -> tuple[tuple[Held, ...], ...]:
    if window and len(window[-1]) < CHUNK:
        return (*window[:-1], (*window[-1], held))
    return (*window, (held,))


def _release(busy: Mapping[str, int], closed: Iterable[Held]) -> Mapping[str, int]:
    """``busy`` less the slots of the ``closed`` grants."""
    left = dict(busy)
    for held in closed:
        for bucket in held.buckets:
            if left[bucket] == 1:
                del left[bucket]
            else:
                left[bucket] -= 1
    return left


def evolve(state: LimiterState, event: object) -> LimiterState:
    """Apply one limiter event; pure and total."""
    if isinstance(event, GrantIssued):
        held = Held(
            event.grant_id,
            buckets_of(event.provider, event.model, event.tenant, event.tree),
            event.tokens,
            event.at,
        )
        totals = dict(state.totals)
        window = _prune(state.window, totals, event.at)
        for bucket in held.buckets:
            requests, tokens = totals.get(bucket, (0, 0))
            totals[bucket] = (requests + 1, tokens + held.tokens)
        backoff = state.backoff
        if any(until <= event.at for until in backoff.values()):
            backoff = {k: v for k, v in backoff.items() if v > event.at}
        busy = dict(state.busy)
        for bucket in held.buckets:
            busy[bucket] = busy.get(bucket, 0) + 1
        opened = dict(state.open)
        opened[event.grant_id] = held
        return LimiterState(  # not attrs.evolve: this is the hot path of every grant
            window=_appended(window, held),
            totals=totals,
            busy=busy,
            open=opened,
            backoff=backoff,
            issued=state.issued + 1,
            settled=state.settled,
            tokens_granted=state.tokens_granted + event.tokens,
            tokens_used=state.tokens_used,
        )
    if isinstance(event, GrantSettled):
        totals = dict(state.totals)
        window = _prune(state.window, totals, event.at)
        where = _find(window, event.grant_id) if event.grant_id.isdigit() else None
        if where is not None:
            number, place = where
            chunk = window[number]
            held = chunk[place]
            for bucket in held.buckets:
                requests, tokens = totals[bucket]
                totals[bucket] = (requests, tokens - held.tokens + event.tokens)
            settled = Held(held.grant_id, held.buckets, event.tokens, held.at)
            chunk = (*chunk[:place], settled, *chunk[place + 1 :])
            window = (*window[:number], chunk, *window[number + 1 :])
        still_open = dict(state.open)
        closed = still_open.pop(event.grant_id, None)
        return LimiterState(
            window=window,
            totals=totals,
            busy=_release(state.busy, () if closed is None else (closed,)),
            open=still_open,
            backoff=state.backoff,
            issued=state.issued,
            settled=state.settled + 1,
            tokens_granted=state.tokens_granted,
            tokens_used=state.tokens_used + event.tokens,
        )
    if isinstance(event, GrantsExpired):
        gone = set(event.grant_ids)
        expired = [held for grant_id, held in state.open.items() if grant_id in gone]
        return attrs.evolve(
            state,
            busy=_release(state.busy, expired),
            open={k: v for k, v in state.open.items() if k not in gone},
        )
    if isinstance(event, BackoffRecorded):
        bucket = model_bucket(event.provider, event.model)
        until = max(event.until, state.backoff.get(bucket, event.until))
        return attrs.evolve(state, backoff={**state.backoff, bucket: until})
    return state


# -- admission ----------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Ask(Generic[T]):
    """A call waiting for a grant; ``token`` is whatever the actor needs to answer it."""

    provider: str
    model: str
    tenant: str
    tree: str
    tokens: int
    token: T

    @property
    def buckets(self) -> tuple[str, ...]:
        return buckets_of(self.provider, self.model, self.tenant, self.tree)


@final
class FairQueue(Generic[T]):
    """The waiting calls: first come first served within an agent tree, round-robin across
    trees (a tree just served goes to the back of the rotation)."""

    __slots__ = ("_trees",)

    def __init__(self) -> None:
        self._trees: dict[str, deque[Ask[T]]] = {}

    def push(self, ask: Ask[T]) -> None:
        self._trees.setdefault(ask.tree, deque()).append(ask)

    def __len__(self) -> int:
        return sum(len(q) for q in self._trees.values())

    def __bool__(self) -> bool:
        return bool(self._trees)  # a tree leaves the rotation when its last call does

    def trees(self) -> list[str]:
        """Trees with waiting calls, in rotation order."""
        return list(self._trees)

    def head(self, tree: str) -> Ask[T]:
        """The call of ``tree`` to be served next."""
        return self._trees[tree][0]

    def drop(self, keep: Callable[[Ask[T]], bool]) -> list[Ask[T]]:
        """Remove the calls for which ``keep(ask)`` is false; returns them."""
        dropped: list[Ask[T]] = []
        for tree in list(self._trees):
            queue = self._trees[tree]
            kept: deque[Ask[T]] = deque()
            for ask in queue:
                (kept if keep(ask) else dropped).append(ask)
            if kept:
                self._trees[tree] = kept
            else:
                del self._trees[tree]
        return dropped

    def restore(self, ask: Ask[T]) -> None:
        """Put a call taken by :meth:`served` back at the head of its tree (its grant was
        not written)."""
        queue = self._trees.get(ask.tree)
        if queue is None:
            self._trees[ask.tree] = deque((ask,))
        else:
            queue.appendleft(ask)

    def served(self, tree: str) -> Ask[T]:
        """Take the head of ``tree``, which goes to the back of the rotation."""
        queue = self._trees.pop(tree)
        ask = queue.popleft()
        if queue:
            self._trees[tree] = queue  # to the back of the rotation
        return ask


def too_large(policy: LimiterPolicy, ask: Ask[T]) -> tuple[str, int] | None:
    """The bucket and limit a call's estimate exceeds on its own (it could never be
    granted), else ``None``."""
    for bucket in ask.buckets:
        limit = policy.limit_of(bucket)
        tpm = limit.tokens_per_minute if limit is not None else None
        if tpm is not None and ask.tokens > tpm:
            return bucket, tpm
    return None


@final
class _Load:
    """Per-bucket counts at one instant, updated as grants are planned: the fold's running
    sums, less what has left the window since the newest event, plus the planned grants.
    Only the buckets asked about are looked at."""

    __slots__ = ("_busy", "_delta", "_totals")

    def __init__(self, state: LimiterState, now: float) -> None:
        self._totals = state.totals
        self._busy = state.busy
        self._delta: dict[str, list[int]] = {}  # bucket -> [requests, tokens, open]
        horizon = now - WINDOW
        for held in in_window(state):
            if held.at > horizon:
                break
            for bucket in held.buckets:
                delta = self._delta.setdefault(bucket, [0, 0, 0])
                delta[0] -= 1
                delta[1] -= held.tokens

    def add(self, buckets: Iterable[str], tokens: int, *, opened: bool) -> None:
        for bucket in buckets:
            delta = self._delta.setdefault(bucket, [0, 0, 0])
            delta[0] += 1
            delta[1] += tokens
            delta[2] += opened

    def counts(self, bucket: str) -> tuple[int, int, int]:
        """Requests and tokens in the window, and open grants, of ``bucket``."""
        requests, tokens = self._totals.get(bucket, (0, 0))
        busy = self._busy.get(bucket, 0)
        delta = self._delta.get(bucket)
        if delta is None:
            return requests, tokens, busy
        return requests + delta[0], tokens + delta[1], busy + delta[2]

    def fits(self, policy: LimiterPolicy, buckets: Iterable[str], tokens: int) -> bool:
        for bucket in buckets:
            limit = policy.limit_of(bucket)
            if limit is None:
                continue
            rpm, tpm, concurrent = (
                limit.requests_per_minute,
                limit.tokens_per_minute,
                limit.concurrent,
            )
            requests, used, busy = self.counts(bucket)
            if rpm is not None and requests + 1 > rpm:
                return False
            if tpm is not None and used + tokens > tpm:
                return False
            if concurrent is not None and busy + 1 > concurrent:
                return False
        return True


def admit(
    state: LimiterState, policy: LimiterPolicy, queue: FairQueue[T], now: float
) -> list[tuple[Ask[T], GrantIssued]]:
    """Take from ``queue`` every call that may start at ``now``; returns them with their
    grants, in order (fold the grants in this order).

    Fairness: trees are visited in rotation order, one call per tree per turn, and a
    served tree goes to the back. A tree whose first call does not fit reserves every
    bucket that call needs: no later call takes from those buckets in this pass, so they
    only drain until that call fits (no tree is starved by smaller calls of others).
    """
    load = _Load(state, now)
    backoff = {b for b, until in state.backoff.items() if until > now}
    reserved: set[str] = set()
    granted: list[tuple[Ask[T], GrantIssued]] = []
    issued = state.issued
    progress = True
    while progress:
        progress = False
        for tree in queue.trees():
            ask = queue.head(tree)
            buckets = ask.buckets
            if (
                reserved.isdisjoint(buckets)
                and buckets[0] not in backoff
                and load.fits(policy, buckets, ask.tokens)
            ):
                queue.served(tree)
                load.add(buckets, ask.tokens, opened=True)
                issued += 1
                grant = GrantIssued(
                    grant_id=str(issued),
                    provider=ask.provider,
                    model=ask.model,
                    tenant=ask.tenant,
                    tree=ask.tree,
                    tokens=ask.tokens,
                    at=now,
                )
                granted.append((ask, grant))
                progress = True
            else:
                reserved.update(buckets)
    return granted


def admit_one(
    state: LimiterState,
    policy: LimiterPolicy,
    ask: Ask[T],
    now: float,
) -> GrantIssued | None:
    """The grant :func:`admit` would issue to ``ask`` alone in the queue at ``now``, or
    ``None`` (it does not fit, its model is backing off, or it is too large ever to fit);
    without building a queue, for a caller deciding its own grant when nobody waits."""
    buckets = ask.buckets
    until = state.backoff.get(buckets[0])
    if until is not None and until > now:
        return None
    if not _Load(state, now).fits(policy, buckets, ask.tokens):
        return None
    return GrantIssued(
        grant_id=str(state.issued + 1),
        provider=ask.provider,
        model=ask.model,
        tenant=ask.tenant,
        tree=ask.tree,
        tokens=ask.tokens,
        at=now,
    )


def next_change(state: LimiterState, policy: LimiterPolicy, now: float) -> float | None:
    """The earliest time after ``now`` at which a waiting call may fit without a settle: a
    grant leaves the window, a backoff ends, or an open grant expires."""
    times = [until for until in state.backoff.values() if until > now]
    for held in in_window(state):  # oldest first: the first still in the window leaves next
        if held.at + WINDOW > now:
            times.append(held.at + WINDOW)
            break
    for held in state.open.values():  # the oldest open grant expires first
        times.append(held.at + policy.grant_ttl)
        break
    later = [t for t in times if t > now]
    return min(later) if later else None


def expired(state: LimiterState, policy: LimiterPolicy, now: float) -> tuple[str, ...]:
    """Open grants older than the policy's ``grant_ttl``."""
    found: list[str] = []
    for grant_id, held in state.open.items():  # in grant order, so oldest first
        if held.at + policy.grant_ttl > now:
            break
        found.append(grant_id)
    return tuple(found)
