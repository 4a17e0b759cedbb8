"""Pieces for those who extend powertrio's packages, not for everyday use."""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._util import (
    cache_by_identity,
    fixup_module_metadata,
    lazy_exports,
    slot_setter,
    unwrap_single_error,
)

__all__ = [
    "MessageView",
    "SUPPORTED_TYPES",
    "SchemaBuilder",
    "cache_by_identity",
    "canonical_tools",
    "configure_models",
    "fixup_module_metadata",
    "is_model_class",
    "json_value_of",
    "lazy_exports",
    "parse_docstring",
    "slot_setter",
    "structure_problems",
    "unwrap_single_error",
]

# The schema builder and the message view load on first use: every package's __init__
# imports its helpers from here, and needs none of them.
if _TYPE_CHECKING:
    from ._llm import canonical_tools
    from ._message_view import MessageView
    from ._type_schema import (
        SUPPORTED_TYPES,
        SchemaBuilder,
        configure_models,
        is_model_class,
        json_value_of,
        parse_docstring,
        structure_problems,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._llm": ("canonical_tools",),
            "._message_view": ("MessageView",),
            "._type_schema": (
                "SUPPORTED_TYPES",
                "SchemaBuilder",
                "configure_models",
                "is_model_class",
                "json_value_of",
                "parse_docstring",
                "structure_problems",
            ),
        },
    )

fixup_module_metadata(__name__, globals())
