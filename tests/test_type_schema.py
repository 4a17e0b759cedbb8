"""The JSON Schema generator for Python types (``protocols.json_schema_of``), for attrs
classes and pydantic models: what it writes, that our validator accepts what the class
accepts, and how it refuses what it cannot write."""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Any, Literal

import attrs
import hypothesis.strategies as st
import pydantic
import pytest
from hypothesis import given

from protocols import OutputType, json_schema_of
from protocols.codec import make_converter
from protocols.errors import ToolDefinitionError, UnsupportedTypeError
from protocols.jsonschema import compile_schema

# -- attrs ------------------------------------------------------------------------------


class Priority(enum.Enum):
    """How urgent a step is."""

    LOW = "low"
    HIGH = "high"


@attrs.frozen
class Step:
    """One step of a plan.

    Attributes:
        title: what to do, in a few words.
    """

    title: str
    minutes: int | None = None
    """Estimated duration; null when unknown."""
    priority: Priority = Priority.LOW
    owner: str = attrs.field(default="", metadata={"description": "Who does it."})


@attrs.frozen
class Plan:
    """A plan."""

    goal: str
    steps: list[Step]
    kind: Literal["project", "chore"] = "project"
    tags: tuple[str, ...] = ()
    budget: dict[str, float] = attrs.Factory(dict)
    first: Step | None = None
    pick: int | str = 0


@attrs.frozen
class Tree:
    label: str
    children: list[Tree] = attrs.Factory(list)


def test_an_attrs_class_is_inline_at_the_root_and_its_classes_in_defs() -> None:
    """The root is an object schema (providers require one); nested classes are `$ref`s,
    each class written once; defaults make a field optional; docstrings describe."""
    schema = json_schema_of(Plan)
    step = {"$ref": "#/$defs/Step"}
    assert schema == {
        "type": "object",
        "description": "A plan.",
        "properties": {
            "goal": {"type": "string"},
            "steps": {"type": "array", "items": step},
            "kind": {"type": "string", "enum": ["project", "chore"], "default": "project"},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "budget": {"type": "object", "additionalProperties": {"type": "number"}},
            "first": {"anyOf": [step, {"type": "null"}], "default": None},
            "pick": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 0},
        },
        "required": ["goal", "steps"],
        "additionalProperties": False,
        "$defs": {
            "Step": {
                "type": "object",
                "description": "One step of a plan.",
                "properties": {
                    "title": {"type": "string", "description": "what to do, in a few words."},
                    "minutes": {
                        "type": ["integer", "null"],
                        "description": "Estimated duration; null when unknown.",
                        "default": None,
                    },
                    "priority": {
                        "type": "string",
                        "enum": ["low", "high"],
                        "description": "How urgent a step is.",
                        "default": "low",
                    },
                    "owner": {"type": "string", "description": "Who does it.", "default": ""},
                },
                "required": ["title"],
                "additionalProperties": False,
            }
        },
    }


def test_a_class_that_refers_to_itself_refers_to_the_root() -> None:
    schema = json_schema_of(Tree)
    assert schema["properties"] == {
        "label": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    }
    assert "$defs" not in schema
    validator = compile_schema(schema)
    assert validator.problems({"label": "a", "children": [{"label": "b"}]}) == ()
    assert validator.problems({"label": "a", "children": [{"label": 1}]}) == (
        "$.children[0].label: expected string, got 1",
    )


def test_a_non_class_type_gets_its_plain_schema() -> None:
    assert json_schema_of(list[Step]) == {
        "type": "array",
        "items": {"$ref": "#/$defs/Step"},
        "$defs": {"Step": json_schema_of(Step)},
    }


def _outer_step() -> type:
    @attrs.frozen
    class Step:  # the same name as the module's Step, another class
        n: int

    return Step


_OtherStep = _outer_step()


@attrs.frozen
class Both:
    a: Step
    b: _OtherStep  # type: ignore[valid-type]


def test_two_classes_with_one_name_get_two_defs() -> None:
    defs = json_schema_of(Both)["$defs"]
    assert isinstance(defs, dict)
    assert sorted(defs) == [
        "Step",
        f"{__name__}._outer_step.<locals>.Step",
    ]


@attrs.frozen
class Dated:
    title: str
    when: datetime.datetime


@attrs.frozen
class HasDated:
    items: list[Dated]


@attrs.frozen
class BadKeys:
    counts: dict[int, str]


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (
            Dated,
            "response_format Dated: field Dated.when: unsupported type datetime; supported: "
            "str, int, float, bool, None, Any, object, Literal[...], enum.Enum subclasses, "
            "attrs classes, pydantic models, X | None, unions, list[X], Sequence[X], set[X], "
            "frozenset[X], tuple[X, ...], tuple[X, Y], dict[str, X], Mapping[str, X], "
            "Annotated[X, 'description']",
        ),
        (
            HasDated,
            "response_format HasDated: field Dated.when: unsupported type datetime; supported: "
            "str, int, float, bool, None, Any, object, Literal[...], enum.Enum subclasses, "
            "attrs classes, pydantic models, X | None, unions, list[X], Sequence[X], set[X], "
            "frozenset[X], tuple[X, ...], tuple[X, Y], dict[str, X], Mapping[str, X], "
            "Annotated[X, 'description']",
        ),
        (
            BadKeys,
            "response_format BadKeys: field BadKeys.counts: mapping keys must be str "
            "(JSON object keys), got int",
        ),
        (
            str,
            "response_format: str is not an attrs class or a pydantic model; give one of "
            "those, or a ResponseFormat with a JSON Schema",
        ),
    ],
)
def test_a_type_without_a_schema_is_refused_naming_the_field(tp: type, message: str) -> None:
    with pytest.raises(UnsupportedTypeError) as caught:
        OutputType.of(tp)
    assert caught.value.code == "tool.unsupported_type"
    assert isinstance(caught.value, ToolDefinitionError)
    assert str(caught.value) == message


def test_an_output_type_structures_json_and_names_what_does_not_fit() -> None:
    typed = OutputType.of(Plan)
    assert typed.format.name == "Plan"
    assert typed.format.schema == json_schema_of(Plan)
    plan = typed.structure({"goal": "g", "steps": [{"title": "t", "priority": "high"}]})
    assert plan == Plan("g", [Step("t", priority=Priority.HIGH)])
    with pytest.raises(ValueError, match=r"\$\.steps\[0\]\.priority: ValueError") as caught:
        typed.structure({"goal": "g", "steps": [{"title": "t", "priority": "urgent"}]})
    assert "'urgent' is not a valid Priority" in str(caught.value)


# -- what the schema accepts, the class accepts -------------------------------------------

_STEPS = st.builds(
    Step,
    title=st.text(max_size=5),
    minutes=st.none() | st.integers(-5, 500),
    priority=st.sampled_from(Priority),
    owner=st.text(max_size=3),
)
_PLANS = st.builds(
    Plan,
    goal=st.text(max_size=5),
    steps=st.lists(_STEPS, max_size=3),
    kind=st.sampled_from(["project", "chore"]),
    tags=st.lists(st.text(max_size=3), max_size=2).map(tuple),
    budget=st.dictionaries(
        st.text(max_size=3), st.floats(allow_nan=False, allow_infinity=False), max_size=2
    ),
    first=st.none() | _STEPS,
    pick=st.integers() | st.text(max_size=3),
)
_CONVERTER = make_converter()


@given(_PLANS)
def test_every_instance_matches_the_schema_and_comes_back_equal(plan: Plan) -> None:
    """Unstructure any instance: the schema accepts the JSON and structuring it gives
    the instance back (what a recorded answer relies on)."""
    typed = OutputType.of(Plan)
    value = _CONVERTER.unstructure(plan)
    assert compile_schema(typed.format.schema).problems(value) == ()
    assert typed.structure(value) == plan


# -- pydantic -----------------------------------------------------------------------------


class Address(pydantic.BaseModel):
    """Where someone lives."""

    city: str
    zip_code: str | None = None


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(description="Full name.")
    age: int
    role: Priority = Priority.LOW
    home: Address | None = None
    past: list[Address] = []
    id: int | str = 0


class Node(pydantic.BaseModel):
    value: int
    next: Node | None = None


def test_a_pydantic_model_uses_its_own_schema_with_models_in_defs() -> None:
    schema = json_schema_of(Person)
    assert schema["required"] == ["name", "age"]
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert properties["name"] == {"description": "Full name.", "title": "Name", "type": "string"}
    assert properties["home"] == {
        "anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}],
        "default": None,
    }
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    assert sorted(defs) == ["Address", "Priority"]
    validator = compile_schema(schema)
    assert validator.problems({"name": "Ada", "age": 36, "home": {"city": "London"}}) == ()
    assert validator.problems({"name": "Ada", "age": "36"}) == (
        '$.age: expected integer, got "36"',
    )
    typed = OutputType.of(Person)
    person = typed.structure({"name": "Ada", "age": 36, "past": [{"city": "Paris"}]})
    assert person == Person(name="Ada", age=36, past=[Address(city="Paris")])


def test_a_recursive_pydantic_model_is_an_object_at_the_root() -> None:
    schema = json_schema_of(Node)
    assert schema["type"] == "object"
    assert compile_schema(schema).problems({"value": 1, "next": {"value": 2}}) == ()


def test_attrs_classes_and_pydantic_models_mix() -> None:
    @attrs.frozen
    class Team:
        lead: Person
        members: list[Annotated[Person, "A member."]]
        notes: Any = None

    schema = json_schema_of(Team)
    assert schema["properties"] == {
        "lead": {"$ref": "#/$defs/Person"},
        "members": {
            "type": "array",
            "items": {"$ref": "#/$defs/Person", "description": "A member."},
        },
        "notes": {"default": None},
    }
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    assert sorted(defs) == ["Address", "Person", "Priority"]
    team = OutputType.of(Team).structure(
        {"lead": {"name": "A", "age": 1}, "members": [{"name": "B", "age": 2}]}
    )
    assert team.lead == Person(name="A", age=1)
    assert team.members == [Person(name="B", age=2)]


class Raw(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    blob: pydantic.InstanceOf[Step]


def test_a_pydantic_model_that_cannot_be_described_is_refused() -> None:
    with pytest.raises(UnsupportedTypeError) as caught:
        OutputType.of(Raw)
    assert str(caught.value).startswith(
        "response_format Raw: the type: pydantic cannot describe Raw: "
        "PydanticInvalidForJsonSchema: Cannot generate a JsonSchema for "
        "core_schema.IsInstanceSchema"
    )


def test_a_pydantic_model_that_does_not_fit_names_the_field() -> None:
    with pytest.raises(ValueError, match="age") as caught:
        OutputType.of(Person).structure({"name": "Ada", "age": "many"})
    assert str(caught.value).startswith("$: ValidationError: 1 validation error for Person")


def test_a_local_class_gets_its_field_docstrings_too() -> None:
    @attrs.frozen
    class Local:
        size: int
        """How big."""

    assert json_schema_of(Local)["properties"] == {
        "size": {"type": "integer", "description": "How big."}
    }
