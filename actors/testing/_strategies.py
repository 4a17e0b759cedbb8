"""Hypothesis strategies: JSON values, tool calls, provider errors, conversations, operations.

Hypothesis is a test dependency, not a runtime one: it is imported when a strategy is
built, so ``actors.testing`` stays importable without it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import orjson

import actors
from protocols import JsonValue, LLMResponse, ToolCall, ToolDefinition, ToolSpec, Usage
from protocols.errors import (
    LLMConnectionError,
    LLMError,
    LLMRateLimitedError,
    LLMServerError,
    LLMTimeoutError,
)
from protocols.jsonschema import compile_schema
from runtime.testing import ScriptItem

from ._operations import (
    AdvanceClock,
    CancelRun,
    ClearTimer,
    CrashSession,
    FailNextCommit,
    Operation,
    RestartRuntime,
    Send,
    SendFollowUp,
    SetTimer,
    WriteBoard,
)

if TYPE_CHECKING:
    from hypothesis import settings as Settings  # a class, used as a type
    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "UNKNOWN_TOOL",
    "conversations",
    "json_values",
    "llm_errors",
    "operations",
    "property_settings",
    "tool_calls",
    "usages",
]

UNKNOWN_TOOL = "no_such_tool"
"""The tool name :func:`tool_calls` uses for a call to a tool the agent does not have."""

_TEXT = "abcdefghij xyz"
_MAX_INT = 1000
_WRONG_VALUES: tuple[JsonValue, ...] = (1.5, 7, "text", True, None, [1], {"k": 1})


def _st() -> object:
    try:
        from hypothesis import strategies  # noqa: PLC0415  # a test dependency, imported late
    except ImportError as exc:
        msg = "the test kit's strategies need Hypothesis: pip install 'powertrio[test]'"
        raise ImportError(msg) from exc
    return strategies


if TYPE_CHECKING:
    from hypothesis import strategies as st
else:

    class _LazyStrategies:
        def __getattr__(self, name: str) -> object:
            return getattr(_st(), name)

    st = _LazyStrategies()


def property_settings(examples: int = 500, **overrides: object) -> Settings:
    """Hypothesis settings for a property test of an agent with this kit.

    At least ``examples`` examples, or more when the loaded settings profile asks for
    more (so a "deep" profile, e.g. ``max_examples=10_000`` registered in ``conftest.py``
    and loaded with ``pytest --hypothesis-profile=deep``, lengthens every such property
    at once). No deadline:
    the harness runs whole conversations, and time spent is never a failure. The
    ``function_scoped_fixture`` health check is off because the kit's fixtures are
    stateless across examples: each run builds its own runtime, store and model.

    Example::

        @property_settings(examples=500)
        @given(conversation=conversations(tools=[add]))
        def test_replay(runtime_harness, conversation): ...

    Args:
        examples (int): the fewest examples to run.
        **overrides: any other ``hypothesis.settings`` argument.

    Returns:
        hypothesis.settings: usable as a decorator.
    """
    _st()  # a clear error without Hypothesis
    from hypothesis import HealthCheck, settings  # noqa: PLC0415

    current = settings()
    options: dict[str, object] = {
        "max_examples": max(examples, current.max_examples),
        "deadline": None,
        "suppress_health_check": [
            *current.suppress_health_check,
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
        ],
    }
    options.update(overrides)
    return settings(current, **options)  # type: ignore[arg-type]  # checked by Hypothesis


# --- values ------------------------------------------------------------------------


def json_values(schema: Mapping[str, object] | bool) -> SearchStrategy[JsonValue]:
    """Values that satisfy a JSON Schema: the subset ``@tool`` produces, and a bit more.

    Supported: ``type`` (one or a list), ``const``, ``enum``, ``anyOf``/``oneOf``,
    numeric and length bounds, ``pattern``, ``items``/``prefixItems``, ``properties``
    with ``required`` and ``additionalProperties``. Every value is checked against the
    schema with the project's validator, so an unsupported keyword costs examples,
    never a wrong value.

    Args:
        schema (Mapping | bool): the schema.

    Returns:
        SearchStrategy[JsonValue]: plain JSON values (``dict``, ``list``, ``str``...).
    """
    validator = compile_schema(schema)
    return _values(schema, 3).filter(validator.is_valid)


def _any_json() -> SearchStrategy[JsonValue]:
    leaves: SearchStrategy[JsonValue] = st.one_of(
        st.none(), st.booleans(), st.integers(-_MAX_INT, _MAX_INT), st.text(_TEXT, max_size=8)
    )
    return leaves


def _values(schema: object, depth: int) -> SearchStrategy[JsonValue]:
    if schema is True or schema == {}:
        return _any_json()
    if not isinstance(schema, Mapping):
        return st.nothing()
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        alternatives = schema.get(key)
        if isinstance(alternatives, list) and alternatives:
            rest = {k: v for k, v in schema.items() if k != key}
            return st.one_of([_values({**rest, **alt}, depth) for alt in alternatives])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_values({**schema, "type": k}, depth) for k in kind])
    if kind is None:
        if "properties" in schema or "additionalProperties" in schema:
            kind = "object"
        elif "items" in schema or "prefixItems" in schema:
            kind = "array"
        else:
            return _any_json()
    maker = _MAKERS.get(str(kind))
    return st.nothing() if maker is None else maker(schema, depth)


def _bound(schema: Mapping[str, object], key: str, default: float) -> float:
    value = schema.get(key)
    return float(value) if isinstance(value, int | float) else default


def _integers(schema: Mapping[str, object], _depth: int) -> SearchStrategy[JsonValue]:
    low = _bound(schema, "minimum", -_MAX_INT)
    high = _bound(schema, "maximum", _MAX_INT)
    low = max(low, _bound(schema, "exclusiveMinimum", low - 1) + 1)
    high = min(high, _bound(schema, "exclusiveMaximum", high + 1) - 1)
    return st.integers(math.ceil(low), math.floor(high))


def _numbers(schema: Mapping[str, object], _depth: int) -> SearchStrategy[JsonValue]:
    low = _bound(schema, "minimum", -_MAX_INT)
    high = _bound(schema, "maximum", _MAX_INT)
    return st.floats(
        max(low, _bound(schema, "exclusiveMinimum", low)),
        min(high, _bound(schema, "exclusiveMaximum", high)),
        allow_nan=False,
        allow_infinity=False,
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
    )


def _strings(schema: Mapping[str, object], _depth: int) -> SearchStrategy[JsonValue]:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        return st.from_regex(pattern)
    low = int(_bound(schema, "minLength", 0))
    high = int(_bound(schema, "maxLength", max(low, 12)))
    return st.text(_TEXT, min_size=low, max_size=high)


def _arrays(schema: Mapping[str, object], depth: int) -> SearchStrategy[JsonValue]:
    low = int(_bound(schema, "minItems", 0))
    high = int(_bound(schema, "maxItems", low + 3))
    items = schema.get("items", True)
    prefix = schema.get("prefixItems")
    if depth <= 0:
        items = items if items is False else {"type": "null"}
    if isinstance(prefix, list):
        head = st.tuples(*(_values(s, depth - 1) for s in prefix)).map(list)
        if items is False or high <= len(prefix):
            return head
        tail = st.lists(_values(items, depth - 1), max_size=max(0, high - len(prefix)))
        return st.tuples(head, tail).map(lambda parts: [*parts[0], *parts[1]])
    return st.lists(_values(items, depth - 1), min_size=low, max_size=max(low, high))


def _objects(schema: Mapping[str, object], depth: int) -> SearchStrategy[JsonValue]:
    properties = schema.get("properties")
    props: Mapping[str, object] = properties if isinstance(properties, Mapping) else {}
    required_list = schema.get("required")
    required = set(required_list) if isinstance(required_list, list) else set()
    extra = schema.get("additionalProperties", True)
    if not props:
        values = _values(extra, depth - 1) if depth > 0 else st.none()
        if extra is False:
            return st.just({})
        return st.dictionaries(st.text("abcdef", min_size=1, max_size=4), values, max_size=3)

    @st.composite
    def build(draw: DrawFn) -> JsonValue:
        value: dict[str, JsonValue] = {}
        for name, sub in props.items():
            if name in required or draw(st.booleans()):
                value[name] = draw(_values(sub, depth - 1))
        return value

    return build()


_Maker = Callable[[Mapping[str, object], int], "SearchStrategy[JsonValue]"]
_MAKERS: dict[str, _Maker] = {
    "integer": _integers,
    "number": _numbers,
    "string": _strings,
    "boolean": lambda _s, _d: st.booleans(),
    "null": lambda _s, _d: st.none(),
    "array": _arrays,
    "object": _objects,
}


# --- tool calls ----------------------------------------------------------------------


def _specs(tools: Iterable[object] | object) -> list[ToolSpec | ToolDefinition]:
    """Tool specs from an ``AgentSpec``, ``Tool`` objects, a ``ToolRegistry``, specs or
    definitions."""
    own_tools = getattr(tools, "own_tools", None)
    if callable(own_tools):  # an AgentSpec: its tools, and spawn_agent if it has agents
        items = list(own_tools())
        agents = getattr(tools, "agents", ())
        if agents:
            items.append(actors.spawn_agent_tool(agents))
        tools = items
    if not isinstance(tools, Iterable):
        msg = f"tools must be an AgentSpec or an iterable of tools, got {tools!r}"
        raise TypeError(msg)
    found: list[ToolSpec | ToolDefinition] = []
    for item in tools:
        spec = getattr(item, "spec", item)
        if not isinstance(spec, ToolSpec | ToolDefinition):
            msg = (
                f"tools holds {item!r}: give Tool objects (@tool), a ToolRegistry, "
                "ToolSpec or ToolDefinition values"
            )
            raise TypeError(msg)
        found.append(spec)
    return found


def _dump(value: JsonValue) -> str:
    return orjson.dumps(value).decode()


def _invalid_arguments(
    spec: ToolSpec | ToolDefinition,
) -> SearchStrategy[str]:
    """Arguments the tool must refuse: not JSON, not an object, a wrong type, a missing
    required property, an unexpected property."""
    schema = spec.parameters
    validator = compile_schema(schema)
    props = schema.get("properties")
    properties: Mapping[str, object] = props if isinstance(props, Mapping) else {}
    required_list = schema.get("required")
    required = (
        [r for r in required_list if isinstance(r, str)] if isinstance(required_list, list) else []
    )
    valid = json_values(schema)

    def broken(kind_and_value: tuple[str, JsonValue, JsonValue, str]) -> str:
        kind, value, wrong, name = kind_and_value
        obj = dict(value) if isinstance(value, dict) else {}
        if kind == "truncated":
            return _dump(value)[:-1] or "{"
        if kind == "not_an_object":
            return _dump(wrong if not isinstance(wrong, dict) else [wrong])
        if kind == "wrong_type":
            obj[name] = wrong
        elif kind == "missing":
            obj.pop(name, None)
        else:
            obj[name + "_unexpected"] = wrong
        return _dump(obj)

    kinds = ["truncated", "not_an_object"]
    if properties:
        kinds.append("wrong_type")
    if required:
        kinds.append("missing")
    if schema.get("additionalProperties") is False:
        kinds.append("unexpected")
    names = sorted(required if required else properties) or ["x"]
    candidates = st.tuples(
        st.sampled_from(kinds),
        valid,
        st.sampled_from(_WRONG_VALUES),
        st.sampled_from(names),
    ).map(broken)

    def refused(arguments: str) -> bool:
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return True
        return not validator.is_valid(value)

    return candidates.filter(refused)


def _named_arguments(
    specs: Sequence[ToolSpec | ToolDefinition], valid: bool | None, *, unknown: bool = True
) -> SearchStrategy[tuple[str, str]]:
    """``(tool name, arguments)`` pairs: built once, drawn for every call."""
    good = [json_values(spec.parameters).map(functools.partial(_pair, spec.name)) for spec in specs]
    bad = [_invalid_arguments(spec).map(functools.partial(_raw_pair, spec.name)) for spec in specs]
    missing = [st.just((UNKNOWN_TOOL, "{}"))] if unknown else []
    if valid is True:
        return st.one_of(good)
    if valid is False:
        return st.one_of([*bad, *missing])
    return st.one_of([*good, *bad, *missing])


def _pair(name: str, value: JsonValue) -> tuple[str, str]:
    return name, _dump(value)


def _raw_pair(name: str, arguments: str) -> tuple[str, str]:
    return name, arguments


def tool_calls(
    tools: Iterable[object] | object,
    *,
    call_id: str = "call_1",
    valid: bool | None = None,
    unknown: bool = True,
) -> SearchStrategy[ToolCall]:
    """Tool calls a model could make to ``tools``: with valid or invalid arguments.

    A valid call names one of the tools with arguments its schema accepts. An invalid
    one has arguments the tool must refuse (truncated JSON, not an object, a property
    of the wrong type, a required one missing, an unexpected one) or names a tool that
    does not exist (:data:`UNKNOWN_TOOL`). The agent must report each to the model as
    an error result, never crash.

    Example::

        @given(call=tool_calls([add, lookup], valid=False))
        def test_bad_calls_are_reported(call): ...

    Args:
        tools: an ``AgentSpec`` (its tools), ``Tool`` objects (``@tool``), a
            ``ToolRegistry``, or ``ToolSpec`` / ``ToolDefinition`` values.
        call_id (str): the call's id (a conversation gives each call its own).
        valid (bool | None): only valid calls (``True``), only invalid ones
            (``False``), or both (``None``).
        unknown (bool): among the invalid calls, include calls to a tool that does
            not exist.

    Returns:
        SearchStrategy[ToolCall]: the calls, arguments as the raw JSON text.

    Raises:
        TypeError: ``tools`` holds something that is not a tool.
        ValueError: no call is possible (``valid=True``, or ``unknown=False``, with no
            tools).
    """
    specs = _specs(tools)
    if not specs and (valid is True or not unknown):
        msg = "valid tool calls need at least one tool"
        raise ValueError(msg)
    return _named_arguments(specs, valid, unknown=unknown).map(
        lambda pair: ToolCall(id=call_id, name=pair[0], arguments=pair[1])
    )


# --- model answers -------------------------------------------------------------------


def usages(*, max_tokens: int = 200) -> SearchStrategy[Usage]:
    """Token counts of one model call (prompt and completion, sometimes cached tokens).

    Args:
        max_tokens (int): the most prompt tokens (completion: a quarter of it).
    """
    return st.integers(0, max_tokens).flatmap(
        lambda prompt: st.builds(
            Usage,
            prompt_tokens=st.just(prompt),
            completion_tokens=st.integers(0, max(1, max_tokens // 4)),
            cached_tokens=st.one_of(st.just(0), st.integers(0, prompt)),
        )
    )


_ERRORS: tuple[Callable[[], LLMError], ...] = (
    lambda: LLMServerError("upstream 503", status=503, provider="scripted"),
    lambda: LLMRateLimitedError("slow down", status=429, provider="scripted", retry_after=1.0),
    lambda: LLMTimeoutError("read timed out", phase="read", provider="scripted"),
    lambda: LLMConnectionError("connection refused", provider="scripted"),
)


def llm_errors() -> SearchStrategy[LLMError]:
    """Provider failures a transport raises after its retries: 5xx, 429, timeout, no route.

    Each draw is a new exception object (``LLMServerError``, ``LLMRateLimitedError``,
    ``LLMTimeoutError`` or ``LLMConnectionError``). In a session the run fails with the
    error's code and the session goes on.
    """
    return st.sampled_from(_ERRORS).map(lambda make: make())


def conversations(
    tools: Iterable[object] | object = (),
    *,
    max_rounds: int = 3,
    max_calls: int = 2,
    errors: bool = True,
    invalid_calls: bool = True,
    unknown_tools: bool = True,
    max_tokens: int = 200,
) -> SearchStrategy[tuple[ScriptItem, ...]]:
    """Scripts of a model's side of a conversation that always end in a final answer.

    Up to ``max_rounds - 1`` rounds of tool calls (each with a short text, 1 to
    ``max_calls`` calls and a usage), a provider error now and then, and a final text
    answer: at most ``max_rounds`` answers plus the errors. Call ids are unique over the
    script. Feed it to :class:`DeterministicLLM` (the harness does) or ``ScriptedLLM``.

    Example::

        @given(conversations([add], max_rounds=4))
        def test_agent(conversation): ...

    Args:
        tools: the agent (an ``AgentSpec``), or its tools (as for :func:`tool_calls`).
        max_rounds (int): the most answers (tool rounds plus the final one), >= 1.
        max_calls (int): the most tool calls in one answer, >= 1.
        errors (bool): include provider errors (:func:`llm_errors`).
        invalid_calls (bool): include invalid calls as well as valid ones.
        unknown_tools (bool): among the invalid calls, include calls to a tool that does
            not exist. A session closes such a call as aborted after a crash (it has no
            crash policy), so leave them out to check crash equivalence.
        max_tokens (int): bound of each answer's usage (:func:`usages`).

    Returns:
        SearchStrategy[tuple[ScriptItem, ...]]: responses and exceptions, in order.

    Raises:
        ValueError: ``max_rounds`` or ``max_calls`` is below 1.
    """
    if max_rounds < 1 or max_calls < 1:
        msg = f"max_rounds and max_calls must be >= 1, got {max_rounds} and {max_calls}"
        raise ValueError(msg)
    specs = _specs(tools)
    if not specs and not (invalid_calls and unknown_tools):
        max_rounds = 1  # no call could be made: only the final answer
    text = st.text(_TEXT, max_size=12)
    pairs = (
        _named_arguments(specs, None if invalid_calls else True, unknown=unknown_tools)
        if max_rounds > 1
        else st.nothing()
    )
    errors_or_not = llm_errors()
    usage_of = usages(max_tokens=max_tokens)

    @st.composite
    def build(draw: DrawFn) -> tuple[ScriptItem, ...]:
        items: list[ScriptItem] = []
        rounds = draw(st.integers(0, max_rounds - 1))
        for round_index in range(rounds + 1):
            if errors and draw(st.integers(0, 4)) == 0:
                items.append(draw(errors_or_not))
            usage = draw(usage_of)
            if round_index == rounds:
                items.append(LLMResponse(content=draw(text), usage=usage))
                break
            count = draw(st.integers(1, max_calls))
            calls = []
            for i in range(count):
                name, arguments = draw(pairs)
                calls.append(ToolCall(id=f"call_{round_index}_{i}", name=name, arguments=arguments))
            items.append(
                LLMResponse(
                    content=draw(text), tool_calls=calls, finish_reason="tool_calls", usage=usage
                )
            )
        return tuple(items)

    return build()


# --- operations ----------------------------------------------------------------------


def operations(
    *,
    min_size: int = 1,
    max_size: int = 8,
    follow_up_ids: Sequence[str] = ("f1", "f2", "f3"),
    board_keys: Sequence[str] = ("plan", "status"),
    timers: bool = True,
    board: bool = True,
    cancels: bool = True,
    faults: bool = True,
    restarts: bool = True,
) -> SearchStrategy[tuple[Operation, ...]]:
    """Sequences of operations on a running agent, for :meth:`RuntimeHarness.run`.

    Sends (waited for or in the background, with each busy policy), follow-ups with ids
    from a small pool (so repeats happen) and of two kinds, cancels in both modes,
    timers set and cleared, board writes, crash-restarts of the session, failed
    commits, restarts of the whole runtime on the same log, and virtual time passing.
    They shrink towards fewer and simpler operations.

    Example::

        @property_settings()
        @given(ops=operations(board=False, restarts=False))
        def test_my_agent(runtime_harness, ops):
            assert_invariants(runtime_harness.run((), ops))

    Args:
        min_size (int): the fewest operations.
        max_size (int): the most operations.
        follow_up_ids (Sequence[str]): the pool of follow-up ids.
        board_keys (Sequence[str]): the pool of board keys.
        timers, board, cancels, faults, restarts (bool): include those kinds of
            operations (``faults``: :class:`CrashSession` and :class:`FailNextCommit`;
            ``restarts``: :class:`RestartRuntime`).

    Returns:
        SearchStrategy[tuple[Operation, ...]]: the sequences.
    """
    text = st.text(_TEXT, min_size=1, max_size=10)
    busy = st.sampled_from([None, "queue", "interrupt", "reject"])
    kinds: list[SearchStrategy[Operation]] = [
        st.builds(Send, text, wait=st.booleans(), if_busy=busy),
        st.builds(
            SendFollowUp,
            text,
            st.sampled_from(list(follow_up_ids)),
            kind=st.sampled_from(["user", "system"]),
        ),
        st.builds(AdvanceClock, st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0, 60.0, 3600.0])),
    ]
    if cancels:
        kinds.append(st.builds(CancelRun, st.sampled_from(["immediate", "after_turn"])))
    if timers:
        kinds.append(
            st.builds(
                SetTimer,
                st.sampled_from([0.0, 1.0, 30.0, 600.0]),
                every=st.one_of(st.none(), st.sampled_from([60.0, 300.0])),
            )
        )
        kinds.append(st.builds(ClearTimer, st.integers(0, 3)))
    if board and board_keys:
        kinds.append(
            st.builds(
                WriteBoard,
                st.sampled_from(list(board_keys)),
                st.one_of(st.integers(0, 9), st.text(_TEXT, max_size=6)),
            )
        )
    if faults:
        kinds.append(st.just(CrashSession()))
        kinds.append(st.just(FailNextCommit()))
    if restarts:
        kinds.append(st.just(RestartRuntime()))
    return st.lists(st.one_of(kinds), min_size=min_size, max_size=max_size).map(tuple)
