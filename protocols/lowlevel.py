"""Pieces for those who extend powertrio's packages, not for everyday use."""

from __future__ import annotations

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
from ._util import cache_by_identity, fixup_module_metadata, slot_setter, unwrap_single_error

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
    "parse_docstring",
    "slot_setter",
    "structure_problems",
    "unwrap_single_error",
]

fixup_module_metadata(__name__, globals())
