"""The session fold's shared-buffer values behave like tuples and dicts, branches included."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._session._persistent import AppendVector, GrowMap
from actors._session._transcript import ValidTranscript
from protocols import (
    AssistantMessage,
    LLMRequest,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from protocols.lowlevel import MessageView

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
            assert mapping.get(key, -1) == model.get(key, -1)
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


def _texts(n: int) -> list[UserMessage]:
    return [UserMessage(f"m{i}") for i in range(n)]


@given(
    st.integers(0, 600),
    st.integers(0, 3),
    st.data(),
)
def test_a_transcript_view_is_the_tuple_it_stands_for(
    size: int, lead: int, data: st.DataObject
) -> None:
    """A request's messages as a view of the transcript's buffer: the same sequence as the
    copied tuple (items, slices, equality, hash, repr), and later appends do not show."""
    messages = _texts(size)
    transcript = ValidTranscript(messages)
    start = data.draw(st.integers(0, size))
    leading = tuple(SystemMessage(f"s{i}") for i in range(lead))
    view = transcript.view(start).prefixed(leading)
    model: tuple[Message, ...] = (*leading, *messages[start:])
    transcript.append(UserMessage("later"))  # grows the shared buffer past the view
    assert len(view) == len(model)
    assert tuple(view) == model
    assert view == model and model == view
    assert hash(view) == hash(model)
    assert repr(view) == repr(model)
    i = data.draw(st.integers(-len(model) - 2, len(model) + 2))
    j = data.draw(st.integers(-3, 700))
    assert tuple(view[i:j]) == model[i:j]
    assert view[i:j] == model[i:j]
    assert tuple(view[::2]) == model[::2]
    if model:
        k = data.draw(st.integers(-len(model), len(model) - 1))
        assert view[k] == model[k]
    assert view != (*model, UserMessage("x"))
    assert LLMRequest(messages=view) == LLMRequest(messages=model)
    # The fingerprint hashes the view's messages as it would the tuple's.
    assert LLMRequest(messages=view).fingerprint() == LLMRequest(messages=model).fingerprint()


def test_a_view_outside_its_list_or_index_is_refused() -> None:
    with pytest.raises(ValueError, match=r"window \[2, 1\) is outside a list of 3"):
        MessageView(_texts(3), 2, 1)
    with pytest.raises(IndexError, match="MessageView index out of range"):
        MessageView(_texts(3))[3]
    with pytest.raises(IndexError, match="start 4 is outside a vector of 3"):
        ValidTranscript(_texts(3)).view(4)


def test_a_view_of_a_transcript_from_a_snapshot_decodes_what_it_reads() -> None:
    """A view of a lazily loaded transcript: items decode when read, never placeholders."""
    messages = _texts(600)
    codec: dict[str, list[Message]] = {}

    def encode(items: list[Message]) -> str:
        key = str(len(codec))
        codec[key] = list(items)
        return key

    texts = ValidTranscript(messages).chunks(encode)
    loaded = ValidTranscript.from_chunks(600, texts, codec.__getitem__, pending=(), digest="d")
    view = loaded.view(10)
    assert view[300] == messages[310]
    assert tuple(view) == tuple(messages[10:])


def test_a_map_from_chunks_checks_its_keys() -> None:
    """A map's chunks carry their keys: every chunk but the last is full, no key repeats,
    and the values decode only when read."""
    texts = GrowMap((f"k{i}", i) for i in range(300)).chunks(lambda k, v: json.dumps([k, v]))
    loaded: GrowMap[str, int] = GrowMap.from_chunks(
        texts, lambda text: json.loads(text)[0], lambda text: json.loads(text)[1]
    )
    assert (loaded.get("k299"), loaded.get("k300"), loaded.get("k300", -1)) == (299, None, -1)
    assert dict(loaded) == {f"k{i}": i for i in range(300)}
    with pytest.raises(ValueError, match="chunk 0 of 2 holds 3 keys"):
        GrowMap.from_chunks(["a", "b"], lambda text: ["x", "y", "z"], list)
    with pytest.raises(ValueError, match="chunk 0 of 1 holds 0 keys"):
        GrowMap.from_chunks([""], lambda text: [], list)
    with pytest.raises(ValueError, match="the keys of a map repeat"):
        GrowMap.from_chunks(["a"], lambda text: ["x", "x"], list)
