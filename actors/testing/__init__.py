"""The agent test kit: a deterministic harness under virtual time with fault injection,
Hypothesis strategies for conversations and operation lists, ready-made invariants, and a
pytest plugin (``virtual_clock``, ``scripted_llm``, ``runtime_harness``).

``import actors`` does not load this module, and Hypothesis is imported only when a
strategy is built. The kernel's doubles (``ScriptedLLM``, ``FunctionLLM``, in-memory and
faulty stores) are in ``runtime.testing``.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._deterministic_llm import DeterministicLLM as DeterministicLLM
from ._deterministic_llm import LLMCall as LLMCall
from ._harness import DEFAULT_EPOCH as DEFAULT_EPOCH
from ._harness import ObservedState as ObservedState
from ._harness import RuntimeHarness as RuntimeHarness
from ._harness import Trace as Trace
from ._invariants import assert_budgets_respected as assert_budgets_respected
from ._invariants import assert_crash_equivalent as assert_crash_equivalent
from ._invariants import assert_follow_ups_read_once as assert_follow_ups_read_once
from ._invariants import assert_invariants as assert_invariants
from ._invariants import assert_no_repeated_requests as assert_no_repeated_requests
from ._invariants import assert_replay_matches as assert_replay_matches
from ._invariants import assert_requests_provider_valid as assert_requests_provider_valid
from ._invariants import assert_runs_end_once as assert_runs_end_once
from ._invariants import assert_states_are_folds as assert_states_are_folds
from ._invariants import assert_timers_fire_once as assert_timers_fire_once
from ._operations import AdvanceClock as AdvanceClock
from ._operations import CancelRun as CancelRun
from ._operations import ClearTimer as ClearTimer
from ._operations import CrashSession as CrashSession
from ._operations import FailNextCommit as FailNextCommit
from ._operations import Operation as Operation
from ._operations import RestartRuntime as RestartRuntime
from ._operations import Send as Send
from ._operations import SendFollowUp as SendFollowUp
from ._operations import SetTimer as SetTimer
from ._operations import WriteBoard as WriteBoard
from ._strategies import UNKNOWN_TOOL as UNKNOWN_TOOL
from ._strategies import conversations as conversations
from ._strategies import json_values as json_values
from ._strategies import llm_errors as llm_errors
from ._strategies import operations as operations
from ._strategies import property_settings as property_settings
from ._strategies import tool_calls as tool_calls
from ._strategies import usages as usages

_fixup(__name__, globals())
del _fixup
