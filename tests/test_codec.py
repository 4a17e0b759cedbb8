"""The event codec: registry, round trips, opaque JSON, upcasters and typed errors."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import protocols
import protocols.codec
from protocols import JsonObject, JsonValue
from protocols.codec import EncodedEvent, EventRegistry
from protocols.errors import (
    EventDecodeError,
    EventEncodeError,
    FutureEventVersionError,
    UnknownEventTypeError,
)
from runtime import NewEvent, RecordedEvent


@attrs.frozen
class Usage:
    """A nested attrs value (walked by cattrs)."""

    input_tokens: int
    output_tokens: int


@attrs.frozen(kw_only=True)
class AssistantReplied:
    """A sample event mixing typed fields and opaque JSON."""

    run_id: str
    round: int
    content: JsonValue
    tool_args: JsonObject
    usage: Usage
    tags: tuple[str, ...] = ()
    finish_reason: str | None = None


@attrs.frozen
class Renamed:
    """Version 3 of an event whose fields changed twice."""

    title: str
    depth: int


def _v1_to_v2(raw: JsonObject) -> JsonObject:
    return {"title": raw["name"]}


def _v2_to_v3(raw: JsonObject) -> JsonObject:
    return {**raw, "depth": 0}


def _registry() -> EventRegistry:
    registry = EventRegistry()
    registry.register(AssistantReplied, name="assistant.replied")
    registry.register(
        Renamed, name="thing.renamed", version=3, upcasters={1: _v1_to_v2, 2: _v2_to_v3}
    )
    return registry


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
events = st.builds(
    AssistantReplied,
    run_id=st.text(),
    round=st.integers(0, 10**6),
    content=json_values,
    tool_args=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    usage=st.builds(Usage, st.integers(0, 10**9), st.integers(0, 10**9)),
    tags=st.lists(st.text(max_size=6), max_size=3).map(tuple),
    finish_reason=st.none() | st.sampled_from(["stop", "tool_calls", "length"]),
)


@given(events)
def test_round_trip(event: AssistantReplied) -> None:
    """decode(encode(x)) == x for every event the strategy builds."""
    registry = _registry()
    encoded = registry.encode(event)
    assert (encoded.type, encoded.schema_version) == ("assistant.replied", 1)
    assert registry.decode(encoded.type, encoded.schema_version, encoded.data) == event


def test_opaque_json_is_not_walked() -> None:
    """Values under a JsonValue/JsonObject field never reach per-type cattrs hooks."""
    registry = EventRegistry()
    seen: list[int] = []

    def count_int(value: int, _type: object) -> int:
        seen.append(value)
        return value

    registry.converter.register_structure_hook(int, count_int)
    registry.register(AssistantReplied, name="assistant.replied")
    event = AssistantReplied(
        run_id="r",
        round=7,
        content=[1, 2, 3, {"deep": [4, 5, 6]}],
        tool_args={"n": 8, "xs": list(range(100))},
        usage=Usage(9, 10),
    )
    decoded = registry.decode(**attrs.asdict(registry.encode(event)))
    assert decoded == event
    assert sorted(seen) == [7, 9, 10]  # round and usage: the typed ints only


def test_upcasters_chain_to_the_current_version() -> None:
    """An old event goes through every upcaster in order."""
    registry = _registry()
    assert registry.decode("thing.renamed", 1, b'{"name":"x"}') == Renamed("x", 0)
    assert registry.decode("thing.renamed", 2, b'{"title":"y"}') == Renamed("y", 0)
    assert registry.decode("thing.renamed", 3, b'{"title":"z","depth":2}') == Renamed("z", 2)
    assert registry.encode(Renamed("z", 2)) == EncodedEvent(
        type="thing.renamed", schema_version=3, data=b'{"title":"z","depth":2}'
    )
    assert registry.current_version("thing.renamed") == 3
    assert registry.class_of("thing.renamed") is Renamed
    assert registry.name_of(Renamed) == "thing.renamed"
    assert registry.names() == ("assistant.replied", "thing.renamed")


def test_unknown_type_names_stream_and_version() -> None:
    """An unregistered type name raises UnknownEventTypeError saying where it was found."""
    with pytest.raises(UnknownEventTypeError) as info:
        _registry().decode("ghost.appeared", 1, b"{}", stream="session/1", version=4)
    error = info.value
    assert (error.code, error.type_name, error.stream, error.version) == (
        "codec.unknown_type",
        "ghost.appeared",
        "session/1",
        4,
    )
    assert str(error) == (
        "unknown event type 'ghost.appeared' at 'session/1' version 4; "
        "is the module that defines it imported?"
    )
    with pytest.raises(UnknownEventTypeError):
        _registry().class_of("ghost.appeared")
    with pytest.raises(UnknownEventTypeError):
        _registry().current_version("ghost.appeared")


def test_future_version_names_stream_and_version() -> None:
    """A schema version newer than the code raises FutureEventVersionError."""
    with pytest.raises(FutureEventVersionError) as info:
        _registry().decode("thing.renamed", 4, b"{}", stream="board/2", version=9)
    error = info.value
    assert (error.code, error.found, error.supported, error.stream, error.version) == (
        "codec.future_version",
        4,
        3,
        "board/2",
        9,
    )
    assert str(error) == (
        "event 'thing.renamed' at 'board/2' version 9 has schema version 4, this code reads "
        "up to 3; upgrade the code that defines it"
    )


@pytest.mark.parametrize(
    ("type_name", "schema_version", "data", "detail"),
    [
        ("assistant.replied", 1, b"{not json", "payload is not JSON"),
        ("assistant.replied", 1, b"[1, 2]", "payload is a JSON array, expected an object"),
        ("assistant.replied", 1, b'{"run_id": "r"}', "required field missing @ $.round"),
        (
            "assistant.replied",
            1,
            b'{"run_id":"r","round":"many","content":1,"tool_args":{},'
            b'"usage":{"input_tokens":1,"output_tokens":2}}',
            "invalid value for type, expected int @ $.round",
        ),
        (
            "thing.renamed",
            1,
            b'{"nom":"x"}',
            "upcaster from schema version 1 to 2 failed (KeyError",
        ),
        ("thing.renamed", 1, b'"text"', "payload is a JSON string, expected an object"),
        ("thing.renamed", 0, b"{}", "schema version 0 is below 1"),
    ],
)
def test_undecodable_payloads(
    type_name: str, schema_version: int, data: bytes, detail: str
) -> None:
    """Bad bytes raise EventDecodeError naming the type, stream, version and the problem."""
    with pytest.raises(EventDecodeError) as info:
        _registry().decode(type_name, schema_version, data, stream="s", version=3)
    error = info.value
    assert (error.code, error.type_name, error.stream, error.version) == (
        "codec.decode",
        type_name,
        "s",
        3,
    )
    assert detail in error.detail
    assert str(error).startswith(f"event {type_name!r} at 's' version 3 does not decode: ")


def test_encode_errors() -> None:
    """Encoding an unregistered class or a non-JSON value raises EventEncodeError."""
    registry = _registry()
    with pytest.raises(EventEncodeError) as info:
        registry.encode(Usage(1, 2))
    assert (info.value.code, str(info.value)) == (
        "codec.encode",
        "cannot encode event Usage: the class is not registered; decorate it with @event_type(...)",
    )
    assert isinstance(info.value, TypeError)
    with pytest.raises(EventEncodeError) as info:
        registry.name_of(Usage)
    assert info.value.type_name == "Usage"
    bad = AssistantReplied(
        run_id="r",
        round=1,
        content={1, 2},  # type: ignore[arg-type]  # a set is not JSON, on purpose
        tool_args={},
        usage=Usage(1, 1),
    )
    with pytest.raises(EventEncodeError) as info:
        registry.encode(bad)
    assert info.value.type_name == "assistant.replied"
    assert "a field holds a value JSON cannot represent" in str(info.value)


def test_registration_misuse() -> None:
    """Registering twice, non-attrs classes or incomplete upcasters fails at import time."""
    registry = _registry()
    taken = "'assistant.replied' is already registered by AssistantReplied"
    with pytest.raises(ValueError, match=taken):
        registry.register(Renamed, name="assistant.replied")
    twice = "AssistantReplied is already registered as 'assistant.replied'"
    with pytest.raises(ValueError, match=twice):
        registry.register(AssistantReplied, name="other")
    with pytest.raises(TypeError, match="is not an attrs class"):
        registry.register(dict, name="plain.dict")
    with pytest.raises(ValueError, match="version must be >= 1"):
        EventRegistry().register(Usage, name="u", version=0)
    with pytest.raises(ValueError, match=r"needs upcasters for versions \[1, 2\], got \[1\]"):
        EventRegistry().register(Usage, name="u", version=3, upcasters={1: _v1_to_v2})
    with pytest.raises(ValueError, match="non-empty"):
        EventRegistry().register(Usage, name="")


@protocols.codec.event_type("test_codec.pinged", version=2, upcasters={1: lambda raw: {"count": 1}})
@attrs.frozen
class Pinged:
    """Registered in the module-level default registry at import, as actor modules do."""

    count: int


def test_default_registry_and_module_functions() -> None:
    """The decorator registers into the default registry used by encode/decode/decode_record."""
    encoded = protocols.codec.encode(Pinged(3))
    assert encoded == EncodedEvent(type="test_codec.pinged", schema_version=2, data=b'{"count":3}')
    assert protocols.codec.decode("test_codec.pinged", 1, b"{}") == Pinged(1)
    assert protocols.codec.default_registry.class_of("test_codec.pinged") is Pinged
    new = NewEvent.from_encoded(encoded, metadata=b'{"by":"test"}')
    assert (new.type, new.schema_version, new.data, new.metadata) == (
        "test_codec.pinged",
        2,
        b'{"count":3}',
        b'{"by":"test"}',
    )
    record = RecordedEvent(
        stream="p/1",
        version=5,
        position=10,
        type="test_codec.pinged",
        schema_version=9,
        data=b"{}",
        metadata=None,
        recorded_at=0.0,
    )
    with pytest.raises(FutureEventVersionError) as info:
        protocols.codec.decode_record(record)
    assert (info.value.stream, info.value.version) == ("p/1", 5)
    current = attrs.evolve(record, schema_version=2, data=b'{"count":4}')
    assert protocols.codec.decode_record(current) == Pinged(4)


def test_make_converter_passes_json_through() -> None:
    """make_converter() gives a converter that leaves JsonValue alone both ways."""
    converter = protocols.codec.make_converter()
    value = {"a": [1, {"b": None}]}
    hook = converter.get_structure_hook(JsonValue)
    assert hook(value, JsonValue) is value
    assert converter.unstructure(value, JsonValue) is value


def _plain_bytes(event: object) -> bytes:
    """The bytes of cattrs' orjson converter taught only the opaque aliases: the wire
    format as it was before the encoders were specialised."""
    import orjson
    from cattrs.preconf.orjson import make_converter

    plain = make_converter()
    opaque = (JsonValue, JsonObject)
    plain.register_unstructure_hook_func(lambda t: any(t is a for a in opaque), lambda v: v)
    return orjson.dumps(plain.unstructure(event))


@given(
    finish_reason=st.none() | st.text(max_size=5),
    tags=st.lists(st.text(max_size=3), max_size=3).map(tuple),
    content=st.none()
    | st.text(max_size=5)
    | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
)
@settings(deadline=None)
def test_a_specialised_encoder_writes_the_bytes_of_the_plain_converter(
    finish_reason: str | None, tags: tuple[str, ...], content: JsonValue
) -> None:
    """Optional fields of plain values and opaque JSON are taken as they are (no hook
    call per field), and the bytes do not change: logs written before still read back
    and compare equal."""
    registry = _registry()
    event = AssistantReplied(
        run_id="r",
        round=1,
        content=content,
        tool_args={"a": [1, None]},
        usage=Usage(1, 2),
        tags=tags,
        finish_reason=finish_reason,
    )
    encoder = registry.encoder(AssistantReplied)
    assert (encoder.name, encoder.schema_version) == ("assistant.replied", 1)
    assert encoder.dump(event) == _plain_bytes(event)
    assert registry.encode(event).data == _plain_bytes(event)
    assert registry.encoder(AssistantReplied) is encoder  # specialised once


def test_every_session_event_encodes_as_the_plain_converter_does() -> None:
    """The session's own events, with their optional fields set and unset."""
    import actors._session._actor  # noqa: F401  # registers the session's events
    from actors._session._events import (
        AssistantRecorded,
        RunFinished,
        RunStarted,
        SessionCreated,
    )
    from protocols import AssistantMessage, ToolCall
    from protocols import Usage as LLMUsage

    events: list[object] = [
        SessionCreated(session_id="s", system_prompt="p", max_rounds=3),
        SessionCreated(
            session_id="s", system_prompt="p", max_rounds=3, parent_id="q", agent="a", depth=1
        ),
        RunStarted(run_id="r", input="hi", max_rounds=2),
        RunStarted(run_id="r", input="hi", max_rounds=2, tools=("a",), system_prompt="x"),
        AssistantRecorded(
            run_id="r",
            round=1,
            message=AssistantMessage(
                content="c", tool_calls=(ToolCall(id="1", name="n", arguments="{}"),)
            ),
            usage=LLMUsage(prompt_tokens=3),
            model="m",
            finish_reason="stop",
            request_fingerprint="f",
            first_token_s=0.25,
        ),
        RunFinished(run_id="r", status="completed", text="t", rounds=1, usage=LLMUsage()),
        RunFinished(
            run_id="r",
            status="failed",
            text="",
            rounds=1,
            usage=LLMUsage(),
            error="x: y",
            output={"k": [1, 2.5, None]},
            error_code="x",
        ),
    ]
    for event in events:
        assert protocols.codec.default_registry.encode(event).data == _plain_bytes(event)
