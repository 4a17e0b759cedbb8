"""The vocabulary of powertrio: every format that crosses a boundary."""

from __future__ import annotations

import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import errors as errors
from ._util import lazy_exports as _lazy_exports
from .errors import PowertrioError as PowertrioError

# Every logger of the three packages is under ``powertrio``. A library leaves logging to
# the application: without a handler of its own in the tree, Python's last-resort handler
# would print the library's warnings and tracebacks on stderr of any program that has not
# configured logging.
_logging.getLogger("powertrio").addHandler(_logging.NullHandler())
del _logging

# Names load on first use, so importing the package costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._codec import EncodedEvent as EncodedEvent
    from ._codec import EventRegistry as EventRegistry
    from ._codec import RecordLike as RecordLike
    from ._codec import Upcaster as Upcaster
    from ._codec import configure_converter as configure_converter
    from ._codec import decode as decode
    from ._codec import decode_record as decode_record
    from ._codec import default_registry as default_registry
    from ._codec import encode as encode
    from ._codec import event_type as event_type
    from ._codec import make_converter as make_converter
    from ._jsonschema import CompiledSchema as CompiledSchema
    from ._jsonschema import check_schema as check_schema
    from ._jsonschema import compile_schema as compile_schema
    from ._jsonschema import schema_problems as schema_problems
    from ._jsonschema import validate_json as validate_json
    from ._llm import EMPTY_CHAIN as EMPTY_CHAIN
    from ._llm import AssistantMessage as AssistantMessage
    from ._llm import ContentPart as ContentPart
    from ._llm import FinishReason as FinishReason
    from ._llm import ImagePart as ImagePart
    from ._llm import LLMRequest as LLMRequest
    from ._llm import LLMResponse as LLMResponse
    from ._llm import Message as Message
    from ._llm import ResponseFormat as ResponseFormat
    from ._llm import SystemMessage as SystemMessage
    from ._llm import TextPart as TextPart
    from ._llm import ThinkingBlock as ThinkingBlock
    from ._llm import ToolCall as ToolCall
    from ._llm import ToolChoice as ToolChoice
    from ._llm import ToolDefinition as ToolDefinition
    from ._llm import ToolResultMessage as ToolResultMessage
    from ._llm import Usage as Usage
    from ._llm import UserMessage as UserMessage
    from ._llm import chain_messages as chain_messages
    from ._llm_stream import LLM as LLM
    from ._llm_stream import FinishDelta as FinishDelta
    from ._llm_stream import LLMStream as LLMStream
    from ._llm_stream import StreamAssembler as StreamAssembler
    from ._llm_stream import StreamDelta as StreamDelta
    from ._llm_stream import TextDelta as TextDelta
    from ._llm_stream import ThinkingDelta as ThinkingDelta
    from ._llm_stream import ToolCallDelta as ToolCallDelta
    from ._llm_stream import UsageDelta as UsageDelta
    from ._llm_stream import response_deltas as response_deltas
    from ._messages import Cancel as Cancel
    from ._messages import CancelMode as CancelMode
    from ._messages import FollowUp as FollowUp
    from ._messages import HumanReply as HumanReply
    from ._tools import CrashPolicy as CrashPolicy
    from ._tools import ToolOutcome as ToolOutcome
    from ._tools import ToolSpec as ToolSpec
    from ._tools import ToolStatus as ToolStatus
    from ._tools import aborted_outcome as aborted_outcome
    from ._tools import denied_outcome as denied_outcome
    from ._tools import idempotency_key as idempotency_key
    from ._tools import interrupted_outcome as interrupted_outcome
    from ._tools import parse_tool_arguments as parse_tool_arguments
    from ._tools import validate_tool_name as validate_tool_name
    from ._type_schema import OutputType as OutputType
    from ._type_schema import json_schema_of as json_schema_of
    from ._types import JsonObject as JsonObject
    from ._types import JsonValue as JsonValue
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._codec": (
                "EncodedEvent",
                "EventRegistry",
                "RecordLike",
                "Upcaster",
                "configure_converter",
                "decode",
                "decode_record",
                "default_registry",
                "encode",
                "event_type",
                "make_converter",
            ),
            "._jsonschema": (
                "CompiledSchema",
                "check_schema",
                "compile_schema",
                "schema_problems",
                "validate_json",
            ),
            "._llm": (
                "EMPTY_CHAIN",
                "AssistantMessage",
                "ContentPart",
                "FinishReason",
                "ImagePart",
                "LLMRequest",
                "LLMResponse",
                "Message",
                "ResponseFormat",
                "SystemMessage",
                "TextPart",
                "ThinkingBlock",
                "ToolCall",
                "ToolChoice",
                "ToolDefinition",
                "ToolResultMessage",
                "Usage",
                "UserMessage",
                "chain_messages",
            ),
            "._llm_stream": (
                "LLM",
                "FinishDelta",
                "LLMStream",
                "StreamAssembler",
                "StreamDelta",
                "TextDelta",
                "ThinkingDelta",
                "ToolCallDelta",
                "UsageDelta",
                "response_deltas",
            ),
            "._messages": ("Cancel", "CancelMode", "FollowUp", "HumanReply"),
            "._tools": (
                "CrashPolicy",
                "ToolOutcome",
                "ToolSpec",
                "ToolStatus",
                "aborted_outcome",
                "denied_outcome",
                "idempotency_key",
                "interrupted_outcome",
                "parse_tool_arguments",
                "validate_tool_name",
            ),
            "._type_schema": ("OutputType", "json_schema_of"),
            "._types": ("JsonObject", "JsonValue"),
        },
    )
