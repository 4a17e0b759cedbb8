"""Public test kit: in-memory fakes, scripted LLMs, fault injection, virtual time.

``import runtime`` does not load this module.
"""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

from ._llm import FunctionLLM as FunctionLLM
from ._llm import ScriptedLLM as ScriptedLLM
from ._llm import ScriptItem as ScriptItem
from ._memory_store import InMemoryEventStore as InMemoryEventStore
from ._store_conformance import EVENT_STORE_CHECKS as EVENT_STORE_CHECKS
from ._store_conformance import StoreFactory as StoreFactory
from ._store_conformance import check_event_store as check_event_store

_fixup(__name__, globals())
del _fixup
