"""The session handle: what a caller holds to talk to a session actor."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, final, overload

import trio

from protocols import (
    Cancel,
    CancelMode,
    FollowUp,
    HumanReply,
    OutputType,
    ResponseFormat,
)
from protocols.errors import ActorCrashedError, ToolNotFoundError

from ._agents import AgentSpec, FormatArg, resolve_format
from ._budget import Budget, Price
from ._errors import HumanRequestNotFoundError, SessionBusyError
from ._events import ChildFinished, RunResult, SessionState, typed_result
from ._observe import Observation, ObserverBus
from ._replace import maker
from ._steps import (
    BadReply,
    Busy,
    BusyPolicy,
    ChildDone,
    GetState,
    NoRequest,
    PythonSpawn,
    Send,
    SessionConfig,
    Stamped,
    Urgent,
    WaitRun,
    check_limits,
)

_send = maker(Send)
"""``Send(...)`` less its frozen guard per field: one per send."""

if TYPE_CHECKING:
    from runtime import ActorRef, Runtime

    from .._tools._tool import ToolRegistry

T = TypeVar("T")


@final
class Session:
    """A handle on a session actor: send it input, read its state, watch it work.

    Made by :func:`spawn_session`. ``send`` survives crashes of the actor: the run goes on
    from the log after the supervisor restarts it, and ``send`` waits for its end.
    """

    __slots__ = (
        "_bus",
        "_output_type",
        "_prices",
        "_ref",
        "_run_types",
        "_runtime",
        "_tools",
    )
    _ref: ActorRef[object]
    _runtime: Runtime
    _tools: ToolRegistry
    _bus: ObserverBus
    _prices: Mapping[str, Price]
    _output_type: OutputType[Any] | None
    _run_types: dict[str, OutputType[Any] | None] | None
    """Made at the first send that chooses its own response format: a registered session
    holds no empty dict."""

    def __init__(self) -> None:
        msg = "Session is made by spawn_session()"
        raise TypeError(msg)

    @classmethod
    def _create(cls, ref: ActorRef[object], runtime: Runtime, config: SessionConfig) -> Session:
        self = object.__new__(cls)
        self._ref = ref
        self._runtime = runtime
        # The registry, not a set of its names: sessions given the same tools share it.
        self._tools = config.tools
        self._bus = config.bus
        self._prices = config.prices
        self._output_type = config.output_type
        self._run_types = None  # runs whose send chose their own response format
        return self

    @property
    def id(self) -> str:
        """The session id (its stream is ``session/<id>``)."""
        return self._ref.id

    @property
    def ref(self) -> ActorRef[object]:
        """The session actor's ref."""
        return self._ref

    @property
    def observer_errors(self) -> int:
        """How many times an observer callback raised (each was logged and ignored)."""
        return self._bus.errors

    @overload
    async def send(
        self,
        input: str,
        *,
        max_rounds: int | None = None,
        tools: Iterable[str] | None = None,
        system_prompt: str | None = None,
        response_format: type[T],
        budget: Budget | None = None,
        if_busy: BusyPolicy | None = None,
        id: str | None = None,
    ) -> RunResult[T]: ...

    @overload
    async def send(
        self,
        input: str,
        *,
        max_rounds: int | None = None,
        tools: Iterable[str] | None = None,
        system_prompt: str | None = None,
        response_format: ResponseFormat | None = None,
        budget: Budget | None = None,
        if_busy: BusyPolicy | None = None,
        id: str | None = None,
    ) -> RunResult: ...

    async def send(
        self,
        input: str,
        *,
        max_rounds: int | None = None,
        tools: Iterable[str] | None = None,
        system_prompt: str | None = None,
        response_format: FormatArg = None,
        budget: Budget | None = None,
        if_busy: BusyPolicy | None = None,
        id: str | None = None,
    ) -> RunResult[Any]:
        """Run the agent on ``input`` and return how the run ended.

        If a run is active, ``if_busy`` (default: the session's ``on_busy``, itself
        ``queue`` by default) decides. Each override applies to this run only; ``None``
        keeps the session's default.

        Give an ``id`` to make the send safe to retry: it becomes the run's id, and the
        session records one run per id, forever. A send repeated with an id the session
        knows (after the caller crashed, was cancelled or restarted, whether or not the
        first send got through) starts nothing: it waits for that run and returns its
        result, running or finished; its input and overrides are ignored. So the pattern
        that survives ``kill -9`` anywhere is ``await session.send(text, id="...")`` with
        an id fixed by the caller.

        Args:
            input (str): the user's message.
            max_rounds (int | None): this run's round limit.
            tools (Iterable[str] | None): the subset of the session's tools for this run.
            system_prompt (str | None): this run's system prompt.
            response_format (ResponseFormat | type | None): a JSON Schema the final answer
                must match; the parsed answer is ``RunResult.output``. Or an attrs class
                or a pydantic model: the model is asked for its generated schema and
                ``RunResult.output`` is an instance (the log keeps the JSON, which
                ``RunResult.raw_output`` holds too). An answer that does not match gets
                one repair round, then the run fails with ``session.output_invalid`` and
                the raw text in ``RunResult.text``. ``None``: the session's default.
            budget (Budget | None): token, cost and wall-time limits for this run.
            if_busy (BusyPolicy | None): ``queue``, ``reject`` or ``interrupt``.
            id (str | None): the run's id, unique in the session; a new one if ``None``.
                Pick ids that cannot clash with the ones the session makes itself (they
                start with ``run_``, ``fu-`` or ``tm-``, or hold a ``:``).

        Returns:
            RunResult: status, final text, structured output, rounds and usage of this run.
            For ``waiting_for_human`` answer its ``human_requests`` with :meth:`reply`,
            :meth:`approve` or :meth:`deny`, which return the run's next result.

        Raises:
            ToolNotFoundError: ``tools`` names a tool the session does not have.
            ToolDefinitionError: ``response_format`` holds a malformed JSON Schema.
            UnsupportedTypeError: ``response_format`` is a class with a field whose type
                has no JSON Schema form (the message names the field).
            OutputTypeError: the run's recorded answer does not fit the class (a repeated
                send of a run recorded before the class changed).
            ConfigError: ``budget`` limits cost but the session has no prices.
            SessionBusyError: a run is active and the policy is ``reject``.
            ValueError: ``max_rounds`` is below 1, or ``input`` or ``id`` is empty.
            ActorStoppedError: the session actor stopped for good.
        """
        if id is not None and not id:
            msg = "id must not be empty: leave it None for a new run id"
            raise ValueError(msg)
        if max_rounds is not None and max_rounds < 1:
            msg = f"max_rounds must be >= 1, got {max_rounds}"
            raise ValueError(msg)
        if not input:
            msg = "input must not be empty: a model needs something to answer"
            raise ValueError(msg)
        subset = None if tools is None else tuple(tools)
        for name in subset or ():
            if name not in self._tools:
                raise ToolNotFoundError(name, tuple(sorted(self._tools.names())))
        response, output_type = None, None
        if response_format is not None or budget is not None:  # a send's usual: neither
            response, output_type = resolve_format(response_format)
            check_limits(response, budget, self._prices)
        send = _send(
            run_id=id or self._runtime.ids.new("run"),
            input=input,
            max_rounds=max_rounds,
            tools=subset,
            system_prompt=system_prompt,
            response_format=response,
            budget=budget,
            started_at=self._runtime.clock.now(),
            if_busy=if_busy,
            wait=True,
        )
        if response is not None:
            if self._run_types is None:
                self._run_types = {}
            self._run_types[send.run_id] = output_type
        outcome = await self._ask(send)
        if isinstance(outcome, Busy):
            if self._run_types is not None:
                self._run_types.pop(send.run_id, None)
            raise SessionBusyError(self.id, outcome.run_id)
        if not isinstance(outcome, RunResult):  # not known after all: cannot happen
            return await self.wait(send.run_id)
        return self._typed(send.run_id, outcome)

    async def _submit(self, input: str, *, run_id: str, budget: Budget | None) -> RunResult:
        """A send with a run id chosen by the caller (idempotent: a parent's retry after a
        crash finds the run already recorded and waits for it)."""
        await self._start(input, run_id=run_id, budget=budget)
        return await self.wait(run_id)

    async def _start(self, input: str, *, run_id: str, budget: Budget | None) -> None:
        """Record (or queue) the run ``run_id`` unless it is already known; do not wait."""
        send = Send(
            run_id=run_id,
            input=input,
            max_rounds=None,
            tools=None,
            system_prompt=None,
            response_format=None,
            budget=budget,
            started_at=self._runtime.clock.now(),
            if_busy="queue",
        )
        await self._ask(send)

    async def spawn(self, spec: AgentSpec, task: str) -> RunResult:
        """Run a sub-agent of this session on ``task`` and return its result.

        The child is a session actor supervised by this one, with its own stream; the
        parent's stream records it (``ChildSpawned``, ``ChildFinished``) and its usage is
        added to the session's. From Python a child may get any of the session's tools by
        name, and any ``Tool`` object.

        Raises:
            ToolNotFoundError: ``spec.tools`` names a tool this session does not have.
        """
        granted = {t.name for t in spec.own_tools()}
        for name in spec.tool_names():
            if name not in self._tools and name not in granted:
                raise ToolNotFoundError(name, tuple(sorted(self._tools.names())))
        spawn_id = self._runtime.ids.new("spawn")
        child = await self._ask(PythonSpawn(spawn_id, spec, task))
        assert isinstance(child, Session)
        result = await child._submit(task, run_id=f"{child.id}:task", budget=spec.budget)
        finished = ChildFinished(
            run_id="", child_id=child.id, status=result.status, usage=result.usage
        )
        await self._ref.tell(ChildDone(finished))
        return result

    async def wait(self, run_id: str) -> RunResult:
        """Wait until the run ends, or stops to wait for a human, and return its result.

        Its ``output`` is an instance of the class given as ``response_format`` to the
        ``send`` of this run through this handle, else of the session's (the spec's)
        class, if it has one; the JSON as recorded is ``raw_output``.

        Raises:
            LookupError: the session has no run with this id.
            OutputTypeError: the recorded answer does not fit the class.
        """
        result = await self._ask(WaitRun(run_id))
        if result is None:
            msg = f"session {self.id!r} has no run {run_id!r}"
            raise LookupError(msg)
        assert isinstance(result, RunResult)
        return self._typed(run_id, result)

    def _typed(self, run_id: str, result: RunResult) -> RunResult:
        """``result`` with its output structured into the class its send or session named."""
        chosen = self._run_types
        if chosen is None:
            output_type = self._output_type
        elif result.status == "waiting_for_human":
            output_type = chosen.get(run_id, self._output_type)
        else:
            output_type = chosen.pop(run_id, self._output_type)
        return typed_result(result, output_type)

    async def follow_up(self, content: str, *, id: str | None = None, kind: str = "user") -> bool:
        """Give the session more input: it starts a run when idle, else joins the run.

        During a run the follow-up is recorded at once and injected at the next round
        boundary (see :class:`~protocols.FollowUp`). Use :meth:`wait` with the active run's
        id (``(await state()).run``) to wait for the outcome.

        Args:
            content (str): what the model reads.
            id (str | None): deduplication key; a new one if ``None``.
            kind (str): ``user``, ``timer``, ``board``, ``system``...; kinds are never
                merged into one turn.

        Returns:
            bool: ``False`` if the session had already received this id (nothing done).
        """
        follow_up = FollowUp(id=id or self._runtime.ids.new("fu"), content=content, kind=kind)
        stamped = Stamped(
            message=follow_up,
            at=self._runtime.clock.now(),
            delivery=self._runtime.ids.new("dlv"),
        )
        accepted = await self._ask(stamped)
        return bool(accepted)

    async def cancel(
        self, reason: str = "", *, mode: CancelMode = "immediate", by: str = "python"
    ) -> bool:
        """Cancel the active run; its result has status ``cancelled``.

        ``immediate`` stops now: the LLM stream closes (text streamed so far is kept as an
        interrupted answer), running tools are cancelled and their calls closed with an
        interrupted result. ``after_turn`` lets the current round finish. Either way the
        session stays usable: the next send needs no repair.

        Returns:
            bool: ``False`` when no run was active.
        """
        return bool(await self._ask(Urgent(Cancel(reason=reason, mode=mode, by=by))))

    async def reply(self, request_id: str, answer: str, *, by: str = "human") -> RunResult:
        """Answer a question the run asked (``ask_human``) and wait for the run's next result.

        Raises:
            HumanRequestNotFoundError: the session is not waiting for ``request_id``.
            ValueError: the request asks for an approval (use :meth:`approve`/:meth:`deny`).
        """
        return await self._reply(HumanReply(request_id=request_id, answer=answer, by=by))

    async def approve(self, request_id: str, *, by: str = "human") -> RunResult:
        """Allow a tool call waiting for approval; it runs and the run goes on."""
        return await self._reply(HumanReply(request_id=request_id, approve=True, by=by))

    async def deny(self, request_id: str, reason: str = "", *, by: str = "human") -> RunResult:
        """Refuse a tool call waiting for approval; the model reads ``reason``."""
        return await self._reply(
            HumanReply(request_id=request_id, answer=reason, approve=False, by=by)
        )

    async def _reply(self, reply: HumanReply) -> RunResult:
        outcome = await self._ask(Urgent(reply))
        if isinstance(outcome, NoRequest):
            raise HumanRequestNotFoundError(self.id, outcome.request_id, outcome.open)
        if isinstance(outcome, BadReply):
            raise ValueError(outcome.problem)  # noqa: TRY004  # a wrong kind of answer
        assert isinstance(outcome, str)
        return await self.wait(outcome)

    async def _ask(self, message: object) -> object:
        """Ask the actor, again after a crash: every message here is idempotent."""
        while True:
            try:
                return await self._ref.ask(message)
            except ActorCrashedError:
                continue  # restarted from the log

    async def state(self) -> SessionState:
        """The session's folded state (transcript, active run, results, usage)."""
        return await self._ref.ask(GetState())

    @contextmanager
    def observe(self, buffer: int = 256) -> Iterator[trio.MemoryReceiveChannel[Observation]]:
        """Receive the session's observations while the ``with`` block lasts.

        While anyone observes, the session streams the model's answers and each piece
        arrives as a :class:`DeltaReceived`. A slow reader never slows the session: when
        the buffer is full further observations are dropped for it.

        Args:
            buffer (int): observations held for a reader that falls behind.

        Yields:
            trio.MemoryReceiveChannel[Observation]: the observations, in order.
        """
        with self._bus.channel(buffer) as channel:
            yield channel
