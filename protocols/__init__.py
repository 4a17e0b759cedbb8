"""The vocabulary of powertrio: every format that crosses a boundary.

The package holds what a program that runs agents names every day: the LLM's messages,
requests and responses, the ``LLM`` protocol, tool specs and outcomes, mailbox messages
(follow-ups, cancels, human replies), JSON types and the error root. The rest lives in
named namespaces: ``protocols.errors`` (the error tree with stable codes),
``protocols.codec`` (events to bytes and back), ``protocols.streaming`` (a response as it
streams), ``protocols.transports`` (the httpx transports to providers),
``protocols.jsonschema`` (JSON Schema checks) and ``protocols.lowlevel`` (pieces for
those who extend the packages).
"""

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
    from ._llm_stream import LLM as LLM
    from ._messages import Cancel as Cancel
    from ._messages import CancelMode as CancelMode
    from ._messages import FollowUp as FollowUp
    from ._messages import HumanReply as HumanReply
    from ._tools import CrashPolicy as CrashPolicy
    from ._tools import ToolOutcome as ToolOutcome
    from ._tools import ToolSpec as ToolSpec
    from ._tools import ToolStatus as ToolStatus
    from ._type_schema import OutputType as OutputType
    from ._type_schema import json_schema_of as json_schema_of
    from ._types import JsonObject as JsonObject
    from ._types import JsonValue as JsonValue
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._llm": (
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
            ),
            "._llm_stream": ("LLM",),
            "._messages": (
                "Cancel",
                "CancelMode",
                "FollowUp",
                "HumanReply",
            ),
            "._tools": (
                "CrashPolicy",
                "ToolOutcome",
                "ToolSpec",
                "ToolStatus",
            ),
            "._type_schema": (
                "OutputType",
                "json_schema_of",
            ),
            "._types": (
                "JsonObject",
                "JsonValue",
            ),
        },
    )
