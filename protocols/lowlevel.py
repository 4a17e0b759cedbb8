"""Pieces for those who extend powertrio's packages, not for everyday use.

The packages' own helpers (lazy exports, public ``__module__`` names), the schema builder
behind ``json_schema_of``, the message view and chain of a transcript, and the tool
helpers a runner needs (idempotency keys, argument parsing, the closing outcomes of a
call that did not finish).
"""

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
    "EMPTY_CHAIN",
    "FingerprintFrame",
    "MessageView",
    "SUPPORTED_TYPES",
    "SchemaBuilder",
    "aborted_outcome",
    "cache_by_identity",
    "canonical_tools",
    "chain_messages",
    "configure_models",
    "denied_outcome",
    "fixup_module_metadata",
    "idempotency_key",
    "interrupted_outcome",
    "is_model_class",
    "json_value_of",
    "lazy_exports",
    "parse_docstring",
    "parse_tool_arguments",
    "slot_setter",
    "structure_problems",
    "unwrap_single_error",
    "validate_tool_name",
]

# The schema builder and the message view load on first use: every package's __init__
# imports its helpers from here, and needs none of them.
if _TYPE_CHECKING:
    from ._llm import EMPTY_CHAIN, FingerprintFrame, canonical_tools, chain_messages
    from ._message_view import MessageView
    from ._tools import (
        aborted_outcome,
        denied_outcome,
        idempotency_key,
        interrupted_outcome,
        parse_tool_arguments,
        validate_tool_name,
    )
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
            "._llm": ("EMPTY_CHAIN", "FingerprintFrame", "canonical_tools", "chain_messages"),
            "._message_view": ("MessageView",),
            "._tools": (
                "aborted_outcome",
                "denied_outcome",
                "idempotency_key",
                "interrupted_outcome",
                "parse_tool_arguments",
                "validate_tool_name",
            ),
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
