"""The JSON-Schema keyword compilers: each turns its keywords of one schema node into checks."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._jsonschema import _Compiler

__all__ = [
    "Check",
    "compile_arrays",
    "compile_combinators",
    "compile_numbers",
    "compile_objects",
    "compile_strings",
    "compile_type",
    "compile_values",
    "is_count",
    "is_number",
    "noop",
    "pointer_part",
    "show",
]

Check = Callable[[object, str, list[str]], None]
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

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_PROBLEM: Final = re.compile(r"(?P<path>.*): expected (?P<types>[a-z ]+), got (?P<got>.*)")


def noop(_value: object, _path: str, _problems: list[str]) -> None:
    return None


def _child_path(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


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


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def pointer_part(text: str) -> str:
    return text.replace("~", "~0").replace("/", "~1")


def compile_type(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``type``."""
    if "type" not in node:
        return
    raw = node["type"]
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        compiler.bad(f"{where}/type", f"must be a type name or a list of them, got {show(raw)}")
        return
    unknown = [n for n in names if n not in _JSON_TYPES]
    if unknown:
        compiler.bad(
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
        problems.append(f"{path}: expected {expected}, got {show(value)}")

    checks.append(check)


def compile_values(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``enum`` and ``const``."""
    if "enum" in node:
        options = node["enum"]
        if not isinstance(options, list) or not options:
            compiler.bad(f"{where}/enum", f"must be a non-empty array, got {show(options)}")
        else:
            allowed = frozenset(_canon(o) for o in options)
            shown = ", ".join(show(o) for o in options[:20])
            if len(options) > 20:
                shown += ", ..."

            def enum(value: object, path: str, problems: list[str]) -> None:
                if _canon(value) not in allowed:
                    problems.append(f"{path}: must be one of {shown}, got {show(value)}")

            checks.append(enum)
    if "const" in node:
        want = _canon(node["const"])
        want_shown = show(node["const"])

        def const(value: object, path: str, problems: list[str]) -> None:
            if _canon(value) != want:
                problems.append(f"{path}: must be {want_shown}, got {show(value)}")

        checks.append(const)


def compile_numbers(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``minimum``, ``maximum``, their exclusive forms and ``multipleOf``."""
    bounds: list[tuple[Callable[[float, float], bool], float, str]] = []
    for key, test, words in (
        ("minimum", lambda v, b: v >= b, ">="),
        ("maximum", lambda v, b: v <= b, "<="),
        ("exclusiveMinimum", lambda v, b: v > b, ">"),
        ("exclusiveMaximum", lambda v, b: v < b, "<"),
    ):
        bound = compiler.number(node, key, where)
        if bound is not None:
            bounds.append((test, bound, f"must be {words} {show(bound)}"))
    factor = compiler.number(node, "multipleOf", where)
    if factor is not None and factor <= 0:
        compiler.bad(f"{where}/multipleOf", f"must be greater than 0, got {show(factor)}")
        factor = None
    if not bounds and factor is None:
        return
    frozen = tuple(bounds)

    def check(value: object, path: str, problems: list[str]) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        for test, bound, message in frozen:
            if not test(value, bound):
                problems.append(f"{path}: {message}, got {show(value)}")
        if factor is not None and not _is_multiple(value, factor):
            problems.append(
                f"{path}: must be a multiple of {show(factor)}, got {show(value)}"
            )

    checks.append(check)


def compile_strings(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``minLength``, ``maxLength`` and ``pattern``."""
    low = compiler.count(node, "minLength", where)
    high = compiler.count(node, "maxLength", where)
    pattern = compiler.regex(node["pattern"], f"{where}/pattern") if "pattern" in node else None
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
                f"{path}: must match the pattern {pattern.pattern!r}, got {show(value)}"
            )

    checks.append(check)


def compile_arrays(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``prefixItems``, ``items``, item counts, ``uniqueItems`` and ``contains``."""
    none: frozenset[str] = frozenset()
    prefix: list[Check] = []
    rest: Check | None = None
    if "prefixItems" in node:
        prefix = compiler.schema_list(node["prefixItems"], f"{where}/prefixItems", none) or []
    if "items" in node:
        items = node["items"]
        if isinstance(items, list):  # the draft-07 tuple form, still common in the wild
            prefix = compiler.schema_list(items, f"{where}/items", none) or []
            if "additionalItems" in node:
                rest = compiler.compile(node["additionalItems"], f"{where}/additionalItems", none)
        else:
            rest = compiler.compile(items, f"{where}/items", none)
    low = compiler.count(node, "minItems", where)
    high = compiler.count(node, "maxItems", where)
    unique = node.get("uniqueItems", False)
    if not isinstance(unique, bool):
        compiler.bad(f"{where}/uniqueItems", f"must be a boolean, got {show(unique)}")
        unique = False
    contains = compiler.compile(node["contains"], f"{where}/contains", none) if (
        "contains" in node
    ) else None
    min_contains = compiler.count(node, "minContains", where)
    max_contains = compiler.count(node, "maxContains", where)
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


def compile_objects(
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    """Compile ``properties``, ``patternProperties``, ``additionalProperties``, ``required``, ..."""
    none: frozenset[str] = frozenset()
    props = compiler.schema_map(node["properties"], f"{where}/properties") if (
        "properties" in node
    ) else None
    patterns = _pattern_properties(compiler, node, where)
    required = _names(compiler, node, "required", where)
    extra: Check | None = None
    extra_false = False
    if "additionalProperties" in node:
        extra_false = node["additionalProperties"] is False
        extra = compiler.compile(
            node["additionalProperties"], f"{where}/additionalProperties", none
        )
    names = compiler.compile(node["propertyNames"], f"{where}/propertyNames", none) if (
        "propertyNames" in node
    ) else None
    dependent: dict[str, tuple[str, ...]] = {}
    raw_dep = node.get("dependentRequired", {})
    if not isinstance(raw_dep, dict):
        compiler.bad(f"{where}/dependentRequired", "must map names to arrays of names")
    else:
        dependent = {
            str(k): _names(compiler, raw_dep, str(k), f"{where}/dependentRequired")
            for k in raw_dep
        }
    _property_counts(compiler, node, where, checks)
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
    compiler: _Compiler, node: dict[str, object], where: str, checks: list[Check]
) -> None:
    low = compiler.count(node, "minProperties", where)
    high = compiler.count(node, "maxProperties", where)
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
    compiler: _Compiler, node: dict[str, object], where: str
) -> list[tuple[re.Pattern[str], Check]]:
    patterns: list[tuple[re.Pattern[str], Check]] = []
    raw = node.get("patternProperties", {})
    if not isinstance(raw, dict):
        compiler.bad(f"{where}/patternProperties", "must be an object mapping regexes to schemas")
        return patterns
    for key, sub in raw.items():
        at = f"{where}/patternProperties/{pointer_part(str(key))}"
        regex = compiler.regex(key, at)
        compiled = compiler.compile(sub, at, frozenset())
        if regex is not None:
            patterns.append((regex, compiled))
    return patterns


def _names(compiler: _Compiler, node: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    raw = node.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        compiler.bad(f"{where}/{key}", f"must be an array of property names, got {show(raw)}")
        return ()
    return tuple(str(r) for r in raw)


def compile_combinators(
    compiler: _Compiler,
    node: dict[str, object],
    where: str,
    chain: frozenset[str],
    checks: list[Check],
) -> None:
    """Compile ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if`` and ``dependentSchemas``."""
    if "allOf" in node:
        parts = compiler.schema_list(node["allOf"], f"{where}/allOf", chain)
        if parts:
            checks.extend(parts)
    if "anyOf" in node:
        options = compiler.schema_list(node["anyOf"], f"{where}/anyOf", chain)
        if options:
            checks.append(_any_of(tuple(options)))
    if "oneOf" in node:
        options = compiler.schema_list(node["oneOf"], f"{where}/oneOf", chain)
        if options:
            checks.append(_one_of(tuple(options)))
    if "not" in node:
        negated = compiler.compile(node["not"], f"{where}/not", chain)

        def not_(value: object, path: str, problems: list[str]) -> None:
            if _passes(negated, value):
                problems.append(f"{path}: must not match the schema under 'not'")

        checks.append(not_)
    if "if" in node:
        condition = compiler.compile(node["if"], f"{where}/if", chain)
        then = compiler.compile(node["then"], f"{where}/then", chain) if "then" in node else None
        else_ = compiler.compile(node["else"], f"{where}/else", chain) if "else" in node else None

        def if_(value: object, path: str, problems: list[str]) -> None:
            branch = then if _passes(condition, value) else else_
            if branch is not None:
                branch(value, path, problems)

        checks.append(if_)
    deps = (
        compiler.schema_map(node["dependentSchemas"], f"{where}/dependentSchemas")
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



def _passes(check: Check, value: object) -> bool:
    found: list[str] = []
    check(value, "$", found)
    return not found


def _any_of(options: Sequence[Check]) -> Check:
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


def _one_of(options: Sequence[Check]) -> Check:
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
