"""An LLM response as it streams: the deltas, the assembler that folds them, and the stream
an ``LLM`` returns.

What an observer sees live (``StreamDelta``) and what a transport or a test double yields;
a session records only the assembled ``LLMResponse``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._util import lazy_exports as _lazy_exports

__all__ = [
    "FinishDelta",
    "LLMStream",
    "StreamAssembler",
    "StreamDelta",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "UsageDelta",
    "response_deltas",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._llm_stream import (
        FinishDelta,
        LLMStream,
        StreamAssembler,
        StreamDelta,
        TextDelta,
        ThinkingDelta,
        ToolCallDelta,
        UsageDelta,
        response_deltas,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._llm_stream": (
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
        },
    )
