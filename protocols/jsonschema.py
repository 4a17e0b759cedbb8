"""JSON Schema (draft 2020-12) checks: compile a schema once, validate values against it.

Tool arguments and structured output are validated with these; a schema that reaches out
for a remote ``$ref`` is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._util import lazy_exports as _lazy_exports

__all__ = [
    "CompiledSchema",
    "check_schema",
    "compile_schema",
    "schema_problems",
    "validate_json",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._jsonschema import (
        CompiledSchema,
        check_schema,
        compile_schema,
        schema_problems,
        validate_json,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._jsonschema": (
                "CompiledSchema",
                "check_schema",
                "compile_schema",
                "schema_problems",
                "validate_json",
            ),
        },
    )
