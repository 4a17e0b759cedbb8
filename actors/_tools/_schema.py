"""Turn a Python function's signature and docstring into a tool's JSON Schema."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Final, Union, final, get_args, get_origin

import attrs

from protocols import JsonObject, JsonValue
from protocols.errors import ToolDefinitionError
from protocols.lowlevel import SchemaBuilder, json_value_of, parse_docstring

_NO_DEFAULT: Final = json_value_of(object())
"""What :func:`json_value_of` returns for a value with no JSON form."""

__all__ = [
    "ParsedFunction",
    "ToolParameter",
    "is_context_annotation",
    "parse_docstring",
    "parse_function",
]


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
    builder = SchemaBuilder(label)
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
            default = json_value_of(param.default)
            if default is not _NO_DEFAULT:
                schema = {**schema, "default": typing.cast(JsonValue, default)}
        else:
            required.append(name)
        properties[name] = schema
        fields.append(
            ToolParameter(name, annotation, not has_default, param.kind is param.POSITIONAL_ONLY)
        )
    parameters: JsonObject = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    defs = builder.defs()
    if defs:
        parameters["$defs"] = defs
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
