"""Turn the validator's errors into short messages that name a JSON path and what to fix."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import jsonschema_rs

__all__ = ["child_path", "messages", "show"]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_PROBLEM: Final = re.compile(r"(?P<path>.*): expected (?P<types>[a-z ]+), got (?P<got>.*)")
_JSON_TYPES: Final = ("null", "boolean", "integer", "number", "string", "array", "object")
_MISSING: Final = object()

_Part = str | int


def show(value: object) -> str:
    """Render a value for a message: scalars as JSON, containers by kind, long text cut."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def child_path(path: str, key: str | int) -> str:
    """The JSON path of one member: ``$.city``, ``$["a b"]`` or ``$[2]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _pointer_path(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _canon(value: object) -> object:
    """A hashable key with JSON equality: ``1 == 1.0``, ``true != 1``, key order ignored."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z",)
    if isinstance(value, list | tuple):
        return ("a", tuple(_canon(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((str(k), _canon(v)) for k, v in value.items()))
    return ("x", repr(value))


def _lookup(root: object, parts: Sequence[_Part]) -> object:
    """The schema node at ``parts``, or ``_MISSING`` (e.g. inside an embedded resource)."""
    node = root
    for part in parts:
        if isinstance(node, dict) and str(part) in node:
            node = node[str(part)]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


def messages(
    errors: Iterable[jsonschema_rs.ValidationError],
    root: object,
    instance: object,
    *,
    pointer: bool = False,
) -> tuple[str, ...]:
    """One message per problem, deduplicated, in the validator's order.

    Args:
        errors (Iterable[jsonschema_rs.ValidationError]): what the validator found.
        root (object): the schema the errors come from, to name allowed properties.
        instance (object): the value checked; messages follow the order of its keys.
        pointer (bool): write locations as JSON pointers (``#/properties/a``), for
            problems in a schema, instead of JSON paths (``$.a``).

    Returns:
        The messages, such as ``"$.city: expected string, got 42"``.
    """
    found: dict[str, None] = {}
    # Document order, so messages do not depend on the order the library checks keywords.
    for error in sorted(errors, key=lambda e: _document_order(e, instance)):
        for message in _Renderer(root, pointer).describe(error):
            found.setdefault(message)
    return tuple(found)


class _Renderer:
    """Words one error; the wording matches what powertrio said before it used jsonschema-rs."""

    def __init__(self, root: object, pointer: bool) -> None:
        self.root = root
        self.start = "#" if pointer else "$"
        self.join = _pointer_path if pointer else child_path

    def path(self, parts: Sequence[_Part]) -> str:
        where = self.start
        for part in parts:
            where = self.join(where, part)
        return where

    def describe(self, error: jsonschema_rs.ValidationError) -> Iterator[str]:  # noqa: PLR0915
        kind = error.kind
        at = self.path(error.instance_path)
        value = error.instance
        schema_path = error.schema_path
        got = show(value)
        match kind:
            case jsonschema_rs.ValidationErrorKind.Type():
                if self.start == "#" and sorted(kind.types) == ["boolean", "object"]:
                    yield f"{at}: a schema must be an object or a boolean, got {got}"
                else:
                    yield f"{at}: expected {self._types(schema_path, kind.types)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.Required():
                where = self.join(at, kind.property)
                trigger = self._trigger(schema_path, kind.property, value)
                if trigger is None:
                    yield f"{where}: missing required property"
                else:
                    yield f"{where}: missing, required when {trigger!r} is present"
            case jsonschema_rs.ValidationErrorKind.AdditionalProperties():
                allowed = self._allowed(schema_path)
                for name in kind.unexpected:
                    yield f"{self.join(at, name)}: unexpected property (allowed: {allowed})"
            case jsonschema_rs.ValidationErrorKind.UnevaluatedProperties():
                for name in kind.unexpected:
                    yield f"{self.join(at, name)}: unexpected property"
            case jsonschema_rs.ValidationErrorKind.UnevaluatedItems():
                # The library names the extra items by value, not by index.
                for item in kind.unexpected:
                    yield f"{at}: unexpected item {item}"
            case jsonschema_rs.ValidationErrorKind.AdditionalItems():
                count = len(value) if isinstance(value, list | tuple) else kind.limit
                for index in range(kind.limit, count):
                    yield f"{self.join(at, index)}: no value is allowed here"
            case jsonschema_rs.ValidationErrorKind.FalseSchema():
                yield f"{at}: no value is allowed here"
            case jsonschema_rs.ValidationErrorKind.Enum():
                options = kind.options if isinstance(kind.options, list) else [kind.options]
                shown = ", ".join(show(o) for o in options[:20])
                if len(options) > 20:
                    shown += ", ..."
                yield f"{at}: must be one of {shown}, got {got}"
            case jsonschema_rs.ValidationErrorKind.Constant():
                yield f"{at}: must be {show(kind.expected_value)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.Minimum():
                yield f"{at}: must be >= {show(kind.limit)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.Maximum():
                yield f"{at}: must be <= {show(kind.limit)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.ExclusiveMinimum():
                yield f"{at}: must be > {show(kind.limit)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.ExclusiveMaximum():
                yield f"{at}: must be < {show(kind.limit)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.MultipleOf():
                yield f"{at}: must be a multiple of {show(kind.multiple_of)}, got {got}"
            case jsonschema_rs.ValidationErrorKind.MinLength():
                yield f"{at}: must be at least {kind.limit} characters long, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.MaxLength():
                yield f"{at}: must be at most {kind.limit} characters long, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.Pattern():
                yield f"{at}: must match the pattern {kind.pattern!r}, got {got}"
            case jsonschema_rs.ValidationErrorKind.MinItems():
                yield f"{at}: must have at least {kind.limit} items, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.MaxItems():
                yield f"{at}: must have at most {kind.limit} items, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.MinProperties():
                yield f"{at}: must have at least {kind.limit} properties, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.MaxProperties():
                yield f"{at}: must have at most {kind.limit} properties, got {_size(value)}"
            case jsonschema_rs.ValidationErrorKind.UniqueItems():
                yield from self._duplicates(at, value)
            case jsonschema_rs.ValidationErrorKind.Contains():
                yield f"{at}: {self._contains(schema_path)}"
            case jsonschema_rs.ValidationErrorKind.Not():
                yield f"{at}: must not match the schema under 'not'"
            case jsonschema_rs.ValidationErrorKind.PropertyNames():
                inner = kind.error
                name = inner.instance if isinstance(inner.instance, str) else "?"
                for message in self.describe(inner):
                    yield self.join(at, name) + message[len(self.start) :]
            case jsonschema_rs.ValidationErrorKind.OneOfMultipleValid():
                matched = ", ".join(f"[{i}]" for i, found in enumerate(kind.context) if not found)
                yield f"{at}: must match exactly one schema in oneOf, but matches {matched}"
            case jsonschema_rs.ValidationErrorKind.AnyOf() | (
                jsonschema_rs.ValidationErrorKind.OneOfNotValid()
            ):
                yield self._no_match(at, kind.name, kind.context, error)
            case jsonschema_rs.ValidationErrorKind.Format():
                if kind.format == "regex":
                    yield f"{at}: invalid regular expression {got}"
                else:
                    yield f"{at}: must be a valid {kind.format}, got {got}"
            case _:
                # Content and encoding checks, referencing and regex-engine failures: the
                # library's own words, first line only.
                yield f"{at}: {error.message.splitlines()[0]}"

    def _types(self, schema_path: Sequence[_Part], types: Sequence[str]) -> str:
        # The schema's own order ("string or null"), not the library's sorted one.
        declared = _lookup(self.root, schema_path)
        names = [declared] if isinstance(declared, str) else declared
        if isinstance(names, list) and sorted(map(str, names)) == sorted(types):
            return " or ".join(map(str, names))
        return " or ".join(types)

    def _trigger(self, schema_path: Sequence[_Part], missing: str, value: object) -> str | None:
        """For ``dependentRequired`` (``dependencies`` before 2019-09): the present name."""
        if not schema_path or schema_path[-1] not in ("dependentRequired", "dependencies"):
            return None
        rules = _lookup(self.root, schema_path)
        if not isinstance(rules, dict) or not isinstance(value, dict):
            return None
        for name, needs in rules.items():
            if name in value and isinstance(needs, list) and missing in needs:
                return str(name)
        return None

    def _allowed(self, schema_path: Sequence[_Part]) -> str:
        known = _lookup(self.root, [*schema_path[:-1], "properties"])
        return ", ".join(known) if isinstance(known, dict) and known else "none"

    def _contains(self, schema_path: Sequence[_Part]) -> str:
        node = _lookup(self.root, schema_path[:-1])
        bounds = node if isinstance(node, dict) else {}
        if schema_path and schema_path[-1] == "maxContains":
            return f"must contain at most {bounds.get('maxContains', '?')} matching item(s)"
        return f"must contain at least {bounds.get('minContains', 1)} matching item(s)"

    def _duplicates(self, at: str, value: object) -> Iterator[str]:
        seen: dict[object, int] = {}
        for i, item in enumerate(value if isinstance(value, list | tuple) else ()):
            key = _canon(item)
            if key in seen:
                yield (
                    f"{self.join(at, i)}: items must be unique, but this one equals "
                    f"{self.join(at, seen[key])}"
                )
            else:
                seen[key] = i

    def _no_match(
        self,
        at: str,
        keyword: str,
        context: Sequence[Sequence[jsonschema_rs.ValidationError]],
        error: jsonschema_rs.ValidationError,
    ) -> str:
        """Say why no alternative matched; plain type mismatches merge into one line."""
        failures = [[m for e in found for m in self.describe(e)] for found in context]
        if self.start == "#" and error.schema_path[-3:] == ["properties", "type", "anyOf"]:
            return f"{at}: {_bad_type(error.instance)}"
        merged: list[str] = []
        got = None
        for found in failures:
            match = _TYPE_PROBLEM.fullmatch(found[0]) if len(found) == 1 else None
            if match is None or match["path"] != at or got not in (None, match["got"]):
                break
            got = match["got"]
            merged.extend(t for t in match["types"].split(" or ") if t not in merged)
        else:
            if got is not None:
                return f"{at}: expected {' or '.join(merged)}, got {got}"
        details = " | ".join(f"[{i}] " + "; ".join(found) for i, found in enumerate(failures))
        return f"{at}: matches no schema in {keyword}: {details}"


def _bad_type(value: object) -> str:
    """The problem with a schema's ``type``: the commonest mistake gets the clearest words."""
    names = [value] if isinstance(value, str) else value
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        unknown = [n for n in names if n not in _JSON_TYPES]
        if unknown:
            return f"unknown type {unknown[0]!r}; use one of {', '.join(_JSON_TYPES)}"
        return "type names must be unique"
    return f"must be a type name or a non-empty list of them, got {show(value)}"


def _document_order(error: jsonschema_rs.ValidationError, instance: object) -> list[int]:
    """Sort key: where the named value sits in the checked document (keys in their order).

    A missing property sorts after the keys present; a missing or extra property is named
    at its own path, so it sorts there.
    """
    parts: list[_Part] = list(error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        parts.append(kind.property)
    elif (
        isinstance(
            kind,
            jsonschema_rs.ValidationErrorKind.AdditionalProperties
            | jsonschema_rs.ValidationErrorKind.UnevaluatedProperties,
        )
        and kind.unexpected
    ):
        parts.append(kind.unexpected[0])
    key: list[int] = []
    node = instance
    for part in parts:
        if isinstance(node, dict):
            keys = list(node)
            key.append(keys.index(part) if part in node else len(keys))
            node = node.get(part)
        elif isinstance(node, list | tuple) and isinstance(part, int):
            key.append(part)
            node = node[part] if 0 <= part < len(node) else None
        else:
            key.append(0)
            node = None
    return key


def _size(value: object) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else 0
