"""JSON-Schema validation (draft 2020-12, older drafts by ``$schema``) that reports every path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NoReturn, final

import attrs
import jsonschema_rs

from ._jsonschema_messages import messages, show
from .errors import SchemaRemoteRefError, ToolDefinitionError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CompiledSchema",
    "check_schema",
    "compile_schema",
    "schema_problems",
    "validate_json",
]

_Factory = type[jsonschema_rs.Validator]

_DRAFTS: Final[dict[str, _Factory]] = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema_rs.Draft202012Validator,
    "https://json-schema.org/draft/2019-09/schema": jsonschema_rs.Draft201909Validator,
    "http://json-schema.org/draft-07/schema": jsonschema_rs.Draft7Validator,
    "http://json-schema.org/draft-06/schema": jsonschema_rs.Draft6Validator,
    "http://json-schema.org/draft-04/schema": jsonschema_rs.Draft4Validator,
}
"""The meta-schemas the library carries, by URI (without the empty ``#`` fragment)."""

_DEFAULT_DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"

# Keywords whose values are schemas, used only to read the pre-2020 tuple form.
_ONE_SCHEMA: Final = (
    "additionalProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "items",
)
_SCHEMA_LISTS: Final = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS: Final = (
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
)

_meta_validators: dict[str, jsonschema_rs.Validator] = {}


@final
@attrs.frozen
class CompiledSchema:
    """A schema checked once and compiled, ready to validate many values.

    Validation is done by jsonschema-rs, a complete implementation of JSON Schema draft
    2020-12 (and of the older drafts a ``$schema`` names). Every problem is reported,
    each with the JSON path of the offending value (``$.items[2].city``), so a model can
    fix all its mistakes in one retry.
    """

    schema: object
    """The schema as given (a JSON object or a boolean)."""
    _validator: jsonschema_rs.Validator = attrs.field(alias="validator", repr=False, eq=False)
    _resolved: object = attrs.field(alias="resolved", repr=False, eq=False)

    def problems(self, value: object) -> tuple[str, ...]:
        """Validate ``value`` and return what is wrong with it.

        Args:
            value (object): a decoded JSON value (dicts, lists, str, int, float, bool, None).

        Returns:
            One message per problem, like ``"$.city: expected string, got 42"``; empty when
            the value is valid. A value JSON cannot hold (bytes, a date, a non-string
            key) is one problem at ``$``.
        """
        try:
            if self._validator.is_valid(value):
                return ()
            return messages(self._validator.iter_errors(value), self._resolved, value)
        except ValueError as exc:
            return (f"$: not a JSON value: {exc}",)

    def is_valid(self, value: object) -> bool:
        """Whether ``value`` satisfies the schema.

        Args:
            value (object): a decoded JSON value.

        Returns:
            ``True`` when there is no problem.
        """
        try:
            return self._validator.is_valid(value)
        except ValueError:
            return False


def compile_schema(schema: object) -> CompiledSchema:
    """Check that ``schema`` is well-formed and compile it into a validator.

    Schemas are read as draft 2020-12 unless their ``$schema`` names an older draft. One
    leniency: a schema without ``$schema`` may use the pre-2020 tuple form (``items`` as an
    array, with ``additionalItems``), read as ``prefixItems`` and ``items``.

    Args:
        schema (object): a JSON Schema: a dict, or ``True``/``False``.

    Returns:
        The compiled validator.

    Raises:
        SchemaRemoteRefError: the schema refers to another document (a ``$ref`` to a URL
            not defined inside it, or a custom ``$schema`` meta-schema); nothing is ever
            fetched.
        ToolDefinitionError: the schema is malformed (an unknown ``type`` name, a
            ``properties`` that is not an object, a bad regular expression, a ``$ref``
            that points nowhere, ...). The message lists every problem with its location
            in the schema (``#/properties/city/type``).
    """
    try:
        return _compile(schema)
    except _Malformed as exc:
        raise ToolDefinitionError("malformed JSON schema: " + "; ".join(exc.problems)) from None


def schema_problems(schema: object) -> tuple[str, ...]:
    """List what is wrong with a schema itself, without raising.

    Args:
        schema (object): a JSON Schema.

    Returns:
        One message per problem, each starting with its location in the schema; empty
        when the schema is well-formed. A reference to another document is a problem.
    """
    try:
        _compile(schema)
    except SchemaRemoteRefError as exc:
        return (f"#: {exc.message}",)
    except _Malformed as exc:
        return exc.problems
    return ()


def check_schema(schema: object) -> None:
    """Raise if ``schema`` is malformed; see :func:`compile_schema`.

    Args:
        schema (object): a JSON Schema.

    Raises:
        SchemaRemoteRefError: the schema refers to another document.
        ToolDefinitionError: the schema is malformed; the message lists every problem.
    """
    compile_schema(schema)


def validate_json(schema: object, value: object) -> tuple[str, ...]:
    """Validate one value against a schema compiled for the occasion.

    Compile once with :func:`compile_schema` when the same schema checks many values.

    Args:
        schema (object): a JSON Schema.
        value (object): a decoded JSON value.

    Returns:
        Every problem with its JSON path; empty when valid.

    Raises:
        SchemaRemoteRefError: the schema refers to another document.
        ToolDefinitionError: the schema itself is malformed.
    """
    return compile_schema(schema).problems(value)


class _Malformed(Exception):
    """A malformed schema; carries the problems so ``schema_problems`` need not parse text."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__(problems)
        self.problems = problems


def _malformed(*problems: str) -> NoReturn:
    raise _Malformed(problems)


def _compile(schema: object) -> CompiledSchema:
    if not isinstance(schema, dict | bool):
        _malformed(f"#: a schema must be an object or a boolean, got {show(schema)}")
    draft = _DEFAULT_DRAFT
    resolved: object = schema
    if isinstance(schema, dict) and "$schema" in schema:
        declared = schema["$schema"]
        if not isinstance(declared, str):
            _malformed(f"#/$schema: must be a meta-schema URI, got {show(declared)}")
        draft = declared.removesuffix("#")
        if draft not in _DRAFTS:
            raise SchemaRemoteRefError(declared)
    else:
        resolved = _read_tuple_form(schema)
    assert isinstance(resolved, dict | bool)  # the rewrite keeps a schema's kind
    meta = _meta_validator(draft)
    problems = messages(meta.iter_errors(resolved), resolved, resolved, pointer=True)
    if problems:
        _malformed(*problems)
    wanted: list[str] = []
    retrieve = _refuse_retrieval(wanted)
    try:
        validator = _DRAFTS[draft](resolved, retriever=retrieve, validate_formats=False)
    except jsonschema_rs.ValidationError as exc:
        if wanted:
            raise SchemaRemoteRefError(wanted[0]) from None
        _malformed(*_construction_problems(exc, resolved))
    except ValueError as exc:  # a Python value JSON cannot hold, e.g. a non-string key
        _malformed(f"#: not a JSON value: {exc}")
    return CompiledSchema(schema, validator=validator, resolved=resolved)


def _meta_validator(draft: str) -> jsonschema_rs.Validator:
    if draft not in _meta_validators:
        _meta_validators[draft] = _DRAFTS[draft]({"$ref": draft})
    return _meta_validators[draft]


def _refuse_retrieval(wanted: list[str]) -> Callable[[str], NoReturn]:
    """A retriever that records what the schema wanted and fetches nothing."""

    def retrieve(uri: str) -> NoReturn:
        wanted.append(uri)
        msg = f"remote schemas are never fetched: {uri}"
        raise LookupError(msg)

    return retrieve


def _construction_problems(error: jsonschema_rs.ValidationError, root: object) -> tuple[str, ...]:
    """Problems the meta-schema cannot see: references to nowhere, bad regular expressions."""
    if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Referencing):
        reason = error.kind.error.message
        for where, ref in _references(root, "#"):
            target = ref.split("#", 1)[-1]
            if target and f"'{target}'" in reason:
                return (f"{where}: reference {ref!r} points to nothing in this schema",)
        return (f"#: {reason}",)
    return messages([error], root, root, pointer=True)


def _references(node: object, where: str) -> list[tuple[str, str]]:
    """Every ``$ref`` and ``$dynamicRef`` in a schema document, with its location."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            at = f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                found.append((at, value))
            else:
                found.extend(_references(value, at))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_references(value, f"{where}/{i}"))
    return found


def _read_tuple_form(node: object) -> object:
    """Rewrite ``items: [...]`` and ``additionalItems`` as 2020-12's ``prefixItems``/``items``.

    Only schemas that declare no ``$schema`` are rewritten; a draft-07 schema that says
    so is validated by the draft-07 rules instead. Returns the node itself when nothing
    changes, so most schemas are not copied.
    """
    if not isinstance(node, dict):
        return node
    out: dict[str, object] = {}
    changed = False

    def sub(value: object) -> object:
        nonlocal changed
        new = _read_tuple_form(value)
        changed = changed or new is not value
        return new

    convert: Callable[[object], object] = sub
    for key, value in node.items():
        if key == "items" and isinstance(value, list) and "prefixItems" not in node:
            changed = True
            out["prefixItems"] = [convert(v) for v in value]
            if "additionalItems" in node:
                out["items"] = convert(node["additionalItems"])
        elif key == "additionalItems" and isinstance(node.get("items"), list):
            continue
        elif key in _ONE_SCHEMA:
            out[key] = convert(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [convert(v) for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: convert(v) for k, v in value.items()}
        else:
            out[key] = value
    return out if changed else node
