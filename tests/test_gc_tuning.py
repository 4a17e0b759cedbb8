"""The runtime raises the collector's thresholds while open, only over CPython's defaults,
and puts them back when the last runtime closes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import trio

from runtime import open_runtime
from runtime.lowlevel import RUNTIME_GC_THRESHOLD

DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*DEFAULT)
    yield
    gc.set_threshold(*before)


async def test_an_open_runtime_tunes_the_collector_and_the_last_one_restores_it() -> None:
    async with open_runtime(seed=1):
        assert gc.get_threshold() == RUNTIME_GC_THRESHOLD
        async with open_runtime(seed=2):
            assert gc.get_threshold() == RUNTIME_GC_THRESHOLD
        assert gc.get_threshold() == RUNTIME_GC_THRESHOLD  # one runtime still open
    assert gc.get_threshold() == DEFAULT


async def test_thresholds_the_application_chose_are_kept() -> None:
    gc.set_threshold(2000, 5, 5)
    async with open_runtime(seed=1):
        assert gc.get_threshold() == (2000, 5, 5)
    assert gc.get_threshold() == (2000, 5, 5)


async def test_gc_threshold_none_leaves_the_collector_alone() -> None:
    async with open_runtime(seed=1, gc_threshold=None):
        assert gc.get_threshold() == DEFAULT


async def test_a_runtime_that_fails_restores_the_thresholds() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with open_runtime(seed=1):
            await trio.lowlevel.checkpoint()
            raise RuntimeError("boom")
    assert gc.get_threshold() == DEFAULT
