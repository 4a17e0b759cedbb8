"""LLM transports over httpx: OpenAI-compatible Chat Completions, Anthropic Messages, a mock."""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

_fixup(__name__, globals())
del _fixup
