"""Input-type aliases shared by the ``protocols`` package."""

from __future__ import annotations

# typing_extensions is a dependency of cattrs; TypeAliasType gives a runtime object with an
# identity, so the codec can recognise the alias on an attrs field and pass values through.
from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonValue"]

JsonValue = TypeAliasType(
    "JsonValue",
    "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None",
)
"""Any JSON value. Event fields typed with it are opaque: the codec never walks them.

Use it for payloads owned by someone else (LLM content, tool arguments, provider extras):
they are stored exactly as given and come back as plain ``dict``/``list``/scalars.
"""

JsonObject = TypeAliasType("JsonObject", "dict[str, JsonValue]")
"""A JSON object (``dict[str, JsonValue]``), also passed through by the codec unwalked."""
