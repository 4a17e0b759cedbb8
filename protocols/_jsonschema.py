"""A small JSON-Schema (draft 2020-12 subset) validator that reports every problem with its path."""

from __future__ import annotations

import re
from typing import Final, final

import attrs

from ._jsonschema_keywords import (
    Check,
    compile_arrays,
    compile_combinators,
    compile_numbers,
    compile_objects,
    compile_strings,
    compile_type,
    compile_values,
    is_count,
    is_number,
    noop,
    pointer_part,
    show,
)
from .errors import ToolDefinitionError

__all__ = [
    "CompiledSchema",
    "check_schema",
    "compile_schema",
    "schema_problems",
    "validate_json",
]

# Keywords that change what validates but that this subset does not implement: refusing
# them beats silently accepting values the schema author meant to reject.
_UNSUPPORTED: Final = frozenset(
    {"$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems"}
)


@final
@attrs.frozen
class CompiledSchema:
    """A schema checked once and turned into closures, ready to validate many values.

    Compiling walks the schema a single time, so validating a value costs only the checks
    that apply to it. Every problem is reported, each with the JSON path of the offending
    value (``$.items[2].city``), so a model can fix all its mistakes in one retry.
    """

    schema: object
    """The schema as given (a JSON object or a boolean)."""
    _check: Check = attrs.field(alias="check", repr=False, eq=False)

    def problems(self, value: object) -> tuple[str, ...]:
        """Validate ``value`` and return what is wrong with it.

        Args:
            value (object): a decoded JSON value (dicts, lists, str, int, float, bool, None).

        Returns:
            One message per problem, like ``"$.city: expected string, got 42"``; empty when
            the value is valid.
        """
        found: list[str] = []
        self._check(value, "$", found)
        return tuple(found)

    def is_valid(self, value: object) -> bool:
        """Whether ``value`` satisfies the schema.

        Args:
            value (object): a decoded JSON value.

        Returns:
            ``True`` when there is no problem.
        """
        return not self.problems(value)


def compile_schema(schema: object) -> CompiledSchema:
    """Check that ``schema`` is well-formed and compile it into a validator.

    Args:
        schema (object): a JSON Schema: a dict, or ``True``/``False``.

    Returns:
        The compiled validator.

    Raises:
        ToolDefinitionError: the schema is malformed (an unknown ``type`` name, a
            ``properties`` that is not an object, a bad regular expression, a ``$ref``
            that points nowhere, an unsupported keyword, ...). The message lists every
            problem with its location in the schema (``#/properties/city/type``).
    """
    compiler = _Compiler(schema)
    check = compiler.compile(schema, "#", frozenset())
    if compiler.problems:
        raise ToolDefinitionError("malformed JSON schema: " + "; ".join(compiler.problems))
    return CompiledSchema(schema, check=check)


def schema_problems(schema: object) -> tuple[str, ...]:
    """List what is wrong with a schema itself, without raising.

    Args:
        schema (object): a JSON Schema.

    Returns:
        One message per problem, each starting with its location in the schema; empty
        when the schema is well-formed.
    """
    compiler = _Compiler(schema)
    compiler.compile(schema, "#", frozenset())
    return tuple(compiler.problems)


def check_schema(schema: object) -> None:
    """Raise if ``schema`` is malformed; see :func:`compile_schema`.

    Args:
        schema (object): a JSON Schema.

    Raises:
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
        ToolDefinitionError: the schema itself is malformed.
    """
    return compile_schema(schema).problems(value)


class _Compiler:
    """Turns one schema document into checks, collecting the schema's own problems."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.problems: list[str] = []
        self.refs: dict[str, Check] = {}

    # -- helpers, shared with the keyword compilers in _jsonschema_keywords --------------

    def bad(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def schema_list(
        self, value: object, where: str, chain: frozenset[str]
    ) -> list[Check] | None:
        if not isinstance(value, list) or not value:
            self.bad(where, "must be a non-empty array of schemas")
            return None
        return [self.compile(item, f"{where}/{i}", chain) for i, item in enumerate(value)]

    def schema_map(self, value: object, where: str) -> dict[str, Check] | None:
        if not isinstance(value, dict):
            self.bad(where, f"must be an object mapping names to schemas, got {show(value)}")
            return None
        return {
            str(k): self.compile(v, f"{where}/{pointer_part(str(k))}", frozenset())
            for k, v in value.items()
        }

    def regex(self, value: object, where: str) -> re.Pattern[str] | None:
        if not isinstance(value, str):
            self.bad(where, f"must be a regular expression string, got {show(value)}")
            return None
        try:
            return re.compile(value)
        except re.error as exc:
            self.bad(where, f"invalid regular expression {value!r}: {exc}")
            return None

    def count(self, node: dict[str, object], key: str, where: str) -> int | None:
        if key not in node:
            return None
        value = node[key]
        if not is_count(value):
            self.bad(f"{where}/{key}", f"must be a non-negative integer, got {show(value)}")
            return None
        assert isinstance(value, int)
        return value

    def number(self, node: dict[str, object], key: str, where: str) -> float | None:
        if key not in node:
            return None
        value = node[key]
        if not is_number(value):
            self.bad(f"{where}/{key}", f"must be a number, got {show(value)}")
            return None
        assert isinstance(value, int | float)
        return value

    def _resolve(self, ref: str) -> tuple[bool, object]:
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            return False, None
        node: object = self.root
        for raw in pointer.split("/")[1:]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return False, None
        return True, node

    def _ref(self, ref: object, where: str, chain: frozenset[str]) -> Check:
        if not isinstance(ref, str):
            self.bad(where, f"must be a string, got {show(ref)}")
            return noop
        if not ref.startswith("#"):
            self.bad(where, f"only local references ('#/$defs/...') are supported, got {ref!r}")
            return noop
        if ref in chain:
            self.bad(where, f"reference cycle through {ref!r} never reaches a value")
            return noop
        if ref in self.refs:
            return self.refs[ref]
        cell: list[Check] = []

        def check(value: object, path: str, problems: list[str]) -> None:
            cell[0](value, path, problems)

        self.refs[ref] = check
        found, target = self._resolve(ref)
        if not found:
            self.bad(where, f"reference {ref!r} points to nothing in this schema")
            cell.append(noop)
        else:
            cell.append(self.compile(target, ref, chain | {ref}))
        return check

    # -- the walk -----------------------------------------------------------------------

    def compile(self, node: object, where: str, chain: frozenset[str]) -> Check:
        """Compile one schema node found at ``where``.

        ``chain`` holds the references followed since the walk last moved into a child
        value; meeting one of them again means a cycle that would never end.
        """
        if node is True:
            return noop
        if node is False:

            def nothing(value: object, path: str, problems: list[str]) -> None:
                problems.append(f"{path}: no value is allowed here")

            return nothing
        if not isinstance(node, dict):
            self.bad(where, f"a schema must be an object or a boolean, got {show(node)}")
            return noop
        for key in sorted(_UNSUPPORTED.intersection(node)):
            self.bad(f"{where}/{key}", "this keyword is not supported")
        checks: list[Check] = []
        if "$ref" in node:
            checks.append(self._ref(node["$ref"], f"{where}/$ref", chain))
        for defs_key in ("$defs", "definitions"):
            if defs_key in node and not isinstance(node[defs_key], dict):
                self.bad(f"{where}/{defs_key}", "must be an object mapping names to schemas")
        compile_type(self, node, where, checks)
        compile_values(self, node, where, checks)
        compile_numbers(self, node, where, checks)
        compile_strings(self, node, where, checks)
        compile_arrays(self, node, where, checks)
        compile_objects(self, node, where, checks)
        compile_combinators(self, node, where, chain, checks)
        if not checks:
            return noop
        if len(checks) == 1:
            return checks[0]
        frozen = tuple(checks)

        def all_checks(value: object, path: str, problems: list[str]) -> None:
            for check in frozen:
                check(value, path, problems)

        return all_checks
