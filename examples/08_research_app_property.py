"""Property-test the research app of example 07 as it is: its agents, board and model.

The kit (``actors.testing``) runs the app's ``AgentSpec`` tree with its own model
function, its built-in tools (the board, the wake-up, spawn_agent) and the approval it
needs, under virtual time, then throws generated operations at it: more sends, board
writes by others, timers, crashes of the planner at any event, runtime restarts. After
each run the kit's invariants must hold: replay equals the live state, no recorded
answer is asked for again, every request is provider-valid, every run ends once.

    python examples/08_research_app_property.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given

from actors.testing import (
    Operation,
    RuntimeHarness,
    Send,
    assert_invariants,
    operations,
    property_settings,
)
from runtime.testing import FunctionLLM

EXAMPLES = 25


def _load_app():  # the app of example 07, imported from its file
    path = Path(__file__).with_name("07_research_app.py")
    spec = importlib.util.spec_from_file_location("research_app", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["research_app"] = module
    spec.loader.exec_module(module)
    return module


app = _load_app()
harness = RuntimeHarness(
    app.PLANNER,
    llm=FunctionLLM(app.model),
    approve=True,
    board_id="research",
    session_id="planner",
)


@property_settings(examples=EXAMPLES, derandomize=True)  # the same cases on every run
@given(ops=operations(max_size=5, board_keys=("findings/extra", "notes/x"), cancels=False))
def test_the_app_keeps_the_kits_invariants(ops: tuple[Operation, ...]) -> None:
    """The planner's task, then whatever the operations do, crashes and restarts included:
    the kit's invariants hold."""
    assert_invariants(harness.run((), (Send(app.TASK, wait=True), *ops)))


if __name__ == "__main__":
    test_the_app_keeps_the_kits_invariants()
    checked = " ".join((test_the_app_keeps_the_kits_invariants.__doc__ or "").split())
    print(f"[completed] {EXAMPLES} generated cases: {checked}")
