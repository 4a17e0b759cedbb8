"""``@tool``: signature and docstring → JSON Schema, tool options, the registry, spec helpers."""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Optional, Union

import attrs
import pytest

from actors import Tool, ToolContext, ToolRegistry, tool
from actors._tools._schema import parse_docstring
from protocols import JsonValue, ToolOutcome, ToolSpec
from protocols._llm import ToolDefinition
from protocols.errors import ToolDefinitionError, ToolNotFoundError, UnsupportedTypeError
from protocols.lowlevel import (
    aborted_outcome,
    denied_outcome,
    idempotency_key,
    interrupted_outcome,
    validate_tool_name,
)


class Unit(enum.Enum):
    """Temperature unit."""

    C = "c"
    F = "f"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = "a"
    B = 1.5


@attrs.frozen
class Place:
    """A place on Earth."""

    city: str = attrs.field(metadata={"description": "The city name."})
    country: str | None = None
    tags: tuple[str, ...] = ()


@attrs.frozen
class Trip:
    origin: Place
    stops: list[Place] = attrs.Factory(list)


@attrs.frozen
class Node:
    value: int
    next: Node | None = None


def _parameters_of(annotation: object) -> dict[str, JsonValue]:
    """The parameters schema `@tool` builds for a single parameter `x: annotation`."""

    def probe(x: Any) -> None:
        return None

    probe.__annotations__ = {"x": annotation, "return": None}
    return tool(probe).spec.parameters


def _schema_of(annotation: object) -> JsonValue:
    """The property schema of `x: annotation`, a class's `$ref` replaced by its definition."""
    parameters = _parameters_of(annotation)
    properties = parameters["properties"]
    assert isinstance(properties, dict)
    schema = properties["x"]
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        defs = parameters["$defs"]
        assert isinstance(defs, dict)
        return defs[str(schema["$ref"]).removeprefix("#/$defs/")]
    return schema


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (Any, {}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal["a", 1, None], {"type": ["string", "integer", "null"], "enum": ["a", 1, None]}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045  # the old spelling too
        (str | None, {"type": ["string", "null"]}),
        (
            Literal["x"] | None,
            {"type": ["string", "null"], "enum": ["x", None]},
        ),
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (set[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (frozenset[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "items": False,
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (
            Mapping[str, list[bool]],
            {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
            },
        ),
        (
            Unit,
            {"enum": ["c", "f"], "type": "string", "description": "Temperature unit."},
        ),
        (Level, {"enum": [1, 2], "type": "integer"}),
        (Annotated[int, "How many days."], {"type": "integer", "description": "How many days."}),
        (
            Place,
            {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name."},
                    "country": {"type": ["string", "null"], "default": None},
                    "tags": {"type": "array", "items": {"type": "string"}, "default": []},
                },
                "required": ["city"],
                "additionalProperties": False,
                "description": "A place on Earth.",
            },
        ),
    ],
)
def test_annotation_to_schema(annotation: object, expected: JsonValue) -> None:
    """Each supported annotation maps to the JSON Schema a provider and our validator accept."""
    assert expected == _schema_of(annotation)


def test_nested_attrs_classes_go_to_defs() -> None:
    """attrs classes nest (inside lists too) as `$ref`s to one entry each in `$defs`;
    a Factory default is left out of the schema."""
    parameters = _parameters_of(Trip)
    place = {"$ref": "#/$defs/Place"}
    assert parameters["properties"] == {"x": {"$ref": "#/$defs/Trip"}}
    assert parameters["$defs"] == {
        "Trip": {
            "type": "object",
            "properties": {"origin": place, "stops": {"type": "array", "items": place}},
            "required": ["origin"],
            "additionalProperties": False,
        },
        "Place": _place_schema(),
    }
    assert _parameters_of(Place | None)["properties"] == {"x": {"anyOf": [place, {"type": "null"}]}}
    assert _schema_of(Place | Level | None) == {
        "anyOf": [place, _schema_of(Level), {"type": "null"}]
    }


def test_a_class_may_refer_to_itself() -> None:
    """A recursive attrs class is one `$defs` entry that refers to itself; the validator
    follows the reference at any depth."""
    made = tool(_walk)
    assert made.spec.parameters["$defs"] == {
        "Node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}], "default": None},
            },
            "required": ["value"],
            "additionalProperties": False,
        }
    }
    assert made.validator.problems({"node": {"value": 1, "next": {"value": 2}}}) == ()
    assert made.validator.problems({"node": {"value": 1, "next": {"value": "2"}}}) == (
        "$.node.next: matches no schema in anyOf: [0] $.node.next.value: expected integer, "
        'got "2" | [1] $.node.next: expected null, got object',
    )
    assert made.bind({"node": {"value": 1, "next": {"value": 2}}}, _CONTEXT) == (
        [],
        {"node": Node(1, Node(2))},
    )


def _walk(node: Node) -> int:
    """Walk a chain."""
    return node.value


_CONTEXT = ToolContext("c1", "walk", "s1", "k1")


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (
            datetime.datetime,
            "tool 'probe': parameter 'x': unsupported type datetime; supported: str, int, "
            "float, bool, None, Any, object, Literal[...], enum.Enum subclasses, attrs classes, "
            "pydantic models, X | None, unions, list[X], Sequence[X], set[X], frozenset[X], "
            "tuple[X, ...], tuple[X, Y], dict[str, X], Mapping[str, X], "
            "Annotated[X, 'description']",
        ),
        (
            dict[int, str],
            "tool 'probe': parameter 'x': mapping keys must be str (JSON object keys), got int",
        ),
        (
            Literal[1.5],
            "tool 'probe': parameter 'x': Literal values must be str, int, bool or None, got 1.5",
        ),
        (
            Mixed,
            "tool 'probe': parameter 'x': enum Mixed has a member B whose value 1.5 is not a "
            "str or an int",
        ),
        (
            list[bytes],
            "tool 'probe': parameter 'x' items: unsupported type bytes; supported: str, int, "
            "float, bool, None, Any, object, Literal[...], enum.Enum subclasses, attrs classes, "
            "pydantic models, X | None, unions, list[X], Sequence[X], set[X], frozenset[X], "
            "tuple[X, ...], tuple[X, Y], dict[str, X], Mapping[str, X], "
            "Annotated[X, 'description']",
        ),
    ],
)
def test_unsupported_annotations_are_refused(annotation: object, message: str) -> None:
    """An annotation we cannot express as JSON Schema fails at definition, naming where."""
    with pytest.raises(UnsupportedTypeError) as caught:
        _schema_of(annotation)
    assert isinstance(caught.value, ToolDefinitionError)
    assert caught.value.code == "tool.unsupported_type"
    assert str(caught.value) == message


def forecast(
    place: Place,
    ctx: ToolContext,
    unit: Unit = Unit.C,
    days: Annotated[int, "Days ahead."] = 1,
    when: object = object(),
) -> str:
    """Get the weather forecast
    for a place.

    The model reads only the first paragraph.

    Args:
        place (Place): where to look.
        ctx: the runtime's context.
        unit: the unit of
            the temperatures.
        days: documented twice; the Annotated text wins.

    Returns:
        The forecast.
    """
    return f"{place.city}:{unit.value}:{days}:{ctx.call_id}:{when is not None}"


def test_signature_and_docstring_become_the_spec() -> None:
    """Description, parameter docs, defaults and required come from the function itself."""
    made = tool(forecast)
    assert made.spec == ToolSpec(
        name="forecast",
        description="Get the weather forecast for a place.",
        parameters={
            "type": "object",
            "properties": {
                "place": {"$ref": "#/$defs/Place", "description": "where to look."},
                "unit": {
                    "enum": ["c", "f"],
                    "type": "string",
                    "description": "Temperature unit.",
                    "default": "c",
                },
                "days": {"type": "integer", "description": "Days ahead.", "default": 1},
                "when": {},
            },
            "required": ["place"],
            "additionalProperties": False,
            "$defs": {"Place": _place_schema()},
        },
    )
    assert made.context_parameter == "ctx"
    assert made.kind == "sync"


def _place_schema() -> dict[str, JsonValue]:
    schema = _schema_of(Place)
    assert isinstance(schema, dict)
    return schema


def test_a_tool_still_calls_through() -> None:
    """Decorating keeps the function usable from Python code and tests."""
    made = tool(forecast)
    context = ToolContext("c1", "forecast", "s1", "k1")
    assert made(Place("Oslo"), context, days=3) == "Oslo:c:3:c1:True"


def test_parse_docstring_handles_sections_and_continuations() -> None:
    """Google-style sections: only Args feed parameter docs; other sections end them."""
    summary, described = parse_docstring(
        """Summary line.

        Arguments:
            a (int): first,
                continued.
            *rest: splat.

        Raises:
            ValueError: not a parameter.
        """
    )
    assert summary == "Summary line."
    assert described == {"a": "first, continued.", "rest": "splat."}
    assert parse_docstring(None) == ("", {})


def test_options_override_the_defaults() -> None:
    """name, description, crash policy, timeout and approval go into the spec."""

    @tool(
        name="get-weather",
        description="Custom.",
        crash_policy="retry",
        timeout=2.5,
        needs_approval=True,
    )
    async def weather(city: str) -> str:
        return city

    assert weather.spec.name == "get-weather"
    assert weather.spec.description == "Custom."
    assert weather.spec.crash_policy == "retry"
    assert weather.spec.timeout == 2.5
    assert weather.spec.needs_approval
    assert weather.kind == "trio"
    assert tool(forecast).spec.crash_policy == "abort"


def test_hand_written_schema() -> None:
    """A hand-written object schema is used as is; the context parameter is still found."""
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }

    @tool(parameters=schema, asyncio=True)
    async def search(ctx: ToolContext, **kwargs: object) -> str:
        """Search the web."""
        return str(kwargs)

    assert search.spec.parameters is schema
    assert search.spec.description == "Search the web."
    assert search.fields is None
    assert search.context_parameter == "ctx"
    assert search.kind == "asyncio"


def _no_annotation(x) -> None:  # type: ignore[no-untyped-def]  # the case under test
    return None


def _splat(*args: int) -> None:
    return None


def _documents_ghost(x: int) -> None:
    """Do.

    Args:
        y: not a parameter.
    """


def _unresolvable(x: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
    return None


def _sync(x: int) -> None:
    return None


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: tool(_no_annotation),
            "tool '_no_annotation': parameter 'x' has no type annotation",
        ),
        (
            lambda: tool(_splat),
            "tool '_splat': parameter 'args' is *args/**kwargs; a tool needs named parameters",
        ),
        (
            lambda: tool(_documents_ghost),
            "the docstring of tool '_documents_ghost' documents 'y', which the function does "
            "not have",
        ),
        (
            lambda: tool(_unresolvable),
            "cannot resolve the type hints of tool '_unresolvable': NameError: name "
            "'NotDefinedAnywhere' is not defined (define the types at module level)",
        ),
        (
            lambda: tool(name="has space")(_sync),
            "invalid tool name 'has space': use 1 to 64 characters from a-z, A-Z, 0-9, '_' "
            "and '-' (the providers' rule)",
        ),
        (
            lambda: tool(timeout=0)(_sync),
            "tool '_sync': timeout must be > 0 s, got 0",
        ),
        (
            lambda: tool(crash_policy="maybe")(_sync),  # type: ignore[call-overload]  # bad on purpose
            "tool '_sync': crash_policy must be 'retry', 'abort' or 'ask', got 'maybe'",
        ),
        (
            lambda: tool(asyncio=True)(_sync),
            "tool '_sync': asyncio=True needs an 'async def' function",
        ),
        (
            lambda: tool(parameters={"type": "array"})(_sync),
            'tool \'_sync\': a parameters schema must have "type": "object"',
        ),
        (
            lambda: tool(parameters={"type": "object", "properties": {"a": {"type": "str"}}})(
                _sync
            ),
            "tool '_sync': malformed JSON schema: #/properties/a/type: unknown type 'str'; use "
            "one of null, boolean, integer, number, string, array, object",
        ),
    ],
)
def test_bad_definitions_are_refused(build: Any, message: str) -> None:
    """Each way to define a tool wrongly fails at definition time with an actionable message."""
    with pytest.raises(ToolDefinitionError) as caught:
        build()
    assert caught.value.code == "tool.bad_definition"
    assert str(caught.value) == message


@pytest.mark.parametrize("name", ["", "a" * 65, "dot.ted", "ünï", "sp ace"])
def test_invalid_tool_names(name: str) -> None:
    """Names outside the providers' rule are refused where the tool is defined."""
    with pytest.raises(ToolDefinitionError) as caught:
        validate_tool_name(name)
    assert caught.value.code == "tool.bad_definition"
    assert str(caught.value).startswith(f"invalid tool name {name!r}: use 1 to 64 characters")


@pytest.mark.parametrize("name", ["a", "A-b_9", "x" * 64])
def test_valid_tool_names(name: str) -> None:
    """Valid names come back unchanged."""
    assert name == validate_tool_name(name)


def test_spec_refuses_an_invalid_name() -> None:
    """A ToolSpec built by hand checks its name too."""
    with pytest.raises(ToolDefinitionError) as caught:
        ToolSpec(name="a/b", description="", parameters={})
    assert str(caught.value).startswith("invalid tool name 'a/b'")


def _tool_named(name: str) -> Tool[..., object]:
    def probe() -> str:
        return name

    return tool(name=name)(probe)


def test_registry_add_get_subset_specs() -> None:
    """The registry keeps order, narrows to a subset and offers specs and definitions."""
    a, b, c = _tool_named("a"), _tool_named("b"), _tool_named("c")
    registry = ToolRegistry.of(a, b, c)
    assert registry.get("b") is b
    assert registry.names() == ("a", "b", "c")
    assert "c" in registry
    assert len(registry) == 3
    assert list(registry) == [a, b, c]
    sub = registry.subset(["c", "a"])
    assert sub.names() == ("c", "a")
    assert sub.specs() == (c.spec, a.spec)
    assert sub.definitions() == (
        ToolDefinition(name="c", description="", parameters=c.spec.parameters),
        ToolDefinition(name="a", description="", parameters=a.spec.parameters),
    )


def test_registry_errors() -> None:
    """Duplicates, non-tools and unknown names fail with typed errors."""
    registry = ToolRegistry.of(_tool_named("a"))
    with pytest.raises(ToolDefinitionError) as duplicate:
        registry.add(_tool_named("a"))
    assert str(duplicate.value) == "a tool named 'a' is already registered"
    with pytest.raises(ToolDefinitionError) as not_tool:
        registry.add(_sync)  # type: ignore[arg-type]  # the mistake under test
    assert str(not_tool.value).endswith("is not a Tool; decorate the function with @tool first")
    with pytest.raises(ToolNotFoundError) as missing:
        registry.subset(["a", "zz"])
    assert missing.value.code == "tool.not_found"
    assert str(missing.value) == "no tool named 'zz'; available tools: a"


def test_idempotency_keys_are_deterministic_and_distinct() -> None:
    """The same inputs give the same key; any change (incl. how parts split) gives another."""
    key = idempotency_key("session-1", "call-1")
    assert key == idempotency_key("session-1", "call-1")
    assert key.startswith("pt-")
    assert len(key) == 35
    others = {
        idempotency_key("session-1", "call-2"),
        idempotency_key("session-2", "call-1"),
        idempotency_key("session-1", "call-1", round_index=0),
        idempotency_key("session-1", "call-1", round_index=1),
        idempotency_key("a/b", "c"),
        idempotency_key("a", "b/c"),
    }
    assert key not in others
    assert len(others) == 6


def test_idempotency_keys_do_not_drift() -> None:
    """A ``retry`` tool re-run after a crash gets the key recorded in its ``ToolStarted``;
    a key made now for the same call must be the one made before (logs hold them)."""
    assert idempotency_key("s", "c") == "pt-b48fc7a5c4482e015c556713bedffa26"
    assert idempotency_key("a/b", "c", round_index=3) == "pt-9c822edcbb8c804502d1da809d6eab22"
    assert idempotency_key("\u00e9\u2713", "", round_index=0) == (
        "pt-cf23e5d4fa1d76f79416c0e962e1a062"
    )


def test_outcome_helpers() -> None:
    """Outcomes the session actor writes itself are explicit, never a fake success."""
    assert interrupted_outcome("c1", "t") == ToolOutcome(
        call_id="c1",
        tool_name="t",
        status="interrupted",
        content="tool 't' was interrupted before it finished; its result is discarded",
        error_code="tool.interrupted",
    )
    aborted = aborted_outcome("c1", "t", "the process crashed while it ran")
    assert aborted.status == "aborted"
    assert aborted.is_error
    assert aborted.content == (
        "tool 't' was aborted and its result is unknown: the process crashed while it ran"
    )
    denied = denied_outcome("c1", "t", "the operator said no")
    assert denied.status == "denied"
    assert denied.content == "tool 't' was not run: the operator said no"
    assert not ToolOutcome(call_id="c", tool_name="t", status="ok", content="x").is_error


def test_hints_that_do_not_resolve_are_logged_not_swallowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hand-written schema needs no type hints, but when they fail to resolve the tool
    still works and the reason is logged under ``powertrio.tools`` (never dropped)."""

    def lookup(city: NoSuchType, ctx: ToolContext) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Look a city up."""
        return str(city)

    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    with caplog.at_level("WARNING", logger="powertrio.tools"):
        made = tool(lookup, parameters=schema)  # type: ignore[call-overload]
    assert made.context_parameter == "ctx"
    [record] = caplog.records
    assert record.name == "powertrio.tools"
    assert "type hints do not resolve (NameError: name 'NoSuchType' is not defined)" in (
        record.getMessage()
    )


def test_help_on_a_tool_shows_what_the_tool_does() -> None:
    """``help(ask_human)`` documents the tool (its function's docstring), not the ``Tool``
    class, which keeps its own docstring."""
    import pydoc

    from actors import ask_human

    shown = pydoc.render_doc(ask_human, renderer=pydoc.plaintext)
    assert "The tool 'ask_human': Ask the human a question and wait for the answer." in shown
    assert (Tool.__doc__ or "").startswith("A callable offered to a model")
