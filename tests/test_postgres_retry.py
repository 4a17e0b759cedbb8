"""The PostgreSQL store's retry policy on a fake clock: it gives up exactly past its
deadline, never sooner, and an outage's later failures do not start the count again."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import StoreUnavailableError
from runtime._postgres._retry import Retrying


class _Time:
    """A clock that moves only when the retrier sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def _down() -> StoreUnavailableError:
    return StoreUnavailableError("db:5432/x", "connect", "Connection refused")


def _flaky(failures: int) -> tuple[list[int], Callable[[], str]]:
    calls = [0]

    def attempt() -> str:
        calls[0] += 1
        if calls[0] <= failures:
            raise _down()
        return "done"

    return calls, attempt


@given(
    deadline=st.floats(min_value=0.0, max_value=30.0, allow_nan=False),
    failures=st.integers(min_value=0, max_value=80),
)
def test_the_retrier_tries_until_its_deadline_and_not_past_it(
    deadline: float, failures: int
) -> None:
    time = _Time()
    retrying = Retrying(deadline, clock=time.clock, sleep=time.sleep)
    calls, attempt = _flaky(failures)
    dropped = [0]

    def after() -> None:
        dropped[0] += 1

    error: StoreUnavailableError | None = None
    try:
        assert retrying.call(attempt, after_failure=after) == "done"
    except StoreUnavailableError as exc:
        error = exc
    if error is not None:
        assert error.code == "store.unavailable"
        assert error.retried_for == pytest.approx(time.now if deadline > 0 else 0.0)
        assert error.retried_for <= deadline
        assert not error.outcome_unknown
        # It gave up only because the next pause would have crossed the deadline.
        next_pause = min(0.05 * 2 ** len(time.pauses), 0.5)
        assert time.now + next_pause > deadline
    assert time.now <= deadline  # never slept past it
    assert all(0 < p <= 0.5 for p in time.pauses)
    assert time.pauses == sorted(time.pauses)  # the pauses only grow
    assert retrying.failures == dropped[0] == min(failures, calls[0])
    assert (error is None) == (calls[0] == failures + 1)


def test_the_deadline_counts_from_the_outage_not_from_each_caller() -> None:
    """Callers failing one after another in one outage share its deadline: together they
    never wait past it, and the last ones give up after one try; a success ends it."""
    time = _Time()
    retrying = Retrying(2.0, clock=time.clock, sleep=time.sleep)
    calls, attempt = _flaky(10_000)
    for _ in range(5):
        with pytest.raises(StoreUnavailableError) as caught:
            retrying.call(attempt, after_failure=lambda: None)
        assert "still after retrying for" in str(caught.value)
        assert time.now <= 2.0
    before = calls[0]
    with pytest.raises(StoreUnavailableError):
        retrying.call(attempt, after_failure=lambda: None)
    assert calls[0] == before + 1
    assert retrying.call(lambda: "up", after_failure=lambda: None) == "up"
    calls, attempt = _flaky(3)  # a new outage: a new deadline
    assert retrying.call(attempt, after_failure=lambda: None) == "done"


def test_with_no_deadline_the_first_failure_is_reported_as_it_is() -> None:
    time = _Time()
    retrying = Retrying(0.0, clock=time.clock, sleep=time.sleep)
    for _ in range(2):
        with pytest.raises(StoreUnavailableError) as caught:
            retrying.call(_flaky(5)[1], after_failure=lambda: None)
        assert caught.value.retried_for == 0
        assert str(caught.value) == (
            "event store server db:5432/x cannot be reached (Connection refused); nothing "
            "was written; retry once the server is back"
        )
    assert time.pauses == []
