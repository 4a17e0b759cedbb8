"""The fleet limiter: its windows, fairness and reconciliation (pure core, by Hypothesis),
and the actor under virtual time: grants in the log, a restart, 429 feedback, sessions."""

from __future__ import annotations

import math
import unittest.mock

import pytest
import trio
import trio.testing
from _depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import ContextPolicy, estimate_tokens, spawn_session
from actors._limiter import _core as _limiter_core
from actors._limiter._core import (
    WINDOW,
    Ask,
    FairQueue,
    GrantIssued,
    GrantSettled,
    LimiterState,
    admit,
    admit_one,
    evolve,
    in_window,
    next_change,
)
from actors._session._context import SUMMARY_INSTRUCTIONS
from actors.events import BackoffRecorded, GrantsExpired
from actors.limits import Limit, LimiterPolicy, LimitTooLargeError, spawn_limiter
from protocols import LLMResponse, Usage
from protocols.codec import decode_record
from protocols.errors import LLMRateLimitedError
from runtime import Clock, open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore, ScriptedLLM

# -- the pure core, by Hypothesis ---------------------------------------------------------

limits = st.builds(
    Limit,
    requests_per_minute=st.none() | st.integers(1, 6),
    tokens_per_minute=st.none() | st.integers(100, 2000),
    concurrent=st.none() | st.integers(1, 4),
)
policies = st.builds(
    LimiterPolicy,
    models=st.fixed_dictionaries({"p/*": limits}),
    tenants=st.fixed_dictionaries({"*": limits}),
    tree=st.none() | limits,
)

ask_op = st.tuples(
    st.just("ask"),
    st.sampled_from(["m1", "m2"]),
    st.sampled_from(["t1", "t2"]),
    st.sampled_from(["a", "b", "c"]),
    st.integers(1, 100),
)
settle_op = st.tuples(st.just("settle"), st.integers(0, 50), st.integers(0, 300))
time_op = st.tuples(st.just("time"), st.floats(0.5, 70.0))
backoff_op = st.tuples(st.just("429"), st.sampled_from(["m1", "m2"]), st.floats(0.0, 30.0))
operations = st.lists(st.one_of(ask_op, ask_op, settle_op, time_op, backoff_op), max_size=80)


class Model:
    """The limiter's core driven by hand: what was granted, when, and what it counted."""

    def __init__(self, policy: LimiterPolicy) -> None:
        self.policy = policy
        self.state = LimiterState()
        self.queue: FairQueue[int] = FairQueue()
        self.now = 1000.0
        self.asked = 0
        self.grants: list[GrantIssued] = []
        self.counted: dict[str, int] = {}  # grant id -> tokens the window counts now
        self.settled: dict[str, int] = {}
        self.backoff: dict[str, float] = {}
        self.pruned_at = -math.inf

    def fold(self, event: object) -> None:
        self.state = evolve(self.state, event)
        if isinstance(event, GrantIssued | GrantSettled):
            self.pruned_at = event.at  # the fold drops what is older than a minute before

    def pump(self) -> list[GrantIssued]:
        # A lone waiting call: the caller's own decision (admit_one) is admit's.
        alone = self.queue.head(self.queue.trees()[0]) if len(self.queue) == 1 else None
        decided = None if alone is None else admit_one(self.state, self.policy, alone, self.now)
        granted = [g for _, g in admit(self.state, self.policy, self.queue, self.now)]
        if alone is not None:
            assert decided == (granted[0] if granted else None)
        for grant in granted:
            self.check_grant(grant)
            self.fold(grant)
            self.grants.append(grant)
            self.counted[grant.grant_id] = grant.tokens
        return granted

    def check_grant(self, grant: GrantIssued) -> None:
        """Before the grant is folded: it fits every window and slot of its buckets."""
        assert self.backoff.get(grant.model, 0.0) <= grant.at
        mine = Ask(
            provider="p",
            model=grant.model,
            tenant=grant.tenant,
            tree=grant.tree,
            tokens=grant.tokens,
            token=0,
        ).buckets
        for bucket in mine:
            limit = self.policy.limit_of(bucket)
            if limit is None:
                continue
            recent = [
                g for g in self.grants if g.at > grant.at - WINDOW and bucket in self.buckets(g)
            ]
            if limit.requests_per_minute is not None:
                assert len(recent) + 1 <= limit.requests_per_minute
            if limit.tokens_per_minute is not None:
                used = sum(self.counted[g.grant_id] for g in recent)
                assert used + grant.tokens <= limit.tokens_per_minute
            if limit.concurrent is not None:
                open_ = [
                    g
                    for g in self.grants
                    if g.grant_id not in self.settled and bucket in self.buckets(g)
                ]
                assert len(open_) + 1 <= limit.concurrent

    @staticmethod
    def buckets(grant: GrantIssued) -> tuple[str, ...]:
        return (
            f"model:{grant.provider}/{grant.model}",
            f"tenant:{grant.tenant}",
            f"tree:{grant.tree}",
        )


@settings(max_examples=examples(300), deadline=None)
@given(policy=policies, ops=operations)
def test_grants_never_exceed_a_limit_in_any_window_and_settles_reconcile(policy, ops):
    check_operations(policy, ops)


@settings(max_examples=examples(150), deadline=None)
@given(policy=policies, ops=operations)
def test_the_window_in_chunks_of_two_folds_the_same(policy, ops):
    """The window is kept in chunks (64 grants each); with chunks of 2 every append, settle
    and prune crosses chunk boundaries."""
    with unittest.mock.patch.object(_limiter_core, "CHUNK", 2):
        check_operations(policy, ops)


def check_operations(policy, ops):
    model = Model(policy)
    for op in ops:
        if op[0] == "ask":
            _, name, tenant, tree, tokens = op
            ask = Ask(
                provider="p", model=name, tenant=tenant, tree=tree, tokens=tokens, token=model.asked
            )
            model.asked += 1
            from actors._limiter._core import too_large

            if too_large(policy, ask) is None:
                model.queue.push(ask)
        elif op[0] == "settle":
            _, pick, tokens = op
            open_ = [g for g in model.grants if g.grant_id not in model.settled]
            if open_:
                grant = open_[pick % len(open_)]
                model.fold(GrantSettled(grant_id=grant.grant_id, tokens=tokens, at=model.now))
                model.settled[grant.grant_id] = tokens
                model.counted[grant.grant_id] = tokens  # reconciled: usage replaces estimate
        elif op[0] == "time":
            model.now += op[1]
        else:
            _, name, wait = op
            model.fold(
                BackoffRecorded(provider="p", model=name, until=model.now + wait, at=model.now)
            )
            model.backoff[name] = max(model.backoff.get(name, 0.0), model.now + wait)
        model.pump()
        check_fold(model)


def check_fold(model: Model) -> None:
    """The folded state agrees with the model: reconciliation, the window, its sums."""
    state = model.state
    # Reconciliation: the fold counts what the settles reported.
    assert state.tokens_used == sum(model.settled.values())
    assert state.tokens_granted == sum(g.tokens for g in model.grants)
    assert set(state.open) == {g.grant_id for g in model.grants} - set(model.settled)
    # The window holds the grants of the minute before the newest grant or settle.
    held = list(in_window(state))
    expected = [g.grant_id for g in model.grants if g.at > model.pruned_at - WINDOW]
    assert [h.grant_id for h in held] == expected
    totals: dict[str, tuple[int, int]] = {}
    for one in held:
        assert one.tokens == model.counted[one.grant_id]
        for bucket in one.buckets:
            requests, tokens = totals.get(bucket, (0, 0))
            totals[bucket] = (requests + 1, tokens + one.tokens)
    assert state.totals == totals  # the running sums are the window's
    busy: dict[str, int] = {}
    for one in state.open.values():
        for bucket in one.buckets:
            busy[bucket] = busy.get(bucket, 0) + 1
    assert state.busy == busy


@settings(max_examples=examples(200), deadline=None)
@given(
    policy=policies,
    asks=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 100)),
        min_size=1,
        max_size=40,
    ),
)
def test_every_waiting_call_is_granted_in_time(policy, asks):
    """No starvation: with every call settled at once, the windows keep moving and every
    call that could ever fit is granted."""
    model = Model(policy)
    for i, (tree, tokens) in enumerate(asks):
        model.queue.push(
            Ask(provider="p", model="m", tenant="t", tree=tree, tokens=tokens, token=i)
        )
    from actors._limiter._core import too_large

    model.queue.drop(lambda a: too_large(policy, a) is None)
    expected = len(model.queue)
    for _ in range(4 * len(asks) + 4):
        for grant in model.pump():
            model.fold(GrantSettled(grant_id=grant.grant_id, tokens=grant.tokens, at=model.now))
            model.settled[grant.grant_id] = grant.tokens
        if not len(model.queue):
            break
        wake = next_change(model.state, policy, model.now)
        assert wake is not None, "calls wait but nothing will ever change"
        model.now = wake
    assert len(model.grants) == expected


@settings(max_examples=examples(200), deadline=None)
@given(
    trees=st.integers(2, 5),
    per_tree=st.lists(st.integers(1, 12), min_size=5, max_size=5),
    rpm=st.integers(1, 7),
)
def test_trees_take_turns(trees, per_tree, rpm):
    """Round-robin: while two trees both wait, their grant counts never differ by more
    than one, however many calls each queued and in whatever order they came."""
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=rpm)})
    model = Model(policy)
    names = [f"tree{i}" for i in range(trees)]
    # The first tree queues all its calls first: it must not run ahead for that.
    n = 0
    for name, count in zip(names, per_tree, strict=False):
        for _ in range(count):
            model.queue.push(Ask(provider="p", model="m", tenant="t", tree=name, tokens=1, token=n))
            n += 1
    queued = dict(zip(names, per_tree, strict=False))
    granted = dict.fromkeys(names, 0)
    while len(model.queue):
        for grant in model.pump():
            granted[grant.tree] += 1
            waiting = [t for t in names if granted[t] < queued[t]]
            if waiting:
                counts = [granted[t] for t in waiting]
                assert max(counts) - min(counts) <= 1, granted
        model.now += WINDOW
    assert granted == queued


def test_a_blocked_large_call_is_not_overtaken_by_small_ones():
    policy = LimiterPolicy(models={"*": Limit(tokens_per_minute=100)})
    model = Model(policy)
    model.queue.push(Ask(provider="p", model="m", tenant="t", tree="a", tokens=60, token=0))
    assert [g.tree for g in model.pump()] == ["a"]
    model.queue.push(Ask(provider="p", model="m", tenant="t", tree="big", tokens=90, token=1))
    model.queue.push(Ask(provider="p", model="m", tenant="t", tree="small", tokens=10, token=2))
    # 40 tokens are left: the small call would fit, but the big one came first and waits.
    assert model.pump() == []
    model.now += WINDOW
    assert [g.tree for g in model.pump()] == ["big", "small"]  # 90 + 10 fit a new window


# -- the actor, under virtual time -------------------------------------------------------


async def _events(store, stream):
    return [decode_record(r) for r in await store.read(stream)]


async def test_the_limiter_grants_from_the_log_and_survives_a_restart(virtual_clock):
    store = InMemoryEventStore()
    clock = Clock(start=1_000_000.0)  # one wall clock for both runtimes, as on one host
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=2)})
    started = trio.current_time()
    times: list[float] = []
    async with open_runtime(store=store, clock=clock, seed=1) as runtime:
        limiter = await spawn_limiter(runtime, policy)

        async def call(tree: str) -> None:
            grant = await limiter.acquire(provider="p", model="m", tenant="t", tree=tree, tokens=10)
            times.append(trio.current_time() - started)
            limiter.settle(grant, 7)

        async with trio.open_nursery() as nursery:
            for tree in ["a", "a", "b", "b", "c"]:
                nursery.start_soon(call, tree)
        stats = await limiter.statistics()
        assert (stats.issued, stats.settled, stats.open, stats.waiting) == (5, 5, 0, 0)
    # Two a minute: the third and fourth calls waited a window, the fifth two.
    assert times == [0, 0, WINDOW, WINDOW, 2 * WINDOW]
    events = await _events(store, "limiter/fleet")
    grants = [e for e in events if isinstance(e, GrantIssued)]
    assert sorted(g.tree for g in grants) == ["a", "a", "b", "b", "c"]
    assert sum(e.tokens for e in events if isinstance(e, GrantSettled)) == 35
    # A new runtime on the same log folds the windows back: the next grant waits for them.
    async with open_runtime(store=store, clock=clock, seed=2) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        stats = await limiter.statistics()
        assert (stats.issued, stats.tokens_used) == (5, 35)
        # The fifth grant, a moment ago, still counts: one more fits now, the next waits.
        before = trio.current_time()
        await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
        assert trio.current_time() - before == 0
        await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
        assert trio.current_time() - before == WINDOW


async def test_the_limiter_snapshots_its_small_state_and_folds_it_back():
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        for _ in range(600):
            grant = await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=3)
            limiter.settle(grant, 2)
        before = await limiter.statistics()
    snapshot = await store.load_snapshot("limiter/fleet")
    assert snapshot is not None
    assert snapshot.type == "limiter.state"
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        assert await limiter.statistics() == before
    assert (before.issued, before.tokens_granted, before.tokens_used) == (600, 1800, 1200)


async def test_a_restart_frees_the_slots_of_calls_granted_before_it(virtual_clock):
    store = InMemoryEventStore()
    policy = LimiterPolicy(models={"*": Limit(concurrent=1)})
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        with trio.fail_after(1):
            await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
    expired = [e for e in await _events(store, "limiter/fleet") if isinstance(e, GrantsExpired)]
    assert expired == [GrantsExpired(grant_ids=("1",), reason="limiter restarted")]


async def test_a_grant_never_settled_expires_after_its_ttl(virtual_clock):
    policy = LimiterPolicy(models={"*": Limit(concurrent=1)}, grant_ttl=30)
    async with open_runtime() as runtime:
        limiter = await spawn_limiter(runtime, policy)
        await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
        before = trio.current_time()
        await limiter.acquire(provider="p", model="m", tenant="t", tree="b", tokens=1)
        assert trio.current_time() - before == 30


async def test_a_call_too_large_for_any_window_fails_at_once():
    policy = LimiterPolicy(tenants={"acme": Limit(tokens_per_minute=1000)})
    async with open_runtime() as runtime:
        limiter = await spawn_limiter(runtime, policy)
        with pytest.raises(LimitTooLargeError) as caught:
            await limiter.acquire(provider="p", model="m", tenant="acme", tree="a", tokens=1500)
    assert caught.value.code == "limit.too_large"
    assert str(caught.value) == (
        "a call estimated at 1500 tokens can never fit 'tenant:acme', whose limit is 1000 "
        "tokens per minute: lower the request's max_tokens or its context, or raise the limit"
    )


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="requests_per_minute must be a positive int or None"):
        Limit(requests_per_minute=0)


# -- sessions ----------------------------------------------------------------------------


async def test_a_session_waits_for_grants_and_settles_with_the_reported_usage(virtual_clock):
    store = InMemoryEventStore()
    llm = ScriptedLLM(
        [
            LLMResponse(content=f"answer {i}", usage=Usage(prompt_tokens=40, completion_tokens=2))
            for i in range(3)
        ]
    )
    policy = LimiterPolicy(
        models={"openai/*": Limit(requests_per_minute=2)}, completion_reserve=100
    )
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        session = await spawn_session(
            runtime,
            llm=llm,
            model="gpt-x",
            llm_hooks=[limiter.hook(provider="openai", tenant="acme")],
        )
        start = trio.current_time()
        for i in range(3):
            assert (await session.send(f"q{i}")).text == f"answer {i}"
        assert trio.current_time() - start == WINDOW
    events = await _events(store, "limiter/fleet")
    grants = [e for e in events if isinstance(e, GrantIssued)]
    assert {(g.provider, g.model, g.tenant, g.tree) for g in grants} == {
        ("openai", "gpt-x", "acme", session.id)
    }
    assert all(g.tokens > 100 for g in grants)  # the prompt's estimate plus the reserve
    assert [e.tokens for e in events if isinstance(e, GrantSettled)] == [42, 42, 42]


async def test_a_compaction_s_summary_is_granted_and_settled_like_a_round(virtual_clock):
    """A summary is a model call the application pays for: the limiter grants it in the
    session's tree and settles it with the summariser's reported usage."""

    def usage(request):
        # The prompt as the session counts it, so the policy sees the context grow.
        return Usage(prompt_tokens=sum(map(estimate_tokens, request.messages)), completion_tokens=3)

    def answer(request):
        if request.messages[0].text == SUMMARY_INSTRUCTIONS:
            return LLMResponse(content="the gist", usage=usage(request))
        return LLMResponse(content="noted", usage=usage(request))

    store = InMemoryEventStore()
    llm = FunctionLLM(answer)
    policy = LimiterPolicy(models={"openai/*": Limit(tokens_per_minute=100_000)})
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        session = await spawn_session(
            runtime,
            llm=llm,
            model="gpt-x",
            context=ContextPolicy(window=700, reserve=100),
            llm_hooks=[limiter.hook(provider="openai")],
        )
        for i in range(12):
            assert (await session.send(f"entry {i} " + "lorem " * 20)).text == "noted"
        stats = await limiter.statistics()
    summaries = [r for r in llm.requests if r.messages[0].text == SUMMARY_INSTRUCTIONS]
    assert summaries  # the policy compacted
    paid = [usage(r).total_tokens for r in llm.requests]
    events = await _events(store, "limiter/fleet")
    grants = [e for e in events if isinstance(e, GrantIssued)]
    assert len(grants) == len(paid)
    assert {(g.provider, g.tree) for g in grants} == {("openai", session.id)}
    assert [e.tokens for e in events if isinstance(e, GrantSettled)] == paid
    assert (stats.issued, stats.settled, stats.tokens_used) == (len(paid), len(paid), sum(paid))


async def test_a_429_closes_the_model_until_its_retry_after(virtual_clock):
    store = InMemoryEventStore()
    calls: list[float] = []

    async def answer(request):
        calls.append(trio.current_time())
        if len(calls) == 1:
            raise LLMRateLimitedError("slow down", status=429, provider="p", retry_after=7.0)
        return LLMResponse(content="ok")

    policy = LimiterPolicy(models={"*": Limit(concurrent=4)})
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        session = await spawn_session(
            runtime, llm=FunctionLLM(answer), llm_hooks=[limiter.hook(provider="p")]
        )
        assert (await session.send("hi")).text == "ok"
    assert calls[1] - calls[0] == 7.0
    events = await _events(store, "limiter/fleet")
    assert [type(e).__name__ for e in events] == [
        "GrantIssued",
        "GrantSettled",
        "BackoffRecorded",
        "GrantIssued",
        "GrantSettled",
    ] or [type(e).__name__ for e in events] == [
        "GrantIssued",
        "BackoffRecorded",
        "GrantSettled",
        "GrantIssued",
        "GrantSettled",
    ]
    # The refused call counted as a request but used no tokens; the second used its estimate
    # (the function model reports no usage).
    settled = [e.tokens for e in events if isinstance(e, GrantSettled)]
    assert settled[0] == 0
    assert settled[1] > 0
    backoff = next(e for e in events if isinstance(e, BackoffRecorded))
    assert backoff.until - backoff.at == 7.0


async def test_a_session_gives_up_after_the_policy_s_429_retries(virtual_clock):
    async def answer(request):
        raise LLMRateLimitedError("slow down", status=429, provider="p", retry_after=1.0)

    policy = LimiterPolicy(rate_limit_retries=1)
    async with open_runtime() as runtime:
        limiter = await spawn_limiter(runtime, policy)
        session = await spawn_session(
            runtime, llm=FunctionLLM(answer), llm_hooks=[limiter.hook(provider="p")]
        )
        result = await session.send("hi")
        stats = await limiter.statistics()
    assert result.status == "failed"
    assert result.error_code == "llm.rate_limited"
    assert (stats.issued, stats.settled) == (2, 2)


def test_the_attempt_observer_feeds_a_transport_s_429s():
    from protocols.transports import Attempt

    told = []

    class FakeLimiter:
        def rate_limited(self, provider, model, retry_after):
            told.append((provider, model, retry_after))

    from actors.limits import Limiter

    observe = Limiter.on_attempt(FakeLimiter(), "gpt-x")  # type: ignore[arg-type]
    base = dict(number=1, error_message="x", status=429, elapsed=0.0)
    observe(Attempt(provider="openai", error_code="llm.rate_limited", next_delay=3.0, **base))
    observe(Attempt(provider="openai", error_code="llm.server", next_delay=3.0, **base))
    assert told == [("openai", "gpt-x", 3.0)]


# -- the actor under contention, by Hypothesis, in virtual time ----------------------------


def _check_log(events: list[object], policy: LimiterPolicy) -> None:
    """Replay the limiter's log: no window and no concurrency limit was ever exceeded at a
    grant, counting each grant's tokens as the limiter did at that moment."""
    counted: dict[str, int] = {}
    open_: set[str] = set()
    grants: list[GrantIssued] = []
    for event in events:
        if isinstance(event, GrantIssued):
            buckets = Model.buckets(event)
            for bucket in buckets:
                limit = policy.limit_of(bucket)
                if limit is None:
                    continue
                recent = [
                    g for g in grants if g.at > event.at - WINDOW and bucket in Model.buckets(g)
                ]
                if limit.requests_per_minute is not None:
                    assert len(recent) + 1 <= limit.requests_per_minute
                if limit.tokens_per_minute is not None:
                    used = sum(counted[g.grant_id] for g in recent)
                    assert used + event.tokens <= limit.tokens_per_minute
                if limit.concurrent is not None:
                    busy = [g for g in grants if g.grant_id in open_ and bucket in Model.buckets(g)]
                    assert len(busy) + 1 <= limit.concurrent
            grants.append(event)
            counted[event.grant_id] = event.tokens
            open_.add(event.grant_id)
        elif isinstance(event, GrantSettled):
            counted[event.grant_id] = event.tokens
            open_.discard(event.grant_id)
        elif isinstance(event, GrantsExpired):
            open_.difference_update(event.grant_ids)


@settings(max_examples=examples(40), deadline=None)
@given(
    policy=policies,
    agents=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),  # tree
            st.sampled_from(["t1", "t2"]),  # tenant
            st.lists(
                st.tuples(st.integers(1, 100), st.floats(0.0, 20.0), st.integers(0, 150)),
                min_size=1,
                max_size=4,
            ),  # calls: (estimate, seconds, tokens used)
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_agents_under_contention_stay_within_every_limit(policy, agents):
    """Agents of several trees and tenants call one model through the handle (grants decided
    in their tasks and by the actor), in virtual
    time; the log shows no window or slot ever exceeded, every call granted once, and the
    fold's token counts equal to what the calls reported."""
    store = InMemoryEventStore()
    reported: list[int] = []

    async def main() -> None:
        async with open_runtime(store=store, seed=3) as runtime:
            limiter = await spawn_limiter(runtime, policy)

            async def agent(tree: str, tenant: str, calls: list[tuple[int, float, int]]) -> None:
                for estimate, seconds, used in calls:
                    try:
                        grant = await limiter.acquire(
                            provider="p", model="m", tenant=tenant, tree=tree, tokens=estimate
                        )
                    except LimitTooLargeError:
                        continue
                    await trio.sleep(seconds)
                    reported.append(used)
                    limiter.settle(grant, used)

            async with trio.open_nursery() as nursery:
                for tree, tenant, calls in agents:
                    nursery.start_soon(agent, tree, tenant, calls)
            stats = await limiter.statistics()
            assert (stats.open, stats.waiting) == (0, 0)
            assert stats.issued == stats.settled == len(reported)
            assert stats.tokens_used == sum(reported)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    events = trio.run(_events, store, "limiter/fleet")
    _check_log(events, policy)


async def test_the_limiter_works_on_sqlite_and_folds_its_windows_back(virtual_clock, tmp_path):
    from runtime import open_sqlite_store

    clock = Clock(start=1_000_000.0)
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=1)})
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(path) as store, open_runtime(store=store, clock=clock) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        grant = await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=5)
        limiter.settle(grant, 4)
        await limiter.statistics()
    await trio.sleep(30)
    async with open_sqlite_store(path) as store, open_runtime(store=store, clock=clock) as runtime:
        limiter = await spawn_limiter(runtime, policy)
        assert (await limiter.statistics()).tokens_used == 4
        before = trio.current_time()
        await limiter.acquire(provider="p", model="m", tenant="t", tree="b", tokens=5)
        assert trio.current_time() - before == 30  # the first grant's minute, from the log


async def test_calls_that_arrive_together_share_one_append(virtual_clock):
    """A burst of asks and settles is taken before the limiter appends: fewer appends than
    events, and every settle is in the log before the grant it made room for."""
    store = InMemoryEventStore()
    policy = LimiterPolicy(models={"*": Limit(concurrent=5)})
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, policy)

        async def call(tree: str) -> None:
            grant = await limiter.acquire(provider="p", model="m", tenant="t", tree=tree, tokens=1)
            await trio.sleep(1)
            limiter.settle(grant, 1)

        async with trio.open_nursery() as nursery:
            for number in range(20):
                nursery.start_soon(call, f"tree{number}")
        await limiter.statistics()
    records = await store.read("limiter/fleet")
    appends = sum(1 for r in records if r.metadata is None)  # the last event of each append
    assert len(records) == 40
    assert appends < 20
    _check_log([decode_record(r) for r in records], policy)


async def test_a_settle_after_the_limiter_stopped_is_logged_not_raised(caplog):
    async with open_runtime() as runtime:
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        grant = await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
    limiter.settle(grant, 1)  # the runtime has closed: the hook's finally must not raise
    assert "limiter fleet has stopped; _Settle(grant_id='1', tokens=1) not told" in caplog.text


@settings(max_examples=examples(200), deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["extend", "extend", "compact", "reprompt", "new_tools", "same"]),
            st.integers(1, 3),
            st.sampled_from(["s1", "s2"]),
        ),
        max_size=25,
    )
)
def test_the_hook_s_running_estimate_equals_counting_the_whole_request(steps):
    """The hook counts only what a request adds to the session's previous one; whatever
    the conversation does (grow, be compacted, change its tools), it gets the full count."""
    from actors._limiter._actor import _Estimator, estimate_request
    from protocols import AssistantMessage, LLMRequest, SystemMessage, ToolDefinition, UserMessage

    estimator = _Estimator()
    conversations = {"s1": [SystemMessage("be brief")], "s2": [SystemMessage("be long")]}
    tools = {"s1": (), "s2": ()}
    for number, (step, count, session) in enumerate(steps):
        messages = conversations[session]
        if step == "extend":
            for i in range(count):
                turn = (
                    UserMessage(f"q{number}.{i}")
                    if i % 2
                    else AssistantMessage(content=f"a{number}")
                )
                messages.append(turn)
        elif step == "compact":
            messages[:] = [SystemMessage(f"summary {number}"), *messages[-count:]]
        elif step == "reprompt":  # a send's own system prompt: the same length, a new head
            messages[0] = SystemMessage(f"prompt {number} " * count)
        elif step == "new_tools":
            tools[session] = (ToolDefinition(name=f"t{number}", description="x" * number),)
        request = LLMRequest(messages=tuple(messages), tools=tools[session], max_tokens=7)
        assert estimator(session, request, 100) == estimate_request(request, 100)


async def test_a_grant_decided_in_the_callers_task_is_appended_by_the_write_behind():
    # The handle grants without a round trip to the actor; the grant is still an event,
    # appended within the write-behind's delay while the runtime keeps running.
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        grant = await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=5)
        limiter.settle(grant, 4)
        await trio.sleep(0.05)
        events = await _events(store, "limiter/fleet")
        assert [type(e).__name__ for e in events] == ["GrantIssued", "GrantSettled"]
        assert events[0] == grant


async def test_shared_limiters_of_two_runtimes_on_one_store_hold_one_limit(virtual_clock):
    # The PostgreSQL test (test_limiter_postgres.py) runs this across real connections.
    store = InMemoryEventStore()
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=10)})
    async with open_runtime(store=store) as a, open_runtime(store=store) as b:
        limiters = [
            await spawn_limiter(a, policy, shared=True),
            await spawn_limiter(b, policy, shared=True),
        ]

        async def caller(number: int) -> None:
            limiter = limiters[number % 2]
            with trio.move_on_after(30):
                while True:
                    grant = await limiter.acquire(
                        provider="p", model="m", tenant="t", tree=f"t{number}", tokens=1
                    )
                    limiter.settle(grant, 1)

        async with trio.open_nursery() as nursery:
            for number in range(6):
                nursery.start_soon(caller, number)
        stats = [await limiter.statistics() for limiter in limiters]
    events = await _events(store, "limiter/fleet")
    _check_log(events, policy)
    assert [s.issued for s in stats] == [10, 10]
    assert sum(isinstance(e, GrantIssued) for e in events) == 10


async def test_at_most_64_grants_wait_for_the_write_behind(virtual_clock):
    # Calls in a row with no time passing (the write-behind's delay never ends): after
    # each, at most 64 of the grants told are not yet in the log.
    store = InMemoryEventStore()
    async with open_runtime(store=store) as runtime:
        limiter = await spawn_limiter(runtime, LimiterPolicy())
        before = trio.current_time()
        unwritten = []
        for told in range(1, 201):
            await limiter.acquire(provider="p", model="m", tenant="t", tree="a", tokens=1)
            written = sum(isinstance(e, GrantIssued) for e in await _events(store, "limiter/fleet"))
            unwritten.append(told - written)
        assert trio.current_time() == before
        assert 0 < max(unwritten) <= 64


class _Racing:
    """A store that lets another node append to the limiter's stream just before this
    node's next append there: the append then meets a version conflict."""

    def __init__(self, store: InMemoryEventStore) -> None:
        self._store = store
        self.before_append = None

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def append(self, stream, events, expected_version, *args, **kwargs):
        race, self.before_append = self.before_append, None
        if race is not None and stream == "limiter/fleet":
            await race()
        return await self._store.append(stream, events, expected_version, *args, **kwargs)


async def test_a_shared_limiter_whose_append_conflicts_folds_the_other_and_decides_again(
    virtual_clock, caplog
):
    caplog.set_level("DEBUG", logger="powertrio.limiter")
    store = InMemoryEventStore()
    racing = _Racing(store)
    policy = LimiterPolicy(models={"*": Limit(requests_per_minute=2)})
    async with open_runtime(store=store) as a, open_runtime(store=racing) as b:
        first = await spawn_limiter(a, policy, shared=True)
        second = await spawn_limiter(b, policy, shared=True)
        theirs: list[GrantIssued] = []

        async def other_node() -> None:
            theirs.append(
                await first.acquire(provider="p", model="m", tenant="t", tree="x", tokens=1)
            )

        racing.before_append = other_node
        mine = await second.acquire(provider="p", model="m", tenant="t", tree="y", tokens=1)
        with trio.move_on_after(10) as waited:  # the limit is spent: a third call waits
            await first.acquire(provider="p", model="m", tenant="t", tree="x", tokens=1)
        assert waited.cancelled_caught
    assert [g.grant_id for g in theirs] == ["1"]
    assert mine.grant_id == "2"
    events = await _events(store, "limiter/fleet")
    assert [e.grant_id for e in events if isinstance(e, GrantIssued)] == ["1", "2"]
    assert "another node appended first; deciding again" in caplog.text
