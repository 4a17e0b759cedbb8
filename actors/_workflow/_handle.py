"""The handle on a workflow and the functions that start one.

The actor that runs a workflow, and the context its function is given, are in
``_workflow._workflow``; this module is what callers hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, final

from protocols import JsonValue
from protocols.errors import ActorCrashedError, ActorExistsError, ReplayDivergenceError

from ._errors import WorkflowCancelledError, WorkflowFailedError
from ._events import WorkflowFinished, WorkflowState
from ._workflow import (
    Cancel,
    GetState,
    Signal,
    Start,
    WaitResult,
    WorkflowActor,
    WorkflowFunction,
    to_json,
)

if TYPE_CHECKING:
    from protocols import LLM
    from runtime import ActorRef, Runtime

__all__ = ["Workflow", "run_workflow", "start_workflow"]

I = TypeVar("I")  # noqa: E741 - the input type, as in the docs
O = TypeVar("O")  # noqa: E741 - the output type


@final
class Workflow:
    """A handle on a running (or finished) workflow: its result, signals, cancel.

    Made by :func:`start_workflow`. Its methods survive crashes of the workflow actor:
    they ask again once the supervisor has restarted it from the log.
    """

    __slots__ = ("_ref", "_runtime")
    _ref: ActorRef[object]
    _runtime: Runtime

    def __init__(self) -> None:
        msg = "Workflow is made by start_workflow()"
        raise TypeError(msg)

    @classmethod
    def _create(cls, ref: ActorRef[object], runtime: Runtime) -> Workflow:
        self = object.__new__(cls)
        self._ref = ref
        self._runtime = runtime
        return self

    @property
    def id(self) -> str:
        """The workflow id (its stream is ``workflow/<id>``)."""
        return self._ref.id

    async def _ask(self, message: object) -> object:
        while True:
            try:
                return await self._ref.ask(message)
            except ActorCrashedError:
                continue  # restarted from the log

    async def result(self) -> JsonValue:
        """Wait for the workflow to end and return what its function returned.

        Raises:
            WorkflowFailedError: the function raised (the error is in the log).
            WorkflowCancelledError: the workflow was cancelled.
            ReplayDivergenceError: the function asked for other steps than the log holds.
        """
        outcome = await self._ask(WaitResult())
        if isinstance(outcome, ReplayDivergenceError):
            raise outcome
        assert isinstance(outcome, WorkflowFinished)
        if outcome.status == "failed":
            raise WorkflowFailedError(self.id, outcome.error)
        if outcome.status == "cancelled":
            raise WorkflowCancelledError(self.id, outcome.error)
        return outcome.result

    async def signal(self, name: str, payload: JsonValue = None) -> None:
        """Send the workflow a signal; it is recorded at once, and a ``wait_for(name)``
        (now or later) receives ``payload``.

        Raises:
            TypeError: ``payload`` is not JSON.
        """
        await self._ask(Signal(name, to_json(payload)))

    async def cancel(self, reason: str = "") -> bool:
        """Cancel the workflow and the agent runs it is waiting for.

        Returns:
            ``False`` when the workflow had already ended.
        """
        return bool(await self._ask(Cancel(reason)))

    async def state(self) -> WorkflowState:
        """The folded state: its steps, signals and how it ended."""
        state = await self._ask(GetState())
        assert isinstance(state, WorkflowState)
        return state


async def start_workflow(
    runtime: Runtime,
    definition: WorkflowFunction[I, O],
    input: I | None = None,
    *,
    workflow_id: str | None = None,
    llm: LLM | None = None,
) -> Workflow:
    """Start a workflow, or resume it from its stream when ``workflow_id`` has one.

    Args:
        runtime (Runtime): the runtime; its store holds ``workflow/<id>``.
        definition (WorkflowFunction): a function decorated with :func:`workflow`.
        input: the function's second argument; recorded as JSON (ignored on a resume).
        workflow_id (str | None): resume this workflow; a new id when ``None``.
        llm (LLM | None): the model of agent specs that have none.

    Returns:
        The handle.

    Raises:
        TypeError: ``definition`` is not a workflow, or ``input`` is not JSON.
    """
    given: object = definition
    if not isinstance(given, WorkflowFunction):
        msg = f"{given!r} is not a workflow: decorate the function with @workflow"
        raise TypeError(msg)
    encoded = to_json(input)
    wf_id = workflow_id or runtime.ids.new("wf")
    try:
        ref: ActorRef[object] = await runtime.spawn(
            lambda: WorkflowActor(wf_id, definition, llm), id=wf_id
        )
    except ActorExistsError:
        ref = runtime.lookup(wf_id)
    handle = Workflow._create(ref, runtime)
    await handle._ask(Start(definition.name, encoded))
    return handle


async def run_workflow(
    runtime: Runtime,
    definition: WorkflowFunction[I, O],
    input: I | None = None,
    *,
    workflow_id: str | None = None,
    llm: LLM | None = None,
) -> JsonValue:
    """:func:`start_workflow`, then wait for its result (see :meth:`Workflow.result`)."""
    handle = await start_workflow(runtime, definition, input, workflow_id=workflow_id, llm=llm)
    return await handle.result()
