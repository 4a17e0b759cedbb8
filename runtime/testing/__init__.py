"""The kernel's test doubles: scripted and function LLMs, in-memory and faulty event stores,
the event-store conformance suite, and a throwaway PostgreSQL server.

``import runtime`` does not load this module. The agent test kit (a deterministic
harness, Hypothesis strategies, invariants, the pytest plugin) is ``actors.testing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

# Names load on first use, so importing the package costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from .._postgres._server import PostgresServer as PostgresServer
    from .._postgres._server import postgres_missing as postgres_missing
    from .._postgres._server import running_postgres as running_postgres
    from .._store._memory import InMemoryEventStore as InMemoryEventStore
    from ._faults import FaultyEventStore as FaultyEventStore
    from ._faults import InjectedFault as InjectedFault
    from ._llm import FunctionLLM as FunctionLLM
    from ._llm import ScriptedLLM as ScriptedLLM
    from ._llm import ScriptItem as ScriptItem
    from ._store_conformance import EVENT_STORE_CHECKS as EVENT_STORE_CHECKS
    from ._store_conformance import StoreFactory as StoreFactory
    from ._store_conformance import check_event_store as check_event_store
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            ".._store._memory": ("InMemoryEventStore",),
            ".._postgres._server": ("PostgresServer", "postgres_missing", "running_postgres"),
            "._faults": ("FaultyEventStore", "InjectedFault"),
            "._llm": ("FunctionLLM", "ScriptedLLM", "ScriptItem"),
            "._store_conformance": ("EVENT_STORE_CHECKS", "StoreFactory", "check_event_store"),
        },
    )
