"""The fold's fast ``attrs.evolve``: the same instance as ``evolve``, or a refusal."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._session._events import (
    ActiveRun,
    AssistantRecorded,
    RunFinished,
    RunResult,
    RunStarted,
    SessionState,
    ToolFinished,
    ToolStarted,
)
from actors._session._persistent import GrowMap
from actors._session._replace import maker, replacer
from actors._session._steps import CallLLM, LLMAnswered, ToolsDone
from protocols import (
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    ToolCall,
    ToolOutcome,
    Usage,
    UserMessage,
)

_STARTED = RunStarted(run_id="r1", input="hi", max_rounds=3)
_state_changes = st.fixed_dictionaries(
    {},
    optional={
        "session_id": st.text(max_size=4),
        "max_rounds": st.integers(0, 9),
        "parent_id": st.none() | st.text(max_size=4),
        "run": st.none() | st.just(ActiveRun(started=_STARTED)),
        "queued": st.lists(st.just(_STARTED), max_size=2).map(tuple),
        # A plain dict: the field's converter makes it a GrowMap, as __init__ does.
        "seen_follow_ups": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        "usage": st.builds(Usage, prompt_tokens=st.integers(0, 99)),
        "prompt_report": st.none() | st.tuples(st.integers(), st.integers(), st.integers()),
    },
)
_run_changes = st.fixed_dictionaries(
    {},
    optional={
        "rounds": st.integers(0, 9),
        "text": st.text(max_size=4),
        "pending_calls": st.lists(
            st.builds(ToolCall, id=st.text(max_size=3), name=st.just("t"), arguments=st.just("{}")),
            max_size=2,
        ).map(tuple),
        "usage_by_model": st.dictionaries(st.text(max_size=3), st.builds(Usage), max_size=2),
        "repaired": st.booleans(),
    },
)


@given(changes=_state_changes)
def test_a_state_replaced_equals_its_evolve(changes: dict[str, Any]) -> None:
    """Every field copied or replaced, converters applied: what ``attrs.evolve`` makes."""
    state = SessionState(session_id="s", max_rounds=4, run=ActiveRun(started=_STARTED))
    made = replacer(SessionState)(state, **changes)
    expected = attrs.evolve(state, **changes)
    assert made == expected
    assert type(made.seen_follow_ups) is GrowMap
    for field in attrs.fields(SessionState):
        if field.name not in changes:
            assert getattr(made, field.name) is getattr(state, field.name)


@given(changes=_run_changes)
def test_a_run_replaced_equals_its_evolve(changes: dict[str, Any]) -> None:
    run = ActiveRun(started=_STARTED, round_limit=3)
    assert replacer(ActiveRun)(run, **changes) == attrs.evolve(run, **changes)


def test_the_copy_is_frozen_and_the_original_unchanged() -> None:
    state = SessionState(session_id="s")
    made = replacer(SessionState)(state, session_id="t")
    assert (state.session_id, made.session_id) == ("s", "t")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.session_id = "u"  # type: ignore[misc]


def test_an_unknown_field_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'sesion_id'"):
        replacer(SessionState)(SessionState(), sesion_id="x")


@attrs.frozen
class _Checked:
    value: int = attrs.field(validator=attrs.validators.ge(0))


@attrs.frozen
class _PostInit:
    value: int

    def __attrs_post_init__(self) -> None:
        pass


@attrs.frozen(cache_hash=True)
class _CachedHash:
    value: int


@attrs.define
class _Mutable:
    value: int


@attrs.frozen(slots=False)
class _Dict:
    value: int


@attrs.frozen
class _NotInit:
    value: int = attrs.field(init=False, default=0)


@pytest.mark.parametrize("cls", [_Checked, _PostInit, _CachedHash, _Mutable, _NotInit])
def test_a_class_whose_evolve_does_more_is_refused(cls: type[object]) -> None:
    """A validator, a post-init hook, a cached hash, a mutable class or a field ``__init__``
    does not set: skipping ``__init__`` would change what the copy is."""
    with pytest.raises(TypeError, match=f"{cls.__qualname__}: evolve does more than copy"):
        replacer(cls)


@pytest.mark.parametrize("cls", [_Dict, int])
def test_a_class_without_slots_is_refused(cls: type[object]) -> None:
    with pytest.raises(TypeError, match=f"{cls.__qualname__} is not a slotted attrs class"):
        replacer(cls)


_CALL = ToolCall(id="c1", name="t", arguments="{}")
_OUTCOME = ToolOutcome(call_id="c1", tool_name="t", status="ok", content="5")
_MADE: list[tuple[type[Any], tuple[object, ...], dict[str, Any]]] = [
    (AssistantMessage, (), {"content": "hi", "tool_calls": [_CALL]}),  # a converter
    (AssistantMessage, (), {}),
    (
        AssistantRecorded,
        (),
        {
            "run_id": "r1",
            "round": 1,
            "message": AssistantMessage(content="x"),
            "usage": Usage(prompt_tokens=3),
            "model": "m",
            "finish_reason": "stop",
            "request_fingerprint": "sha256:0",
        },
    ),
    (RunStarted, (), {"run_id": "r1", "input": "hi", "max_rounds": 3, "tools": ("t",)}),
    (
        ToolStarted,
        (),
        {
            "run_id": "r1",
            "call_id": "c1",
            "name": "t",
            "arguments": "{}",
            "idempotency_key": "k",
            "crash_policy": "retry",
        },
    ),
    (ToolFinished, (), {"run_id": "r1", "outcome": _OUTCOME}),
    (
        RunFinished,
        (),
        {"run_id": "r1", "status": "completed", "text": "5", "rounds": 2, "usage": Usage()},
    ),
    (
        RunResult,
        (),
        {
            "session_id": "s",
            "run_id": "r1",
            "status": "failed",
            "text": "",
            "rounds": 1,
            "usage": Usage(),
            "error": "e",
        },
    ),
    (ActiveRun, (), {"started": _STARTED}),  # factories
    (CallLLM, ("r1", 1, LLMRequest(messages=[UserMessage("hi")]), "sha256:0", None, 9.5), {}),
    (LLMAnswered, ("r1", LLMResponse(content="5"), "sha256:0"), {"first_token_s": 0.5}),
    (ToolsDone, ("r1", (_OUTCOME,)), {}),
    (ToolCall, (), {"id": "c1", "name": "t", "arguments": "{}"}),
]


@pytest.mark.parametrize(("cls", "args", "kwargs"), _MADE)
def test_a_made_value_is_the_one_init_makes(
    cls: type[Any], args: tuple[object, ...], kwargs: dict[str, Any]
) -> None:
    """The same arguments (positional where ``__init__`` takes them so), the same
    defaults, converters applied: an equal instance of the class, frozen as any."""
    made = maker(cls)(*args, **kwargs)
    assert cls(*args, **kwargs) == made
    assert type(made) is cls
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.__setattr__(attrs.fields(cls)[0].name, None)


def test_a_factory_default_is_made_afresh_for_each_value() -> None:
    make = maker(ActiveRun)
    first, second = make(started=_STARTED), make(started=_STARTED)
    assert first.usage_by_model == {}
    assert first.usage_by_model is not second.usage_by_model


def test_a_made_value_takes_no_unknown_field() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'run'"):
        maker(ToolFinished)(run="r1", outcome=_OUTCOME)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'outcome'"):
        maker(ToolFinished)(run_id="r1")


@pytest.mark.parametrize("cls", [_Checked, _PostInit, _CachedHash, _Mutable, _NotInit])
def test_a_class_whose_init_does_more_is_refused(cls: type[object]) -> None:
    with pytest.raises(TypeError, match=f"{cls.__qualname__}: __init__ does more than set"):
        maker(cls)


@attrs.frozen
class _Aliased:
    _secret: str
    _items: tuple[int, ...] = attrs.field(factory=tuple, converter=tuple)


def test_a_private_field_is_made_from_its_alias() -> None:
    """A private field's parameter is its ``__init__``'s: the name without the ``_``."""
    assert maker(_Aliased)("x", [1, 2]) == _Aliased("x", [1, 2])
    assert maker(_Aliased)(secret="x") == _Aliased(secret="x")
