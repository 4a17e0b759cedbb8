"""The JSON-Schema validator: exact messages with paths, malformed schemas, and properties."""

from __future__ import annotations

import pytest
from _depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    json_schemas,
    schema_at,
    type_breaking_mutations,
    values_for,
    wrong_values_for,
)

from protocols import JsonValue
from protocols.errors import SchemaRemoteRefError, ToolDefinitionError
from protocols.jsonschema import (
    CompiledSchema,
    check_schema,
    compile_schema,
    schema_problems,
    validate_json,
)

CITY: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (CITY, {"city": 42}, ("$.city: expected string, got 42",)),
        (CITY, {"city": "Oslo", "days": 0}, ("$.days: must be >= 1, got 0",)),
        (CITY, {}, ("$.city: missing required property",)),
        (
            CITY,
            {"city": "Oslo", "dayz": 1},
            ("$.dayz: unexpected property (allowed: city, days)",),
        ),
        (CITY, [], ("$: expected object, got array",)),
        ({"type": "integer"}, True, ("$: expected integer, got true",)),
        ({"type": "integer"}, 1.5, ("$: expected integer, got 1.5",)),
        ({"type": ["string", "null"]}, 3, ("$: expected string or null, got 3",)),
        ({"enum": ["c", "f"]}, "k", ('$: must be one of "c", "f", got "k"',)),
        ({"enum": [1]}, True, ("$: must be one of 1, got true",)),
        ({"const": "x"}, "y", ('$: must be "x", got "y"',)),
        ({"maximum": 3}, 4, ("$: must be <= 3, got 4",)),
        ({"exclusiveMinimum": 0}, 0, ("$: must be > 0, got 0",)),
        ({"exclusiveMaximum": 0}, 0.0, ("$: must be < 0, got 0.0",)),
        ({"multipleOf": 3}, 7, ("$: must be a multiple of 3, got 7",)),
        ({"multipleOf": 0.1}, 0.25, ("$: must be a multiple of 0.1, got 0.25",)),
        ({"minLength": 2}, "a", ("$: must be at least 2 characters long, got 1",)),
        ({"maxLength": 1}, "ab", ("$: must be at most 1 characters long, got 2",)),
        ({"pattern": "^[a-z]+$"}, "A", ("$: must match the pattern '^[a-z]+$', got \"A\"",)),
        ({"minItems": 1}, [], ("$: must have at least 1 items, got 0",)),
        ({"maxItems": 1}, [1, 2], ("$: must have at most 1 items, got 2",)),
        (
            {"uniqueItems": True},
            [1, {"a": [1]}, 1.0, {"a": [1]}],
            (
                "$[2]: items must be unique, but this one equals $[0]",
                "$[3]: items must be unique, but this one equals $[1]",
            ),
        ),
        (
            {"type": "array", "items": {"type": "string"}},
            ["a", 1, None],
            ("$[1]: expected string, got 1", "$[2]: expected string, got null"),
        ),
        (
            {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
            ["a", "b", 3],
            ('$[1]: expected integer, got "b"', "$[2]: no value is allowed here"),
        ),
        (
            {"items": [{"type": "string"}], "additionalItems": {"type": "null"}},
            [1, 2],
            ("$[0]: expected string, got 1", "$[1]: expected null, got 2"),
        ),
        (
            {"anyOf": [{"type": "string"}, {"type": "null"}]},
            3,
            ("$: expected string or null, got 3",),
        ),
        (
            {"anyOf": [{"type": "string", "minLength": 3}, {"type": "integer"}]},
            "ab",
            (
                "$: matches no schema in anyOf: [0] $: must be at least 3 characters long, "
                'got 2 | [1] $: expected integer, got "ab"',
            ),
        ),
        (
            {"oneOf": [{"type": "integer"}, {"minimum": 0}]},
            1,
            ("$: must match exactly one schema in oneOf, but matches [0], [1]",),
        ),
        (
            {"oneOf": [{"type": "integer"}, {"type": "null"}]},
            "a",
            ('$: expected integer or null, got "a"',),
        ),
        (
            {"allOf": [{"minimum": 2}, {"multipleOf": 2}]},
            1,
            ("$: must be >= 2, got 1", "$: must be a multiple of 2, got 1"),
        ),
        ({"not": {"type": "null"}}, None, ("$: must not match the schema under 'not'",)),
        (
            {"if": {"minimum": 10}, "then": {"multipleOf": 10}, "else": {"maximum": 5}},
            7,
            ("$: must be <= 5, got 7",),
        ),
        (
            {"if": {"minimum": 10}, "then": {"multipleOf": 10}},
            11,
            ("$: must be a multiple of 10, got 11",),
        ),
        (
            {"contains": {"type": "null"}, "maxContains": 1},
            [None, None],
            ("$: must contain at most 1 matching item(s)",),
        ),
        (
            {"contains": {"type": "null"}},
            [1],
            ("$: must contain at least 1 matching item(s)",),
        ),
        (
            {"patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False},
            {"x_a": "s", "y": 1},
            ('$.x_a: expected integer, got "s"', "$.y: unexpected property (allowed: none)"),
        ),
        (
            {"additionalProperties": {"type": "integer"}},
            {"a b": "s"},
            ('$["a b"]: expected integer, got "s"',),
        ),
        (
            {"propertyNames": {"maxLength": 2}},
            {"abc": 1},
            ("$.abc: must be at most 2 characters long, got 3",),
        ),
        (
            {"dependentRequired": {"card": ["cvv"]}},
            {"card": "1"},
            ("$.cvv: missing, required when 'card' is present",),
        ),
        (
            {"dependentSchemas": {"card": {"required": ["cvv"]}}},
            {"card": "1"},
            ("$.cvv: missing required property",),
        ),
        ({"minProperties": 1}, {}, ("$: must have at least 1 properties, got 0",)),
        ({"maxProperties": 0}, {"a": 1}, ("$: must have at most 0 properties, got 1",)),
        (False, 1, ("$: no value is allowed here",)),
        (True, {"anything": [1]}, ()),
        ({"format": "email", "title": "t", "description": "d"}, "not an email", ()),
        (
            {
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}},
                    }
                },
                "$ref": "#/$defs/node",
            },
            {"v": 1, "next": {"v": "x", "next": {"next": {"v": None}}}},
            (
                '$.next.v: expected integer, got "x"',
                "$.next.next.next.v: expected integer, got null",
            ),
        ),
        (
            {"definitions": {"a/b": {"type": "string"}}, "items": {"$ref": "#/definitions/a~1b"}},
            ["ok", 1],
            ("$[1]: expected string, got 1",),
        ),
    ],
)
def test_problems_name_path_and_cause(
    schema: JsonValue, value: JsonValue, expected: tuple[str, ...]
) -> None:
    """Each keyword reports exactly what is wrong, at the JSON path of the offending value."""
    assert expected == validate_json(schema, value)


def test_all_problems_are_reported_at_once() -> None:
    """A value with several mistakes gets them all, so the model can fix them in one retry."""
    schema: JsonValue = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"n": {"type": "integer"}},
                    "required": ["n"],
                },
            },
        },
        "required": ["items", "user"],
    }
    problems = validate_json(schema, {"items": [{"n": "1"}, {}, {"n": 2}]})
    assert problems == (
        '$.items[0].n: expected integer, got "1"',
        "$.items[1].n: missing required property",
        "$.user: missing required property",
    )


def test_long_values_are_cut_in_messages() -> None:
    """A huge wrong value does not flood the model's context."""
    (problem,) = validate_json({"type": "integer"}, "x" * 500)
    assert problem == "$: expected integer, got " + ('"' + "x" * 76)[:77] + "..."


def test_compiled_schema_is_reusable() -> None:
    """A compiled schema validates many values and reports validity as a bool too."""
    compiled = compile_schema(CITY)
    assert isinstance(compiled, CompiledSchema)
    assert compiled.is_valid({"city": "Oslo", "days": 2})
    assert not compiled.is_valid({"city": "Oslo", "days": 0})
    assert compiled.problems({"city": 1}) == ("$.city: expected string, got 1",)
    assert compiled.schema is CITY


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {"type": "strin"},
            "#/type: unknown type 'strin'; use one of null, boolean, integer, number, "
            "string, array, object",
        ),
        ({"type": []}, "#/type: must be a type name or a non-empty list of them, got array"),
        ({"properties": []}, "#/properties: expected object, got array"),
        (
            {"properties": {"a": 3}},
            "#/properties/a: a schema must be an object or a boolean, got 3",
        ),
        ({"required": "a"}, '#/required: expected array, got "a"'),
        ({"minimum": "1"}, '#/minimum: expected number, got "1"'),
        ({"multipleOf": 0}, "#/multipleOf: must be > 0, got 0"),
        ({"minLength": -1}, "#/minLength: must be >= 0, got -1"),
        ({"uniqueItems": "yes"}, '#/uniqueItems: expected boolean, got "yes"'),
        ({"pattern": "("}, '#/pattern: invalid regular expression "("'),
        ({"patternProperties": {"(": {}}}, '#/patternProperties/(: invalid regular expression "("'),
        ({"pattern": 5}, "#/pattern: expected string, got 5"),
        ({"anyOf": []}, "#/anyOf: must have at least 1 items, got 0"),
        (
            {"items": {"type": "nope"}},
            "#/items/type: unknown type 'nope'; use one of null, "
            "boolean, integer, number, string, array, object",
        ),
        (
            {"$ref": "#/$defs/missing"},
            "#/$ref: reference '#/$defs/missing' points to nothing in this schema",
        ),
        ({"$ref": 1}, "#/$ref: expected string, got 1"),
        ({"$defs": []}, "#/$defs: expected object, got array"),
        (
            {"properties": {"a": {"$ref": "#/$defs/missing"}}},
            "#/properties/a/$ref: reference '#/$defs/missing' points to nothing in this schema",
        ),
        ({"$ref": "#nowhere"}, "#/$ref: reference '#nowhere' points to nothing in this schema"),
        ({"$schema": 7}, "#/$schema: must be a meta-schema URI, got 7"),
        ({"dependentRequired": {"a": "b"}}, '#/dependentRequired/a: expected array, got "b"'),
        ({"patternProperties": []}, "#/patternProperties: expected object, got array"),
        ("string", '#: a schema must be an object or a boolean, got "string"'),
    ],
)
def test_malformed_schemas_are_refused(schema: JsonValue, expected: str) -> None:
    """A broken schema is a definition error naming the location and the fix."""
    assert (expected,) == schema_problems(schema)
    with pytest.raises(ToolDefinitionError) as caught:
        check_schema(schema)
    assert caught.value.code == "tool.bad_definition"
    assert str(caught.value) == f"malformed JSON schema: {expected}"


def test_every_schema_problem_is_listed() -> None:
    """All mistakes in a schema are reported together, in one error."""
    with pytest.raises(ToolDefinitionError) as caught:
        compile_schema({"type": "obj", "properties": {"a": {"minItems": "x"}}})
    assert str(caught.value) == (
        "malformed JSON schema: #/type: unknown type 'obj'; use one of null, boolean, "
        "integer, number, string, array, object; #/properties/a/minItems: expected integer, "
        'got "x"'
    )


def test_recursive_reference_through_a_child_is_fine() -> None:
    """A self-reference that descends into a property is a tree, not a cycle."""
    schema: JsonValue = {"properties": {"child": {"$ref": "#"}}, "type": "object"}
    assert schema_problems(schema) == ()
    assert validate_json(schema, {"child": {"child": 1}}) == (
        "$.child.child: expected object, got 1",
    )


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_values_validate(data: st.DataObject) -> None:
    """Every value generated from a schema satisfies it (no false alarms)."""
    schema = data.draw(json_schemas())
    value = data.draw(values_for(schema))
    assert validate_json(schema, value) == ()


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_type_mutations_are_reported_at_their_path(data: st.DataObject) -> None:
    """Putting a value of a forbidden type anywhere yields a problem at exactly that path."""
    schema = data.draw(json_schemas())
    value = data.draw(values_for(schema))
    spots = type_breaking_mutations(schema, value)
    if not spots:
        return
    path, rebuild = data.draw(st.sampled_from(spots))
    wrong = wrong_values_for(schema_at(schema, path))
    bad = data.draw(st.sampled_from(wrong))
    problems = validate_json(schema, rebuild(bad))
    assert any(p.startswith(f"{path}: ") for p in problems), (path, bad, problems)


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_unexpected_properties_are_reported(data: st.DataObject) -> None:
    """An extra key on a closed object is rejected at the key's path."""
    schema = data.draw(json_schemas().filter(lambda s: s.get("type") == "object"))
    value = data.draw(values_for(schema))
    assert isinstance(value, dict)
    problems = validate_json(schema, {**value, "zz_extra": 1})
    assert any(p.startswith("$.zz_extra: unexpected property") for p in problems)


@pytest.mark.parametrize(
    ("schema", "uri"),
    [
        ({"$ref": "https://example.com/s.json"}, "https://example.com/s.json"),
        ({"properties": {"a": {"$ref": "http://x.org/a.json#/$defs/b"}}}, "http://x.org/a.json"),
        ({"$id": "https://x.org/root", "items": {"$ref": "other"}}, "https://x.org/other"),
        ({"$schema": "https://x.org/my-meta", "type": "string"}, "https://x.org/my-meta"),
    ],
)
def test_remote_references_are_refused_without_fetching(schema: JsonValue, uri: str) -> None:
    """A reference to another document is a typed definition error; nothing is fetched."""
    with pytest.raises(SchemaRemoteRefError) as caught:
        compile_schema(schema)
    assert caught.value.code == "tool.schema_remote_ref"
    assert isinstance(caught.value, ToolDefinitionError)
    assert uri == caught.value.uri
    (problem,) = schema_problems(schema)
    assert problem.startswith("#: JSON schema refers to the external document")


def test_references_inside_the_schema_need_no_network() -> None:
    """``$id``-named subschemas, anchors and the bundled meta-schemas resolve offline."""
    schema: JsonValue = {
        "$id": "https://x.org/root",
        "$defs": {"other": {"$id": "other", "type": "integer"}, "s": {"$anchor": "s"}},
        "properties": {
            "a": {"$ref": "other"},
            "b": {"$ref": "#s", "type": "string"},
            "c": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
        },
    }
    assert validate_json(schema, {"a": 1, "b": "x", "c": {"type": "string"}}) == ()
    assert validate_json(schema, {"a": "1", "b": 2}) == (
        '$.a: expected integer, got "1"',
        "$.b: expected string, got 2",
    )
    assert not compile_schema(schema).is_valid({"c": {"type": "nope"}})


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (
            {"properties": {"a": True}, "unevaluatedProperties": False},
            {"a": 1, "b": 2},
            ("$.b: unexpected property",),
        ),
        (
            {"prefixItems": [True], "unevaluatedItems": False},
            [1, 2],
            ("$: unexpected item 2",),
        ),
        ({"maxItems": 2.0}, [1, 2, 3], ("$: must have at most 2 items, got 3",)),
        (
            {"$defs": {"t": {"$dynamicAnchor": "t", "type": "string"}}, "$dynamicRef": "#t"},
            1,
            ("$: expected string, got 1",),
        ),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": ["b"]}},
            {"a": 1},
            ("$.b: missing, required when 'a' is present",),
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "items": [{"type": "string"}],
                "additionalItems": False,
            },
            ["a", "b"],
            ("$[1]: no value is allowed here",),
        ),
        ({"type": "integer"}, b"1", ("$: not a JSON value: Unsupported type: 'bytes'",)),
    ],
)
def test_keywords_the_old_subset_refused(
    schema: JsonValue, value: object, expected: tuple[str, ...]
) -> None:
    """The full draft 2020-12 (and older drafts by ``$schema``) is validated, with paths."""
    assert expected == validate_json(schema, value)
