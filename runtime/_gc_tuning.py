"""The cyclic garbage collector's thresholds while a runtime is open.

A send allocates thousands of short-lived objects (events, their encodings, messages,
Trio's task bookkeeping) that reference counting frees at once; with CPython's default
thresholds (700, 10, 10) the collector still runs a young-generation pass every 700 net
allocations and walks everything that survived two of them. On the agents bench (256
sessions at once) that was 15-20 % of the CPU per send; at (10_000, 20, 50) it is under
3 %, for no more memory than the cycles left waiting a little longer (the runtime's own
state is acyclic: the log holds it).

An application that set its own thresholds keeps them: the runtime changes only the
interpreter's defaults, and puts them back when the last open runtime closes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RUNTIME_GC_THRESHOLD", "runtime_gc_threshold"]

RUNTIME_GC_THRESHOLD = (10_000, 20, 50)
"""The collector's thresholds while a runtime is open (``open_runtime(gc_threshold=)``)."""

_DEFAULT = (700, 10, 10)
"""CPython's default thresholds: only these are replaced."""

_lock = threading.Lock()
_open = 0
_restore: tuple[int, int, int] | None = None


@contextmanager
def runtime_gc_threshold(threshold: tuple[int, int, int] | None) -> Iterator[None]:
    """Use ``threshold`` while the block runs, if the collector has its defaults (and no
    other runtime changed them already); restore them when the last such block ends.
    ``None`` leaves the collector alone."""
    global _open, _restore  # noqa: PLW0603  # one collector per process
    if threshold is None:
        yield
        return
    with _lock:
        if _open == 0 and gc.get_threshold() == _DEFAULT:
            _restore = _DEFAULT
            gc.set_threshold(*threshold)
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0 and _restore is not None:
                gc.set_threshold(*_restore)
                _restore = None
