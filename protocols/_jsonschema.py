"""A small JSON-Schema (draft 2020-12 subset) validator that reports every problem with its path."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final, final

import attrs

from .errors import ToolDefinitionError

__all__ = [
    "CompiledSchema",
    "check_schema",
    "compile_schema",
    "schema_problems",
    "validate_json",
]

_Check = Callable[[object, str, list[str]], None]
"""A compiled check: ``(value, json_path, problems_out) -> None``; appends what is wrong."""

_JSON_TYPES: Final[Mapping[str, Callable[[object], bool]]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
}

# Keywords that change what validates but that this subset does not implement: refusing
# them beats silently accepting values the schema author meant to reject.
_UNSUPPORTED: Final = frozenset(
    {"$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems"}
)

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_PROBLEM: Final = re.compile(r"(?P<path>.*): expected (?P<types>[a-z ]+), got (?P<got>.*)")


def _noop(_value: object, _path: str, _problems: list[str]) -> None:
    return None


def _child_path(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _show(value: object) -> str:
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


def _is_multiple(value: float, factor: float) -> bool:
    if isinstance(value, int) and isinstance(factor, int):
        return value % factor == 0
    quotient = value / factor
    if math.isinf(quotient):
        return False
    return math.isclose(quotient, round(quotient), rel_tol=1e-9, abs_tol=1e-9)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _pointer_part(text: str) -> str:
    return text.replace("~", "~0").replace("/", "~1")


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
    _check: _Check = attrs.field(alias="check", repr=False, eq=False)

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
        self.refs: dict[str, _Check] = {}

    # -- helpers ------------------------------------------------------------------------

    def _bad(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def _schema_list(
        self, value: object, where: str, chain: frozenset[str]
    ) -> list[_Check] | None:
        if not isinstance(value, list) or not value:
            self._bad(where, "must be a non-empty array of schemas")
            return None
        return [self.compile(item, f"{where}/{i}", chain) for i, item in enumerate(value)]

    def _schema_map(self, value: object, where: str) -> dict[str, _Check] | None:
        if not isinstance(value, dict):
            self._bad(where, f"must be an object mapping names to schemas, got {_show(value)}")
            return None
        return {
            str(k): self.compile(v, f"{where}/{_pointer_part(str(k))}", frozenset())
            for k, v in value.items()
        }

    def _regex(self, value: object, where: str) -> re.Pattern[str] | None:
        if not isinstance(value, str):
            self._bad(where, f"must be a regular expression string, got {_show(value)}")
            return None
        try:
            return re.compile(value)
        except re.error as exc:
            self._bad(where, f"invalid regular expression {value!r}: {exc}")
            return None

    def _count(self, node: dict[str, object], key: str, where: str) -> int | None:
        if key not in node:
            return None
        value = node[key]
        if not _is_count(value):
            self._bad(f"{where}/{key}", f"must be a non-negative integer, got {_show(value)}")
            return None
        assert isinstance(value, int)
        return value

    def _number(self, node: dict[str, object], key: str, where: str) -> float | None:
        if key not in node:
            return None
        value = node[key]
        if not _is_number(value):
            self._bad(f"{where}/{key}", f"must be a number, got {_show(value)}")
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

    def _ref(self, ref: object, where: str, chain: frozenset[str]) -> _Check:
        if not isinstance(ref, str):
            self._bad(where, f"must be a string, got {_show(ref)}")
            return _noop
        if not ref.startswith("#"):
            self._bad(where, f"only local references ('#/$defs/...') are supported, got {ref!r}")
            return _noop
        if ref in chain:
            self._bad(where, f"reference cycle through {ref!r} never reaches a value")
            return _noop
        if ref in self.refs:
            return self.refs[ref]
        cell: list[_Check] = []

        def check(value: object, path: str, problems: list[str]) -> None:
            cell[0](value, path, problems)

        self.refs[ref] = check
        found, target = self._resolve(ref)
        if not found:
            self._bad(where, f"reference {ref!r} points to nothing in this schema")
            cell.append(_noop)
        else:
            cell.append(self.compile(target, ref, chain | {ref}))
        return check

    # -- the walk -----------------------------------------------------------------------

    def compile(self, node: object, where: str, chain: frozenset[str]) -> _Check:
        """Compile one schema node found at ``where``.

        ``chain`` holds the references followed since the walk last moved into a child
        value; meeting one of them again means a cycle that would never end.
        """
        if node is True:
            return _noop
        if node is False:

            def nothing(value: object, path: str, problems: list[str]) -> None:
                problems.append(f"{path}: no value is allowed here")

            return nothing
        if not isinstance(node, dict):
            self._bad(where, f"a schema must be an object or a boolean, got {_show(node)}")
            return _noop
        for key in sorted(_UNSUPPORTED.intersection(node)):
            self._bad(f"{where}/{key}", "this keyword is not supported")
        checks: list[_Check] = []
        if "$ref" in node:
            checks.append(self._ref(node["$ref"], f"{where}/$ref", chain))
        for defs_key in ("$defs", "definitions"):
            if defs_key in node and not isinstance(node[defs_key], dict):
                self._bad(f"{where}/{defs_key}", "must be an object mapping names to schemas")
        self._type(node, where, checks)
        self._values(node, where, checks)
        self._numbers(node, where, checks)
        self._strings(node, where, checks)
        self._arrays(node, where, checks)
        self._objects(node, where, checks)
        self._combinators(node, where, chain, checks)
        if not checks:
            return _noop
        if len(checks) == 1:
            return checks[0]
        frozen = tuple(checks)

        def all_checks(value: object, path: str, problems: list[str]) -> None:
            for check in frozen:
                check(value, path, problems)

        return all_checks

    def _type(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        if "type" not in node:
            return
        raw = node["type"]
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            self._bad(f"{where}/type", f"must be a type name or a list of them, got {_show(raw)}")
            return
        unknown = [n for n in names if n not in _JSON_TYPES]
        if unknown:
            self._bad(
                f"{where}/type",
                f"unknown type {unknown[0]!r}; use one of {', '.join(_JSON_TYPES)}",
            )
            return
        predicates = tuple(_JSON_TYPES[str(n)] for n in names)
        expected = " or ".join(str(n) for n in names)

        def check(value: object, path: str, problems: list[str]) -> None:
            for predicate in predicates:
                if predicate(value):
                    return
            problems.append(f"{path}: expected {expected}, got {_show(value)}")

        checks.append(check)

    def _values(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        if "enum" in node:
            options = node["enum"]
            if not isinstance(options, list) or not options:
                self._bad(f"{where}/enum", f"must be a non-empty array, got {_show(options)}")
            else:
                allowed = frozenset(_canon(o) for o in options)
                shown = ", ".join(_show(o) for o in options[:20])
                if len(options) > 20:
                    shown += ", ..."

                def enum(value: object, path: str, problems: list[str]) -> None:
                    if _canon(value) not in allowed:
                        problems.append(f"{path}: must be one of {shown}, got {_show(value)}")

                checks.append(enum)
        if "const" in node:
            want = _canon(node["const"])
            want_shown = _show(node["const"])

            def const(value: object, path: str, problems: list[str]) -> None:
                if _canon(value) != want:
                    problems.append(f"{path}: must be {want_shown}, got {_show(value)}")

            checks.append(const)

    def _numbers(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        bounds: list[tuple[Callable[[float, float], bool], float, str]] = []
        for key, test, words in (
            ("minimum", lambda v, b: v >= b, ">="),
            ("maximum", lambda v, b: v <= b, "<="),
            ("exclusiveMinimum", lambda v, b: v > b, ">"),
            ("exclusiveMaximum", lambda v, b: v < b, "<"),
        ):
            bound = self._number(node, key, where)
            if bound is not None:
                bounds.append((test, bound, f"must be {words} {_show(bound)}"))
        factor = self._number(node, "multipleOf", where)
        if factor is not None and factor <= 0:
            self._bad(f"{where}/multipleOf", f"must be greater than 0, got {_show(factor)}")
            factor = None
        if not bounds and factor is None:
            return
        frozen = tuple(bounds)

        def check(value: object, path: str, problems: list[str]) -> None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                return
            for test, bound, message in frozen:
                if not test(value, bound):
                    problems.append(f"{path}: {message}, got {_show(value)}")
            if factor is not None and not _is_multiple(value, factor):
                problems.append(
                    f"{path}: must be a multiple of {_show(factor)}, got {_show(value)}"
                )

        checks.append(check)

    def _strings(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        low = self._count(node, "minLength", where)
        high = self._count(node, "maxLength", where)
        pattern = self._regex(node["pattern"], f"{where}/pattern") if "pattern" in node else None
        if low is None and high is None and pattern is None:
            return

        def check(value: object, path: str, problems: list[str]) -> None:
            if not isinstance(value, str):
                return
            if low is not None and len(value) < low:
                problems.append(
                    f"{path}: must be at least {low} characters long, got {len(value)}"
                )
            if high is not None and len(value) > high:
                problems.append(
                    f"{path}: must be at most {high} characters long, got {len(value)}"
                )
            if pattern is not None and pattern.search(value) is None:
                problems.append(
                    f"{path}: must match the pattern {pattern.pattern!r}, got {_show(value)}"
                )

        checks.append(check)

    def _arrays(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        none: frozenset[str] = frozenset()
        prefix: list[_Check] = []
        rest: _Check | None = None
        if "prefixItems" in node:
            prefix = self._schema_list(node["prefixItems"], f"{where}/prefixItems", none) or []
        if "items" in node:
            items = node["items"]
            if isinstance(items, list):  # the draft-07 tuple form, still common in the wild
                prefix = self._schema_list(items, f"{where}/items", none) or []
                if "additionalItems" in node:
                    rest = self.compile(node["additionalItems"], f"{where}/additionalItems", none)
            else:
                rest = self.compile(items, f"{where}/items", none)
        low = self._count(node, "minItems", where)
        high = self._count(node, "maxItems", where)
        unique = node.get("uniqueItems", False)
        if not isinstance(unique, bool):
            self._bad(f"{where}/uniqueItems", f"must be a boolean, got {_show(unique)}")
            unique = False
        contains = self.compile(node["contains"], f"{where}/contains", none) if (
            "contains" in node
        ) else None
        min_contains = self._count(node, "minContains", where)
        max_contains = self._count(node, "maxContains", where)
        if not prefix and rest is None and low is None and high is None and not unique and (
            contains is None
        ):
            return
        head = tuple(prefix)

        def check(value: object, path: str, problems: list[str]) -> None:
            if not isinstance(value, list | tuple):
                return
            if low is not None and len(value) < low:
                problems.append(f"{path}: must have at least {low} items, got {len(value)}")
            if high is not None and len(value) > high:
                problems.append(f"{path}: must have at most {high} items, got {len(value)}")
            for i, item in enumerate(value):
                sub = head[i] if i < len(head) else rest
                if sub is not None:
                    sub(item, f"{path}[{i}]", problems)
            if unique:
                seen: dict[object, int] = {}
                for i, item in enumerate(value):
                    key = _canon(item)
                    if key in seen:
                        problems.append(
                            f"{path}[{i}]: items must be unique, but this one equals "
                            f"{path}[{seen[key]}]"
                        )
                    else:
                        seen[key] = i
            if contains is not None:
                matches = sum(1 for item in value if _passes(contains, item))
                least = 1 if min_contains is None else min_contains
                if matches < least:
                    problems.append(
                        f"{path}: must contain at least {least} matching item(s), got {matches}"
                    )
                if max_contains is not None and matches > max_contains:
                    problems.append(
                        f"{path}: must contain at most {max_contains} matching item(s), "
                        f"got {matches}"
                    )

        checks.append(check)

    def _objects(self, node: dict[str, object], where: str, checks: list[_Check]) -> None:
        none: frozenset[str] = frozenset()
        props = self._schema_map(node["properties"], f"{where}/properties") if (
            "properties" in node
        ) else None
        patterns = self._pattern_properties(node, where)
        required = self._names(node, "required", where)
        extra: _Check | None = None
        extra_false = False
        if "additionalProperties" in node:
            extra_false = node["additionalProperties"] is False
            extra = self.compile(
                node["additionalProperties"], f"{where}/additionalProperties", none
            )
        names = self.compile(node["propertyNames"], f"{where}/propertyNames", none) if (
            "propertyNames" in node
        ) else None
        dependent: dict[str, tuple[str, ...]] = {}
        raw_dep = node.get("dependentRequired", {})
        if not isinstance(raw_dep, dict):
            self._bad(f"{where}/dependentRequired", "must map names to arrays of names")
        else:
            dependent = {
                str(k): self._names(raw_dep, str(k), f"{where}/dependentRequired")
                for k in raw_dep
            }
        self._property_counts(node, where, checks)
        if not (props or patterns or required or extra or names or dependent):
            return
        known = props or {}
        prop_items = tuple(known.items())
        pattern_items = tuple(patterns)
        allowed = ", ".join(known) or "none"

        def check(value: object, path: str, problems: list[str]) -> None:
            if not isinstance(value, dict):
                return
            for name in required:
                if name not in value:
                    problems.append(f"{_child_path(path, name)}: missing required property")
            for name, sub in prop_items:
                if name in value:
                    sub(value[name], _child_path(path, name), problems)
            if pattern_items or extra is not None or names is not None:
                for key, item in value.items():
                    text = str(key)
                    at = _child_path(path, text)
                    if names is not None:
                        names(text, at, problems)
                    matched = text in known
                    for regex, sub in pattern_items:
                        if regex.search(text):
                            matched = True
                            sub(item, at, problems)
                    if not matched and extra is not None:
                        if extra_false:
                            problems.append(f"{at}: unexpected property (allowed: {allowed})")
                        else:
                            extra(item, at, problems)
            for name, needs in dependent.items():
                if name in value:
                    for other in needs:
                        if other not in value:
                            problems.append(
                                f"{_child_path(path, other)}: missing, required when "
                                f"{name!r} is present"
                            )

        checks.append(check)

    def _property_counts(
        self, node: dict[str, object], where: str, checks: list[_Check]
    ) -> None:
        low = self._count(node, "minProperties", where)
        high = self._count(node, "maxProperties", where)
        if low is None and high is None:
            return

        def check(value: object, path: str, problems: list[str]) -> None:
            if not isinstance(value, dict):
                return
            if low is not None and len(value) < low:
                problems.append(f"{path}: must have at least {low} properties, got {len(value)}")
            if high is not None and len(value) > high:
                problems.append(f"{path}: must have at most {high} properties, got {len(value)}")

        checks.append(check)

    def _pattern_properties(
        self, node: dict[str, object], where: str
    ) -> list[tuple[re.Pattern[str], _Check]]:
        patterns: list[tuple[re.Pattern[str], _Check]] = []
        raw = node.get("patternProperties", {})
        if not isinstance(raw, dict):
            self._bad(f"{where}/patternProperties", "must be an object mapping regexes to schemas")
            return patterns
        for key, sub in raw.items():
            at = f"{where}/patternProperties/{_pointer_part(str(key))}"
            regex = self._regex(key, at)
            compiled = self.compile(sub, at, frozenset())
            if regex is not None:
                patterns.append((regex, compiled))
        return patterns

    def _names(self, node: dict[str, object], key: str, where: str) -> tuple[str, ...]:
        raw = node.get(key, [])
        if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
            self._bad(f"{where}/{key}", f"must be an array of property names, got {_show(raw)}")
            return ()
        return tuple(str(r) for r in raw)

    def _combinators(
        self, node: dict[str, object], where: str, chain: frozenset[str], checks: list[_Check]
    ) -> None:
        if "allOf" in node:
            parts = self._schema_list(node["allOf"], f"{where}/allOf", chain)
            if parts:
                checks.extend(parts)
        if "anyOf" in node:
            options = self._schema_list(node["anyOf"], f"{where}/anyOf", chain)
            if options:
                checks.append(_any_of(tuple(options)))
        if "oneOf" in node:
            options = self._schema_list(node["oneOf"], f"{where}/oneOf", chain)
            if options:
                checks.append(_one_of(tuple(options)))
        if "not" in node:
            negated = self.compile(node["not"], f"{where}/not", chain)

            def not_(value: object, path: str, problems: list[str]) -> None:
                if _passes(negated, value):
                    problems.append(f"{path}: must not match the schema under 'not'")

            checks.append(not_)
        if "if" in node:
            condition = self.compile(node["if"], f"{where}/if", chain)
            then = self.compile(node["then"], f"{where}/then", chain) if "then" in node else None
            else_ = self.compile(node["else"], f"{where}/else", chain) if "else" in node else None

            def if_(value: object, path: str, problems: list[str]) -> None:
                branch = then if _passes(condition, value) else else_
                if branch is not None:
                    branch(value, path, problems)

            checks.append(if_)
        deps = (
            self._schema_map(node["dependentSchemas"], f"{where}/dependentSchemas")
            if "dependentSchemas" in node
            else None
        )
        if deps:
            dep_items = tuple(deps.items())

            def dependent(value: object, path: str, problems: list[str]) -> None:
                if isinstance(value, dict):
                    for name, sub in dep_items:
                        if name in value:
                            sub(value, path, problems)

            checks.append(dependent)


def _passes(check: _Check, value: object) -> bool:
    found: list[str] = []
    check(value, "$", found)
    return not found


def _any_of(options: Sequence[_Check]) -> _Check:
    def check(value: object, path: str, problems: list[str]) -> None:
        failures: list[list[str]] = []
        for option in options:
            found: list[str] = []
            option(value, path, found)
            if not found:
                return
            failures.append(found)
        problems.append(_no_match(path, "anyOf", failures))

    return check


def _one_of(options: Sequence[_Check]) -> _Check:
    def check(value: object, path: str, problems: list[str]) -> None:
        failures: list[list[str]] = []
        matched: list[int] = []
        for i, option in enumerate(options):
            found: list[str] = []
            option(value, path, found)
            if found:
                failures.append(found)
            else:
                matched.append(i)
        if not matched:
            problems.append(_no_match(path, "oneOf", failures))
        elif len(matched) > 1:
            problems.append(
                f"{path}: must match exactly one schema in oneOf, but matches "
                f"{', '.join(f'[{i}]' for i in matched)}"
            )

    return check


def _no_match(path: str, keyword: str, failures: list[list[str]]) -> str:
    """Say why no alternative matched; plain type mismatches merge into one line."""
    merged: list[str] = []
    got = None
    for found in failures:
        match = _TYPE_PROBLEM.fullmatch(found[0]) if len(found) == 1 else None
        if match is None or match["path"] != path or got not in (None, match["got"]):
            break
        got = match["got"]
        merged.extend(t for t in match["types"].split(" or ") if t not in merged)
    else:
        return f"{path}: expected {' or '.join(merged)}, got {got}"
    details = " | ".join(f"[{i}] " + "; ".join(found) for i, found in enumerate(failures))
    return f"{path}: matches no schema in {keyword}: {details}"
