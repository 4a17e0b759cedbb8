"""How the session begins the tool calls of a model's answer: pure, like its decider.

Each call the model asked for is recorded as started, or becomes a request to a human (a
question, an approval), or starts a sub-agent, or is refused with a tool error when the
agent tree's limits forbid it.
"""

from __future__ import annotations

import orjson

from protocols import CrashPolicy, ToolCall, ToolOutcome
from protocols.errors import ToolError, ToolNotFoundError
from protocols.lowlevel import idempotency_key

from ._agents import SPAWN_AGENT, child_tools
from ._budget import Budget, cost_of
from ._events import (
    ActiveRun,
    ChildSpawned,
    HumanRequested,
    SessionState,
    ToolFinished,
    ToolStarted,
)
from ._replace import maker
from ._steps import SessionConfig, ask_human, run_tools

_tool_started = maker(ToolStarted)


def begin_calls(config: SessionConfig, state: SessionState, run: ActiveRun) -> list[object]:
    """The events that begin ``run``'s pending calls, in order."""
    events: list[object] = []
    children = len(state.children)
    for call in run.pending_calls:
        begun = _begin_call(config, state, run, call, children)
        for event in begun:
            if type(event) is ChildSpawned:  # a final class
                children += 1
        events.extend(begun)
    return events


def _begin_call(
    config: SessionConfig, state: SessionState, run: ActiveRun, call: ToolCall, child_number: int
) -> list[object]:
    """Record a call as started, or as a request to a human it must wait for."""
    tools = run_tools(config, run)
    target = tools.get(call.name) if call.name in tools else None
    run_id = run.started.run_id
    if call.name == SPAWN_AGENT and target is not None and config.agents:
        return _begin_spawn(config, state, run, call, child_number)
    if target is ask_human:
        question = _question(call)
        if question is not None:
            return [
                HumanRequested(
                    run_id=run_id,
                    request_id=call.id,
                    kind="question",
                    prompt=question,
                    call=call,
                )
            ]  # bad arguments fall through: the runner tells the model what is wrong
    elif target is not None and target.spec.needs_approval and call.id not in run.approved:
        return [
            HumanRequested(
                run_id=run_id,
                request_id=call.id,
                kind="approval",
                prompt=f"Allow the tool {call.name} to run with {call.arguments}?",
                call=call,
            )
        ]
    # The run's tool is the session's (a subset holds the same tools): its policy is known.
    policy = target.spec.crash_policy if target is not None else None
    return [_started(config, state, run, call, policy)]


def _begin_spawn(
    config: SessionConfig, state: SessionState, run: ActiveRun, call: ToolCall, child_number: int
) -> list[object]:
    """Record a ``spawn_agent`` call and its child, or refuse it with a tool error."""
    started = _started(config, state, run, call)

    def refuse(problem: str) -> list[object]:
        error = ToolError(problem)
        outcome = ToolOutcome(
            call_id=call.id,
            tool_name=call.name,
            status="error",
            content=problem,
            error_code=error.code,
        )
        return [started, ToolFinished(run_id=run.started.run_id, outcome=outcome)]

    try:
        arguments = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return refuse(f"invalid arguments for tool 'spawn_agent': not valid JSON ({exc})")
    problems = run_tools(config, run).get(SPAWN_AGENT).validator.problems(arguments)
    if problems:
        return refuse("invalid arguments for tool 'spawn_agent': " + "; ".join(problems))
    spec = config.agents[arguments["agent"]]
    if state.depth + 1 > config.max_depth:
        return refuse(
            f"cannot spawn {spec.name!r}: agent trees are limited to depth "
            f"{config.max_depth} and this agent is at depth {state.depth}; do the task "
            "yourself"
        )
    spawned_by_run = len(run.children) + child_number - len(state.children)
    if spawned_by_run >= config.max_children:
        return refuse(
            f"cannot spawn {spec.name!r}: a run may start at most {config.max_children} "
            "sub-agents; use the answers you have"
        )
    _, missing = child_tools(spec, run_tools(config, run))
    if missing:
        return refuse(
            f"cannot spawn {spec.name!r}: it needs tools this agent does not have: "
            + ", ".join(missing)
        )
    spawned = ChildSpawned(
        run_id=run.started.run_id,
        call_id=call.id,
        child_id=f"{state.session_id}.{child_number + 1}",
        agent=spec.name,
        task=arguments["task"],
        lifecycle=spec.lifecycle,
        budget=_child_budget(config, spec.budget, run),
    )
    return [started, spawned]


def _child_budget(config: SessionConfig, own: Budget | None, run: ActiveRun) -> Budget | None:
    """``own`` capped by what remains of the run's budget (a tree never gets more)."""
    parent = run.started.budget
    if parent is None:
        return own
    tokens = own.max_tokens if own is not None else None
    if parent.max_tokens is not None:
        left = max(1, parent.max_tokens - run.usage.total_tokens)
        tokens = left if tokens is None else min(tokens, left)
    cost = own.max_cost if own is not None else None
    if parent.max_cost is not None:
        left_cost = max(1e-9, parent.max_cost - cost_of(run.usage_by_model, config.prices))
        cost = left_cost if cost is None else min(cost, left_cost)
    seconds = own.max_seconds if own is not None else parent.max_seconds
    return Budget(max_tokens=tokens, max_cost=cost, max_seconds=seconds)


def _started(
    config: SessionConfig,
    state: SessionState,
    run: ActiveRun,
    call: ToolCall,
    policy: CrashPolicy | None = None,
) -> ToolStarted:
    if policy is None:
        try:
            policy = config.tools.get(call.name).spec.crash_policy
        except ToolNotFoundError:
            policy = "abort"
    return _tool_started(
        run_id=run.started.run_id,
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        idempotency_key=idempotency_key(state.session_id, call.id, round_index=run.rounds),
        crash_policy=policy,
    )


def _question(call: ToolCall) -> str | None:
    """The question of a well-formed ``ask_human`` call."""
    try:
        arguments = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    if ask_human.validator.problems(arguments):
        return None
    question = arguments["question"]
    return question if isinstance(question, str) else None
