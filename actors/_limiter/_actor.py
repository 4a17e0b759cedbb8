"""The fleet limiter: one actor that grants model calls, every grant an event in its stream.

Sessions reach it through an LLM hook (:meth:`Limiter.hook`), so a session without one
pays nothing. The actor folds its stream at start, so the windows survive a restart; the
calls waiting for a grant are in memory only (their askers see the restart as a failed
ask). See docs/limits.md.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import final

import attrs
import trio

from protocols import LLMRequest, LLMResponse
from protocols.errors import ActorStoppedError, ConcurrencyConflictError, LLMRateLimitedError
from protocols.transports import Attempt
from runtime import ActorRef, Decision, EventSourcedActor, PriorityMessage, Reply, Runtime

from .._session._context import estimate_tokens, tools_tokens
from .._session._observe import HookContext, LLMCallNext, LLMHook
from ._core import (
    Ask,
    BackoffRecorded,
    FairQueue,
    GrantIssued,
    GrantSettled,
    GrantsExpired,
    LimiterPolicy,
    LimiterState,
    admit,
    admit_one,
    evolve,
    expired,
    next_change,
    too_large,
)
from ._errors import LimitTooLargeError

logger = logging.getLogger("powertrio.limiter")

_BURST = 64
"""The most messages taken between two appends, however busy the mailbox."""

_FLUSH_AFTER = 0.002
"""Seconds a grant decided in the caller's task waits, at most, for its append (the
write-behind batches what the callers decide in that time into one append)."""

_POLL = 0.05
"""Seconds between two reads of a shared limiter's stream while calls wait on this node
(another node's settles and expiries free room it cannot otherwise hear of)."""

_UNFLUSHED = 64
"""The most grants decided in callers' tasks and not yet appended: beyond it a caller asks
the actor, whose grant is appended before it is told."""


@final
class _Local:
    """What a handle shares with the live incarnation of its limiter actor (same process):
    the handle decides a grant in the caller's task when the actor is running, nobody
    waits and the write-behind is not full."""

    __slots__ = ("actor",)

    def __init__(self) -> None:
        self.actor: LimiterActor | None = None


# -- messages -----------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class _Acquire:
    provider: str
    model: str
    tenant: str
    tree: str
    tokens: int


@final
@attrs.frozen(kw_only=True)
class _Settle(PriorityMessage):
    grant_id: str
    tokens: int


@final
@attrs.frozen(kw_only=True)
class _RateLimited(PriorityMessage):
    provider: str
    model: str
    retry_after: float


@final
class _Tick(PriorityMessage):
    __slots__ = ()


@final
class _Statistics:
    __slots__ = ()


@final
@attrs.frozen(kw_only=True)
class LimiterStatistics:
    """What the limiter holds now (folded from its stream) and who waits."""

    issued: int
    """Grants in the stream's life."""
    settled: int
    open: int
    """Grants whose calls are in flight."""
    waiting: int
    """Calls waiting for a grant (in this process)."""
    waiting_trees: int
    tokens_granted: int
    """Estimated tokens of every grant."""
    tokens_used: int
    """Tokens the settled calls used (reported usage, else the estimate)."""
    backoffs: tuple[tuple[str, float], ...]
    """Buckets closed by a 429 and the wall time they open again."""


# -- the actor ----------------------------------------------------------------------------


@final
class LimiterActor(EventSourcedActor[LimiterState]):
    """Issues grants in the order :func:`~actors._limiter._core.admit` decides; each grant
    it issues is appended before its caller is told. Grants, settles and backoffs decided
    in callers' tasks (:meth:`grant_now`) are appended by its write-behind, in the order
    they were decided, at most :data:`_FLUSH_AFTER` later and never more than
    :data:`_UNFLUSHED` grants behind (docs/limits.md argues what a crash can lose).

    Its state is small (the last minute of grants, the open ones, the backoffs), so it
    snapshots every 1000 events and a restart folds at most that many."""

    snapshot_every = 1000

    def __init__(
        self,
        name: str,
        policy: LimiterPolicy,
        local: _Local | None = None,
        *,
        shared: bool = False,
    ) -> None:
        self._name = name
        self._shared = shared
        self._policy = policy
        self._local = local
        self._projected = LimiterState()
        """The state with :attr:`_pending` folded in: what the next append will make it.
        Every decision is made on it."""
        self._unflushed = 0
        """Grants in :attr:`_pending`."""
        self._dirty = trio.Event()
        self._queue: FairQueue[Reply[object]] = FairQueue()
        self._wake_at: float | None = None
        self._pending: list[object] = []
        """Settles and backoffs decided since the last pump, appended by the next."""
        self._deferred = 0
        """Messages taken since the last pump (a busy mailbox still pumps every
        :data:`_BURST`)."""

    def stream_name(self) -> str:
        return f"limiter/{self._name}"

    def initial_state(self) -> LimiterState:
        return LimiterState()

    def evolve(self, state: LimiterState, event: object) -> LimiterState:
        return evolve(state, event)

    def recovered(self, state: LimiterState) -> Decision | None:
        # Calls granted by an earlier incarnation were asked of it: whoever still holds
        # one settles it (tokens are reconciled), but no slot stays taken on its account.
        if not state.open or self._shared:
            # Shared: the open grants may be another node's, still running; a grant of
            # this node's earlier incarnation gives its slot back after grant_ttl.
            return None
        return Decision(
            events=[GrantsExpired(grant_ids=tuple(state.open), reason="limiter restarted")]
        )

    def handle(self, state: LimiterState, message: object) -> Decision:  # pragma: no cover
        raise NotImplementedError  # receive answers every message itself

    async def on_start(self) -> None:
        await super().on_start()
        self._projected = self.state
        if self._local is not None:
            self._local.actor = self
            self.context.start_soon(self._write_behind, name=f"{self.context.path} write-behind")

    async def on_stop(self) -> None:
        # A stop (not a crash) appends what the write-behind still holds; from here on
        # the callers ask (and find the actor stopped).
        if self._local is not None and self._local.actor is self:
            self._local.actor = None
        if self._pending:
            events, self._pending, self._unflushed = self._pending, [], 0
            await self.persist(events, folded=self._projected)
        await super().on_stop()

    async def _write_behind(self) -> None:
        """Pump at most :data:`_FLUSH_AFTER` after a grant was decided in a caller's task;
        unregisters from the handle when this incarnation ends (stop or crash)."""
        try:
            while True:
                await self._dirty.wait()
                await trio.sleep(_FLUSH_AFTER)
                self.context.ref.tell_nowait(_Tick())
        finally:
            if self._local is not None and self._local.actor is self:
                self._local.actor = None

    def _record(self, event: object) -> None:
        """Decide ``event``: fold it into the projected state; the next pump appends it."""
        self._pending.append(event)
        self._projected = evolve(self._projected, event)

    def grant_now(
        self, provider: str, model: str, tenant: str, tree: str, tokens: int
    ) -> GrantIssued | None:
        """A grant decided in the caller's task, or ``None`` when the caller must ask the
        actor: others wait (fairness), the write-behind is full, or it does not fit now.
        The same admission as the actor's, on the same projected state."""
        if self._queue or self._unflushed >= _UNFLUSHED:
            return None
        ask = Ask(
            provider=provider, model=model, tenant=tenant, tree=tree, tokens=tokens, token=None
        )
        grant = admit_one(self._projected, self._policy, ask, self.context.runtime.clock.now())
        if grant is None:
            return None  # the actor queues it (or answers a call too large with the error)
        self._record(grant)
        self._unflushed += 1
        if self._unflushed == _UNFLUSHED // 2:  # a burst: append now, before the bound is met
            self.context.ref.tell_nowait(_Tick())
        else:
            self._dirty.set()
        return grant

    def backoff_now(self, provider: str, model: str, retry_after: float) -> None:
        """A 429 recorded in the caller's task: the very next grant already sees it."""
        now = self.context.runtime.clock.now()
        self._record(
            BackoffRecorded(provider=provider, model=model, until=now + retry_after, at=now)
        )
        self._dirty.set()

    def settle_now(self, grant_id: str, tokens: int) -> None:
        """A settle decided in the caller's task; wakes the actor at once if calls wait
        (it may make room for them), else it goes with the next batch."""
        self._record(
            GrantSettled(grant_id=grant_id, tokens=tokens, at=self.context.runtime.clock.now())
        )
        if self._queue:
            self.context.ref.tell_nowait(_Tick())
        else:
            self._dirty.set()

    async def receive(self, message: object) -> object:
        clock = self.context.runtime.clock
        if isinstance(message, _Acquire):
            reply = self.context.defer_reply()
            ask = Ask(
                provider=message.provider,
                model=message.model,
                tenant=message.tenant,
                tree=message.tree,
                tokens=message.tokens,
                token=reply,
            )
            big = too_large(self._policy, ask)
            if big is not None:
                bucket, limit = big
                reply.fail(LimitTooLargeError(bucket, message.tokens, limit))
                return None
            self._queue.push(ask)
        elif isinstance(message, _Settle):
            self._record(
                GrantSettled(grant_id=message.grant_id, tokens=message.tokens, at=clock.now())
            )
        elif isinstance(message, _RateLimited):
            now = clock.now()
            self._record(
                BackoffRecorded(
                    provider=message.provider,
                    model=message.model,
                    until=now + message.retry_after,
                    at=now,
                )
            )
        elif isinstance(message, _Statistics):
            await self._pump()
            return self._statistics()
        elif not isinstance(message, _Tick):
            msg = f"the limiter takes no {type(message).__name__} message"
            raise TypeError(msg)
        mailbox = self.context.ref.statistics()
        self._deferred += 1
        if (mailbox.queued or mailbox.queued_system) and self._deferred < _BURST:
            return None  # take those first: the burst gets one append
        await self._pump()
        return None

    async def _pump(self) -> None:
        """Append what was decided since the last pump (settles, backoffs, and the grants
        decided in callers' tasks), the expiries due and every waiting call that fits now,
        as one append; then wake up again when the windows next change, if anyone still
        waits. Shared: fold the other nodes' appends first, and on a conflict fold them
        and decide again.

        A settle or a backoff is thus appended with the next grant or when the mailbox
        runs dry, never after a grant it made room for; a crash before that loses it (the
        restart expires the open grants, and a lost settle's tokens count at their
        estimate until they leave the window)."""
        now = self.context.runtime.clock.now()
        self._deferred = 0
        if self._dirty.is_set():
            self._dirty = trio.Event()
        if self._shared:
            await self._catch_up()
        base = list(self._pending)  # settles and backoffs the messages decided
        while True:
            dead = expired(self._projected, self._policy, now)
            if dead:
                self._record(GrantsExpired(grant_ids=dead, reason="grant_ttl passed"))
            self._queue.drop(lambda ask: not ask.token.abandoned)
            granted = admit(self._projected, self._policy, self._queue, now)
            for _, grant in granted:
                self._record(grant)
            events, self._pending, self._unflushed = self._pending, [], 0
            if not events:
                break
            try:
                await self.persist(events, folded=self._projected)
                break
            except ConcurrencyConflictError:
                if not self._shared:
                    raise
                # Another node appended first: nobody was told of these grants. Fold what
                # it wrote and decide again (the settles and backoffs still hold).
                logger.debug("%s: another node appended first; deciding again", self._name)
                for ask, _ in reversed(granted):
                    self._queue.restore(ask)
                self._pending = list(base)
                await self._catch_up()
        for ask, grant in granted:
            ask.token.send(grant)
            if ask.token.abandoned:  # the asker left before hearing it: free the slot
                self.context.ref.tell_nowait(_Settle(grant_id=grant.grant_id, tokens=0))
        if len(self._queue):
            wake = next_change(self._projected, self._policy, now)
            if self._shared:
                wake = now + _POLL if wake is None else min(wake, now + _POLL)
            if wake is not None and (self._wake_at is None or wake < self._wake_at):
                self._wake_at = wake
                self.context.start_soon(self._tick_at, wake, name=f"{self.context.path} tick")

    async def _catch_up(self) -> None:
        """Fold what other nodes appended to the shared stream since this one's version;
        the decisions not yet appended are folded again on top."""
        decode = self.registry.decode_record
        state, version = self.state, self.version
        while True:
            page = await self.store.read(self.stream_name(), version + 1, limit=1024)
            for record in page:
                state = evolve(state, decode(record))
            if page:
                version = page[-1].version
            if len(page) < 1024:
                break
        self.state, self.version = state, version
        projected = state
        for event in self._pending:
            projected = evolve(projected, event)
        self._projected = projected

    async def _tick_at(self, wall: float) -> None:
        clock = self.context.runtime.clock
        await trio.sleep_until(clock.deadline_for(wall))
        if self._wake_at == wall:
            self._wake_at = None
        self.context.ref.tell_nowait(_Tick())

    def _statistics(self) -> LimiterStatistics:
        state = self._projected
        now = self.context.runtime.clock.now()
        return LimiterStatistics(
            issued=state.issued,
            settled=state.settled,
            open=len(state.open),
            waiting=len(self._queue),
            waiting_trees=len(self._queue.trees()),
            tokens_granted=state.tokens_granted,
            tokens_used=state.tokens_used,
            backoffs=tuple(sorted((b, u) for b, u in state.backoff.items() if u > now)),
        )


# -- the handle ---------------------------------------------------------------------------


def estimate_request(request: LLMRequest, completion_reserve: int) -> int:
    """Tokens a call is estimated to use before it is made: its messages and tool
    definitions (the context estimate, characters / 4) plus its ``max_tokens``, or
    ``completion_reserve`` when it sets none."""
    prompt = sum(estimate_tokens(m) for m in request.messages) + tools_tokens(request.tools)
    completion = request.max_tokens if request.max_tokens is not None else completion_reserve
    return prompt + completion


@final
@attrs.frozen
class _Estimated:
    """What the hook counted of a session's last request: its first and last messages,
    their number, their estimate, and its tool definitions' estimate."""

    first: object
    last: object
    count: int
    messages: int
    tools: object
    tools_tokens: int


_REMEMBERED = 4096
"""Sessions whose last estimate a hook keeps (the least recently used are forgotten)."""


@final
class _Estimator:
    """Estimates a session's requests in time proportional to what each adds: a request
    that extends the previous one (the same first message, and the previous last one at
    its place; messages are immutable and shared) adds the estimates of the new messages
    to the previous sum, instead of counting the whole conversation again."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: OrderedDict[str, _Estimated] = OrderedDict()

    def __call__(self, session_id: str, request: LLMRequest, completion_reserve: int) -> int:
        messages = request.messages
        size = len(messages)
        before = self._seen.pop(session_id, None)
        if (
            before is not None
            and 0 < before.count <= size
            and messages[0] is before.first
            and messages[before.count - 1] is before.last
        ):
            start, total = before.count, before.messages
        else:
            start, total = 0, 0
        for index in range(start, size):
            total += estimate_tokens(messages[index])
        tools = request.tools
        if before is not None and tools is before.tools:
            tools_estimate = before.tools_tokens
        else:
            tools_estimate = tools_tokens(tools)
        if size:
            self._seen[session_id] = _Estimated(
                messages[0], messages[size - 1], size, total, tools, tools_estimate
            )
            if len(self._seen) > _REMEMBERED:
                self._seen.popitem(last=False)
        reserve = request.max_tokens if request.max_tokens is not None else completion_reserve
        return total + tools_estimate + reserve


def root_of(context: HookContext) -> str:
    """The agent tree of a hooked call: its top-level session (a sub-agent's id is its
    parent's followed by ``.n``)."""
    return context.session_id.split(".", 1)[0]


@final
class Limiter:
    """The handle of a fleet limiter actor: grants, settles, and the session hook.

    Made by :func:`spawn_limiter`.
    """

    __slots__ = ("_local", "_policy", "_ref", "name")

    def __init__(
        self,
        ref: ActorRef[object],
        name: str,
        policy: LimiterPolicy,
        local: _Local | None = None,
    ) -> None:
        self._ref = ref
        self._policy = policy
        self._local = local
        self.name = name

    @property
    def policy(self) -> LimiterPolicy:
        return self._policy

    async def acquire(
        self, *, provider: str, model: str, tenant: str, tree: str, tokens: int
    ) -> GrantIssued:
        """Wait for a grant for one call of ``tokens`` estimated tokens.

        Raises:
            LimitTooLargeError: the estimate alone exceeds a tokens-per-minute limit.
        """
        actor = self._local.actor if self._local is not None else None
        if actor is not None:
            local = actor.grant_now(provider, model, tenant, tree, tokens)
            if local is not None:
                await trio.lowlevel.checkpoint()  # an acquire always yields, as an ask does
                return local
        grant = await self._ref.ask(
            _Acquire(provider=provider, model=model, tenant=tenant, tree=tree, tokens=tokens)
        )
        assert isinstance(grant, GrantIssued)
        return grant

    def settle(self, grant: GrantIssued, tokens: int) -> None:
        """The granted call ended having used ``tokens``; frees its slot (never blocks).

        A limiter that has stopped is not told (logged): its restart frees the slot."""
        actor = self._local.actor if self._local is not None else None
        if actor is not None:
            actor.settle_now(grant.grant_id, tokens)
            return
        self._tell(_Settle(grant_id=grant.grant_id, tokens=tokens))

    def rate_limited(self, provider: str, model: str, retry_after: float | None) -> None:
        """The provider answered 429: hold every grant for this model until ``retry_after``
        seconds from now (the policy's ``default_retry_after`` when ``None``)."""
        wait = self._policy.default_retry_after if retry_after is None else retry_after
        actor = self._local.actor if self._local is not None else None
        if actor is not None:
            actor.backoff_now(provider, model, wait)
            return
        self._tell(_RateLimited(provider=provider, model=model, retry_after=wait))

    def _tell(self, message: object) -> None:
        try:
            self._ref.tell_nowait(message)
        except ActorStoppedError:
            logger.warning("limiter %s has stopped; %s not told", self.name, message)

    def on_attempt(self, model: str) -> Callable[[Attempt], None]:
        """An attempt observer for a provider transport (``on_attempt=``): the 429s its
        own retries absorb close the bucket of ``model`` too."""

        def observe(attempt: Attempt) -> None:
            if attempt.error_code == LLMRateLimitedError.code:
                self.rate_limited(attempt.provider, model, attempt.next_delay)

        return observe

    async def statistics(self) -> LimiterStatistics:
        """The limiter's counts now."""
        stats = await self._ref.ask(_Statistics())
        assert isinstance(stats, LimiterStatistics)
        return stats

    def hook(
        self,
        *,
        provider: str = "default",
        model: str | None = None,
        tenant: str = "default",
        tree: Callable[[HookContext], str] = root_of,
    ) -> LLMHook:
        """The LLM hook that makes a session's model calls (and its sub-agents') wait
        for grants: ``spawn_session(..., llm_hooks=[limiter.hook(tenant="acme")])``.

        Args:
            provider (str): the provider name the bucket is keyed by.
            model (str | None): the model name; the request's ``model`` when ``None``
                (``"default"`` if that is unset too).
            tenant (str): the tenant the calls count against.
            tree (Callable[[HookContext], str]): the agent tree of a call (its top-level
                session, by default).
        """
        return _LimiterHook(self, provider, model, tenant, tree)


@final
class _LimiterHook:
    __slots__ = ("_estimate", "_limiter", "_model", "_provider", "_tenant", "_tree")

    def __init__(
        self,
        limiter: Limiter,
        provider: str,
        model: str | None,
        tenant: str,
        tree: Callable[[HookContext], str],
    ) -> None:
        self._limiter = limiter
        self._provider = provider
        self._model = model
        self._tenant = tenant
        self._tree = tree
        self._estimate = _Estimator()

    async def __call__(
        self, request: LLMRequest, call_next: LLMCallNext, context: HookContext
    ) -> LLMResponse:
        limiter = self._limiter
        policy = limiter.policy
        model = self._model or request.model or "default"
        tokens = self._estimate(context.session_id, request, policy.completion_reserve)
        tree = self._tree(context)
        retries = policy.rate_limit_retries
        while True:
            grant = await limiter.acquire(
                provider=self._provider,
                model=model,
                tenant=self._tenant,
                tree=tree,
                tokens=tokens,
            )
            used = tokens
            try:
                response = await call_next(request)
            except LLMRateLimitedError as error:
                used = 0  # refused: the provider counted no tokens (the request still counts)
                limiter.rate_limited(self._provider, model, error.retry_after)
                if retries <= 0:
                    raise
                retries -= 1
                logger.info(
                    "%s/%s answered 429; asking the limiter again (%d retries left)",
                    self._provider,
                    model,
                    retries,
                )
                continue
            else:
                reported = response.usage.total_tokens
                used = reported if reported > 0 else tokens
                return response
            finally:
                limiter.settle(grant, used)


async def spawn_limiter(
    runtime: Runtime, policy: LimiterPolicy, *, name: str = "fleet", shared: bool = False
) -> Limiter:
    """Start (or resume from its stream ``limiter/<name>``) the fleet limiter.

    Give its :meth:`Limiter.hook` to the sessions it limits; they may live in any number
    of agent trees and tenants. One limiter per runtime and name.

    ``shared``: limiters of several nodes write the one stream of a shared store (e.g.
    PostgreSQL) and hold the limit together: every grant is appended, at the version its
    decision folded, before it is told; a node whose append meets another's folds it and
    decides again. No grant is decided in a caller's task then. See docs/limits.md.
    """
    local = None if shared else _Local()
    ref = await runtime.spawn(
        lambda: LimiterActor(name, policy, local, shared=shared),
        id=f"limiter-{name}",
        name=f"limiter-{name}",
    )
    return Limiter(ref, name, policy, local)
