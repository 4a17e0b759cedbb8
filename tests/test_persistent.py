"""The session fold's shared-buffer values behave like tuples and dicts, branches included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actors._persistent import AppendVector, GrowMap
from actors._transcript import ValidTranscript
from protocols import AssistantMessage, ToolCall, ToolResultMessage, UserMessage

# A program: each step picks an earlier version (a branch when it is not the newest) and
# grows it by one item.
_steps = st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 5)), max_size=60)


@given(_steps)
def test_append_vector_versions_are_independent_tuples(steps: list[tuple[int, int]]) -> None:
    vectors: list[AppendVector[int]] = [AppendVector()]
    models: list[tuple[int, ...]] = [()]
    for pick, item in steps:
        base = pick % len(vectors)
        vectors.append(vectors[base].append(item))
        models.append((*models[base], item))
    for vector, model in zip(vectors, models, strict=True):
        assert vector.as_tuple() == model
        assert tuple(vector) == model
        assert len(vector) == len(model)
        assert vector.last == (model[-1] if model else None)
        if model:
            assert vector[-1] == model[-1]
            assert vector[0] == model[0]
        assert vector == AppendVector(model)


@given(st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 8), st.integers(0, 2))))
def test_grow_map_versions_are_independent_dicts(steps: list[tuple[int, int, int]]) -> None:
    maps: list[GrowMap[int, int]] = [GrowMap()]
    models: list[dict[int, int]] = [{}]
    for pick, key, value in steps:
        base = pick % len(maps)
        maps.append(maps[base].set(key, value))
        models.append({**models[base], key: value})
    for mapping, model in zip(maps, models, strict=True):
        assert dict(mapping) == model
        assert list(mapping) == list(model)  # insertion order, as a dict
        assert len(mapping) == len(model)
        for key in range(9):
            assert (key in mapping) == (key in model)
            assert mapping.get(key) == model.get(key)
        assert mapping == model


def test_a_transcript_branch_does_not_change_the_lineage_it_left() -> None:
    call = ToolCall(id="c1", name="t", arguments="{}")
    asked = ValidTranscript().append(UserMessage("hi")).append(AssistantMessage(tool_calls=(call,)))
    closed = asked.closed()  # a branch: the interrupted result is only in this version
    answered = asked.append(ToolResultMessage(tool_call_id="c1", content="ok"))
    assert closed.messages[-1].content != "ok"
    assert answered.messages[-1] == ToolResultMessage(tool_call_id="c1", content="ok")
    assert len(asked) == 2 and asked.last == AssistantMessage(tool_calls=(call,))
    rebuilt = ValidTranscript(answered.messages, answered.pending, answered.digest)
    assert rebuilt == answered and rebuilt != closed
