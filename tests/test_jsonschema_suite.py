"""The official JSON-Schema-Test-Suite (draft 2020-12, required part): no wrong answer allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocols.errors import SchemaRemoteRefError
from protocols.jsonschema import compile_schema

SUITE = Path(__file__).parent / "data" / "json-schema-test-suite"

REMOTE = "http://localhost:1234/"
"""Where the suite serves the documents its remote references point to."""

NEEDS_REMOTE: dict[str, frozenset[str] | None] = {
    "refRemote.json": None,
    "dynamicRef.json": frozenset(
        {
            "strict-tree schema, guards against misspelled properties",
            "tests for implementation dynamic anchor and reference link",
            "$ref and $dynamicAnchor are independent of order - $defs first",
            "$ref and $dynamicAnchor are independent of order - $ref first",
            "$ref to $dynamicRef finds detached $dynamicAnchor",
        }
    ),
    # A custom meta-schema ($schema) is a remote document too.
    "vocabulary.json": frozenset(
        {
            "schema that uses custom metaschema with with no validation vocabulary",
            "ignore unrecognized optional vocabulary",
        }
    ),
}
"""Schemas that refer to a document served from ``REMOTE``, by file (``None``: all of it).

powertrio never fetches a schema, so these must be refused with ``SchemaRemoteRefError``.
"""

EXPECTED_REFUSALS: dict[tuple[str, str], str] = {}
"""Other cases the validator cannot decide, by (file, schema description), with the reason.

Empty: every other case gets the suite's answer. Add an entry only with a reason; it is
checked strictly (the schema must be refused, and the entry fails once it is not).
"""


def _cases() -> list[object]:
    cases: list[object] = []
    for path in sorted(SUITE.glob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for case in group["tests"]:
                cases.append(
                    pytest.param(
                        path.name,
                        group["description"],
                        group["schema"],
                        case["data"],
                        case["valid"],
                        id=f"{path.stem}: {group['description']}: {case['description']}",
                    )
                )
    return cases


CASES = _cases()


def _needs_remote(file: str, group: str) -> bool:
    groups = NEEDS_REMOTE.get(file, frozenset())
    return groups is None or group in groups


def test_the_suite_is_all_there() -> None:
    """The vendored files hold the whole required part (a lost file would shrink the run)."""
    assert len(list(SUITE.glob("*.json"))) == 46
    assert len(CASES) >= 1290


@pytest.mark.parametrize(("file", "group", "schema", "data", "valid"), CASES)
def test_suite_case(file: str, group: str, schema: object, data: object, valid: bool) -> None:
    """Each case gets the suite's answer, or is refused for the reason on record."""
    if _needs_remote(file, group):
        with pytest.raises(SchemaRemoteRefError) as caught:
            compile_schema(schema)
        assert caught.value.code == "tool.schema_remote_ref"
        assert caught.value.uri.startswith(REMOTE)
        return
    if (file, group) in EXPECTED_REFUSALS:
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the library refuses with
            compile_schema(schema)
        pytest.xfail(EXPECTED_REFUSALS[file, group])
    compiled = compile_schema(schema)
    problems = compiled.problems(data)
    assert valid == compiled.is_valid(data)
    assert valid == (not problems), problems
    assert all(p.startswith("$") for p in problems), problems
