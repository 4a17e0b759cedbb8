"""Turn a Python function's signature and docstring into a tool's JSON Schema."""

from __future__ import annotations

import collections.abc
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal, Union, final, get_args, get_origin

import attrs
import orjson

from protocols import JsonObject, JsonValue, make_converter
from protocols.errors import ToolDefinitionError

__all__ = [
    "ParsedFunction",
    "ToolParameter",
    "is_context_annotation",
    "parse_docstring",
    "parse_function",
]

_SUPPORTED: Final = (
    "str, int, float, bool, None, Any, object, Literal[...], enum.Enum subclasses, attrs classes, "
    "X | None, unions, list[X], Sequence[X], set[X], frozenset[X], tuple[X, ...], "
    "tuple[X, Y], dict[str, X], Mapping[str, X], Annotated[X, 'description']"
)
_SECTION: Final = re.compile(r"^(?P<indent>\s*)(?P<name>[A-Z][A-Za-z ]*):\s*$")
_ARGS_HEADERS: Final = frozenset({"Args", "Arguments", "Parameters"})
_ARG_LINE: Final = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(\([^)]*\))?\s*:\s*(?P<text>.*)$")
_SEQUENCES: Final = frozenset(
    {list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable}
)
_SETS: Final = frozenset({set, frozenset, collections.abc.Set, collections.abc.MutableSet})
_MAPPINGS: Final = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})


@final
@attrs.frozen
class ToolParameter:
    """One parameter the model fills in: its name, Python type and whether it may be omitted."""

    name: str
    """The parameter (and JSON property) name."""
    annotation: object
    """The resolved Python type the JSON value is structured into."""
    required: bool
    """Whether the parameter has no default."""
    positional_only: bool = False
    """Whether it must be passed by position."""


@final
@attrs.frozen(kw_only=True)
class ParsedFunction:
    """What :func:`parse_function` learned from a function."""

    description: str
    """The first paragraph of the docstring, on one line ("" when there is no docstring)."""
    parameters: JsonObject
    """The JSON Schema of the arguments object."""
    fields: tuple[ToolParameter, ...]
    """The parameters the model fills in, in signature order."""
    context_parameter: str | None
    """The name of the parameter that receives the ``ToolContext``, if any."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the summary paragraph and parameter descriptions.

    Args:
        doc (str | None): the raw docstring (indentation is cleaned here).

    Returns:
        The first paragraph joined into one line, and a mapping from parameter name to
        its description from the ``Args:`` (or ``Arguments:``/``Parameters:``) section,
        continuation lines joined.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    in_args = False
    header_indent = 0
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        section = _SECTION.match(line)
        if section is not None and (not in_args or indent <= header_indent):
            in_args = section["name"] in _ARGS_HEADERS
            header_indent = indent
            entry_indent = None
            current = None
            continue
        if not in_args or not line.strip():
            continue
        if indent <= header_indent:
            in_args = False
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(line.strip())
        if indent == entry_indent and match is not None:
            current = match["name"]
            described[current] = match["text"].strip()
        elif current is not None:
            described[current] = f"{described[current]} {line.strip()}".strip()
    return " ".join(summary), described


def parse_function(
    function: Callable[..., object], *, context_type: type, what: str | None = None
) -> ParsedFunction:
    """Build the JSON Schema of a function's parameters from its signature and docstring.

    Each parameter becomes a property; parameters without a default are required. The
    parameter annotated with ``context_type`` (the ``ToolContext``) is left out: the runtime
    passes it, never the model.

    Args:
        function (Callable[..., object]): the tool function.
        context_type (type): the class whose annotation marks the context parameter.
        what (str | None): how to name the function in messages (defaults to its name).

    Returns:
        The description, the schema, the parameters and the context parameter's name.

    Raises:
        ToolDefinitionError: a parameter has no annotation or an unsupported one, is
            ``*args``/``**kwargs``, the type hints do not resolve, or the docstring
            documents a parameter the function does not have.
    """
    label = what or str(getattr(function, "__qualname__", repr(function)))
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"cannot resolve the type hints of {label}: {type(exc).__name__}: {exc} "
            "(define the types at module level)"
        ) from exc
    signature = inspect.signature(function)
    description, documented = parse_docstring(inspect.getdoc(function))
    unknown = sorted(set(documented) - set(signature.parameters))
    if unknown:
        raise ToolDefinitionError(
            f"the docstring of {label} documents {', '.join(map(repr, unknown))}, "
            "which the function does not have"
        )
    builder = _SchemaBuilder(label)
    properties: dict[str, JsonValue] = {}
    required: list[JsonValue] = []
    fields: list[ToolParameter] = []
    context_parameter: str | None = None
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{label}: parameter {name!r} is *args/**kwargs; a tool needs named parameters"
            )
        if name not in hints:
            raise ToolDefinitionError(f"{label}: parameter {name!r} has no type annotation")
        annotation = hints[name]
        if is_context_annotation(annotation, context_type):
            context_parameter = name
            continue
        schema = builder.schema(annotation, f"parameter {name!r}")
        if name in documented and "description" not in schema:
            schema = {**schema, "description": documented[name]}
        has_default = param.default is not param.empty
        if has_default:
            default = _json_default(param.default)
            if default is not _NO_DEFAULT:
                schema = {**schema, "default": typing.cast(JsonValue, default)}
        else:
            required.append(name)
        properties[name] = schema
        fields.append(
            ToolParameter(
                name, annotation, not has_default, param.kind is param.POSITIONAL_ONLY
            )
        )
    parameters: JsonObject = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return ParsedFunction(
        description=description,
        parameters=parameters,
        fields=tuple(fields),
        context_parameter=context_parameter,
    )


def is_context_annotation(annotation: object, context_type: type) -> bool:
    """Whether a parameter annotation asks for the context (``ToolContext`` or an Optional of it).

    Args:
        annotation (object): a resolved annotation.
        context_type (type): the context class.

    Returns:
        ``True`` for ``context_type``, an ``Optional`` of it, or an ``Annotated`` of either.
    """
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation is context_type:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return set(get_args(annotation)) == {context_type, type(None)}
    return False


_NO_DEFAULT: Final = object()
_DEFAULTS = make_converter()


def _json_default(value: object) -> object:
    """Return a default as JSON, or ``_NO_DEFAULT`` when it has no JSON form."""
    try:
        plain = _DEFAULTS.unstructure(value)
        return orjson.loads(orjson.dumps(plain))
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return _NO_DEFAULT


def _type_name(tp: object) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def _own_doc(cls: type) -> str:
    """The summary of a class's own docstring (not an inherited or generated one)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or (attrs.has(cls) and doc.startswith(f"{cls.__name__}(")):
        return ""
    return parse_docstring(doc)[0]


class _SchemaBuilder:
    """Maps Python annotations to JSON Schema, remembering the classes being expanded."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.expanding: list[type] = []

    def fail(self, where: str, message: str) -> ToolDefinitionError:
        return ToolDefinitionError(f"{self.label}: {where}: {message}")

    def schema(self, tp: object, where: str) -> dict[str, JsonValue]:
        origin = get_origin(tp)
        args = get_args(tp)
        if origin is Annotated:
            inner = self.schema(args[0], where)
            notes = [a for a in args[1:] if isinstance(a, str)]
            return {**inner, "description": " ".join(notes)} if notes else inner
        if tp is Any or tp is object:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        scalar = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
            tp if isinstance(tp, type) else type(None)
        )
        if scalar is not None:
            return {"type": scalar}
        if origin is Literal:
            return self._literal(args, where)
        if origin is Union or origin is types.UnionType:
            return self._union(args, where)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return self._enum(tp, where)
        if isinstance(tp, type) and attrs.has(tp):
            return self._attrs(tp, where)
        container = origin if origin is not None else tp
        if container in _SEQUENCES or container in _SETS:
            items = self.schema(args[0], f"{where} items") if args else {}
            out: dict[str, JsonValue] = {"type": "array", "items": items}
            if container in _SETS:
                out["uniqueItems"] = True
            return out
        if container is tuple:
            return self._tuple(args, where)
        if container in _MAPPINGS:
            if args and args[0] is not str:
                raise self.fail(
                    where, f"mapping keys must be str (JSON object keys), got {_type_name(args[0])}"
                )
            values = self.schema(args[1], f"{where} values") if args else {}
            return {"type": "object", "additionalProperties": values}
        raise self.fail(where, f"unsupported type {_type_name(tp)}; supported: {_SUPPORTED}")

    def _literal(self, values: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        kinds: list[JsonValue] = []
        for value in values:
            kind = {bool: "boolean", int: "integer", str: "string", type(None): "null"}.get(
                type(value)
            )
            if kind is None:
                raise self.fail(
                    where, f"Literal values must be str, int, bool or None, got {value!r}"
                )
            if kind not in kinds:
                kinds.append(kind)
        enum_values: list[JsonValue] = [typing.cast(JsonValue, v) for v in values]
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": enum_values}

    def _union(self, members: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        schemas = [self.schema(m, where) for m in members if m is not type(None)]
        nullable = type(None) in members
        if nullable and len(schemas) == 1:
            only = schemas[0]
            kind = only.get("type")
            if isinstance(kind, str) and "enum" not in only:
                return {**only, "type": [kind, "null"]}
            if isinstance(kind, str) and isinstance(only.get("enum"), list):
                enum_values = typing.cast(list[JsonValue], only["enum"])
                return {**only, "type": [kind, "null"], "enum": [*enum_values, None]}
        options: list[JsonValue] = list(schemas)
        if nullable:
            options.append({"type": "null"})
        return {"anyOf": options}

    def _enum(self, cls: type[enum.Enum], where: str) -> dict[str, JsonValue]:
        values: list[JsonValue] = []
        for member in cls:
            if not isinstance(member.value, str | int) or isinstance(member.value, bool):
                raise self.fail(
                    where,
                    f"enum {cls.__qualname__} has a member {member.name} whose value "
                    f"{member.value!r} is not a str or an int",
                )
            values.append(member.value)
        kinds = {type(v) for v in values}
        out: dict[str, JsonValue] = {"enum": values}
        if kinds == {str}:
            out["type"] = "string"
        elif kinds == {int}:
            out["type"] = "integer"
        description = _own_doc(cls)
        if description:
            out["description"] = description
        return out

    def _tuple(self, args: tuple[object, ...], where: str) -> dict[str, JsonValue]:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.schema(args[0], f"{where} items")}
        if not args:
            return {"type": "array"}
        if args == ((),):  # tuple[()]
            return {"type": "array", "maxItems": 0}
        prefix: list[JsonValue] = [
            self.schema(a, f"{where} item {i}") for i, a in enumerate(args)
        ]
        return {
            "type": "array",
            "prefixItems": prefix,
            "items": False,
            "minItems": len(args),
            "maxItems": len(args),
        }

    def _attrs(self, cls: type, where: str) -> dict[str, JsonValue]:
        if cls in self.expanding:
            raise self.fail(
                where,
                f"attrs class {cls.__qualname__} refers to itself; recursive types are not "
                "supported in tool parameters",
            )
        try:
            attrs.resolve_types(cls)
        except Exception as exc:
            raise self.fail(
                where, f"cannot resolve the field types of {cls.__qualname__}: {exc}"
            ) from exc
        self.expanding.append(cls)
        try:
            properties: dict[str, JsonValue] = {}
            required: list[JsonValue] = []
            for field in attrs.fields(cls):
                if not field.init:
                    continue
                if field.type is None:
                    raise self.fail(
                        where, f"field {cls.__qualname__}.{field.name} has no type annotation"
                    )
                schema = self.schema(field.type, f"field {cls.__qualname__}.{field.name}")
                note = field.metadata.get("description")
                if isinstance(note, str) and "description" not in schema:
                    schema = {**schema, "description": note}
                if field.default is attrs.NOTHING:
                    required.append(field.name)
                elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]  # attrs.Factory is a class at runtime
                    default = _json_default(field.default)
                    if default is not _NO_DEFAULT:
                        schema = {**schema, "default": typing.cast(JsonValue, default)}
                properties[field.name] = schema
        finally:
            self.expanding.pop()
        out: dict[str, JsonValue] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        description = _own_doc(cls)
        if description:
            out["description"] = description
        return out
