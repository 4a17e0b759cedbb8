"""Shared Hypothesis strategies: JSON schemas, values that satisfy them, and targeted breakage."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from protocols import JsonValue
from protocols._llm import ToolCall

Schema = dict[str, JsonValue]

_NAMES = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)

_TYPE_TESTS: dict[str, Callable[[object], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
# One value of each JSON type (1.5 is a number but not an integer).
_WRONG_VALUES: tuple[JsonValue, ...] = (1.5, 7, "text", True, None, [1], {"k": 1})


def _bounds(low: int, high: int) -> st.SearchStrategy[tuple[int, int]]:
    return st.tuples(st.integers(low, high), st.integers(0, high - low)).map(
        lambda t: (t[0], t[0] + t[1])
    )


def _leaf_schemas() -> st.SearchStrategy[Schema]:
    strings = _bounds(0, 5).map(
        lambda b: {"type": "string", "minLength": b[0], "maxLength": b[1]}
    )
    integers = _bounds(-50, 50).map(lambda b: {"type": "integer", "minimum": b[0], "maximum": b[1]})
    numbers = _bounds(-10, 10).map(
        lambda b: {"type": "number", "minimum": b[0], "exclusiveMaximum": b[1] + 1}
    )
    enums = st.lists(st.one_of(st.integers(-3, 3), _NAMES), min_size=1, max_size=4, unique=True)
    fixed: list[Schema] = [{"type": "boolean"}, {"type": "null"}, {"type": ["string", "null"]}]
    return st.one_of(
        strings,
        integers,
        numbers,
        st.sampled_from(fixed),
        enums.map(lambda values: {"enum": list(values)}),
        _NAMES.map(lambda name: {"const": name}),
    )


def _extend(children: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    arrays = st.tuples(children, _bounds(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1][0], "maxItems": t[1][1]}
    )
    objects = st.dictionaries(_NAMES, children, max_size=4).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props)) if props else st.nothing()).map(
            lambda required: {
                "type": "object",
                "properties": dict(props),
                "required": sorted(required),
                "additionalProperties": False,
            }
        )
    )
    alternatives = st.lists(children, min_size=1, max_size=3).map(lambda xs: {"anyOf": list(xs)})
    return st.one_of(arrays, objects, alternatives)


def json_schemas() -> st.SearchStrategy[Schema]:
    """Schemas in a subset whose valid values :func:`values_for` knows how to generate."""
    return st.recursive(_leaf_schemas(), _extend, max_leaves=8)


def values_for(schema: Schema) -> st.SearchStrategy[JsonValue]:
    """Values that satisfy a schema produced by :func:`json_schemas`."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        options = schema["enum"]
        assert isinstance(options, list)
        return st.sampled_from(options)
    if "anyOf" in schema:
        options = schema["anyOf"]
        assert isinstance(options, list)
        return st.one_of([values_for(_schema(o)) for o in options])
    kind = schema["type"]
    if isinstance(kind, list):
        return st.one_of([values_for({"type": str(k)}) for k in kind])
    return _typed_values(kind, schema)


def _schema(value: JsonValue) -> Schema:
    assert isinstance(value, dict)
    return value


def _int(schema: Schema, key: str, default: int) -> int:
    value = schema.get(key, default)
    assert isinstance(value, int)
    return value


def _typed_values(kind: JsonValue, schema: Schema) -> st.SearchStrategy[JsonValue]:
    if kind == "string":
        return st.text(min_size=_int(schema, "minLength", 0), max_size=_int(schema, "maxLength", 8))
    if kind == "integer":
        return st.integers(_int(schema, "minimum", -100), _int(schema, "maximum", 100))
    if kind == "number":
        return st.floats(
            _int(schema, "minimum", -100),
            _int(schema, "exclusiveMaximum", 100),
            exclude_max=True,
            allow_nan=False,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(
            values_for(_schema(schema["items"])),
            min_size=_int(schema, "minItems", 0),
            max_size=_int(schema, "maxItems", 3),
        )
    assert kind == "object"
    props = _schema(schema["properties"])
    required = schema["required"]
    assert isinstance(required, list)
    return st.fixed_dictionaries(
        {k: values_for(_schema(v)) for k, v in props.items() if k in required},
        optional={k: values_for(_schema(v)) for k, v in props.items() if k not in required},
    )


def type_breaking_mutations(
    schema: Schema, value: JsonValue, path: str = "$"
) -> list[tuple[str, Callable[[JsonValue], JsonValue]]]:
    """Places where replacing the value by one of a forbidden JSON type must be reported.

    Returns ``(json_path, replace)`` pairs: ``replace(new)`` rebuilds the whole document
    with ``new`` at that path. Only nodes with a plain ``type`` count (under ``anyOf``
    another branch might accept the replacement).
    """
    found: list[tuple[str, Callable[[JsonValue], JsonValue]]] = []
    if "type" in schema and "anyOf" not in schema:
        found.append((path, lambda new: new))
    if schema.get("type") == "array" and isinstance(value, list):
        items = _schema(schema["items"])
        for i, item in enumerate(value):
            for sub_path, replace in type_breaking_mutations(items, item, f"{path}[{i}]"):
                found.append((sub_path, _in_list(value, i, replace)))
    if schema.get("type") == "object" and isinstance(value, dict):
        props = _schema(schema["properties"])
        for key, item in value.items():
            at = f"{path}.{key}"
            for sub_path, replace in type_breaking_mutations(_schema(props[key]), item, at):
                found.append((sub_path, _in_dict(value, key, replace)))
    return found


def _in_list(
    value: list[JsonValue], index: int, replace: Callable[[JsonValue], JsonValue]
) -> Callable[[JsonValue], JsonValue]:
    return lambda new: [replace(new) if i == index else v for i, v in enumerate(value)]


def _in_dict(
    value: dict[str, JsonValue], key: str, replace: Callable[[JsonValue], JsonValue]
) -> Callable[[JsonValue], JsonValue]:
    return lambda new: {k: replace(new) if k == key else v for k, v in value.items()}


def wrong_values_for(schema: Schema) -> list[JsonValue]:
    """Values whose JSON type the schema's ``type`` forbids."""
    kind = schema["type"]
    kinds = kind if isinstance(kind, list) else [kind]
    return [v for v in _WRONG_VALUES if not any(_TYPE_TESTS[str(k)](v) for k in kinds)]


def schema_at(schema: Schema, path: str) -> Schema:
    """The sub-schema governing ``path`` (as produced by :func:`type_breaking_mutations`)."""
    node = schema
    rest = path[1:]
    while rest:
        if rest.startswith("["):
            end = rest.index("]")
            node = _schema(node["items"])
            rest = rest[end + 1 :]
        else:
            rest = rest[1:]
            cut = min((i for i in (rest.find("."), rest.find("[")) if i >= 0), default=len(rest))
            node = _schema(_schema(node["properties"])[rest[:cut]])
            rest = rest[cut:]
    return node


def tool_calls(names: list[str]) -> st.SearchStrategy[list[ToolCall]]:
    """Lists of calls to the given tools with unique ids and arbitrary (often bad) JSON text."""
    arguments = st.one_of(
        st.just("{}"),
        st.text(max_size=10),
        st.dictionaries(_NAMES, st.integers(), max_size=2).map(
            lambda d: "{" + ",".join(f'"{k}": {v}' for k, v in d.items()) + "}"
        ),
    )
    return st.lists(
        st.tuples(st.sampled_from(names), arguments), max_size=5
    ).map(
        lambda pairs: [
            ToolCall(id=f"call-{i}", name=name, arguments=args)
            for i, (name, args) in enumerate(pairs)
        ]
    )
