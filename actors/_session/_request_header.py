"""What shaped an LLM request besides the conversation, recorded for replay's diffs."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence
from typing import final

import attrs

from protocols import LLMRequest, Message, SystemMessage, ToolDefinition
from protocols.lowlevel import FingerprintFrame, MessageView, cache_by_identity, canonical_tools

from ._replace import replacer


@cache_by_identity
def _tools_digest(tools: tuple[ToolDefinition, ...]) -> tuple[tuple[str, ...], str]:
    """The tools' names and the SHA-256 of their canonical JSON, kept per tuple: a session
    offers the same tuple, its registry's, to every model call."""
    return tuple(t.name for t in tools), hashlib.sha256(canonical_tools(tools)).hexdigest()


@final
@attrs.frozen(kw_only=True)
class RequestHeader:
    """What shaped an LLM request besides the conversation, kept for replay's diffs.

    The fingerprint says *whether* a replayed request differs; the header says *how*: a
    changed system prompt, tool set, model or parameter is shown field by field, and a
    changed conversation by its length and digest.
    """

    system: str
    model: str | None
    tools: tuple[str, ...]
    tools_digest: str
    """SHA-256 of the tool definitions (names, descriptions and schemas)."""
    max_tokens: int | None = None
    temperature: float | None = None
    response_format: str | None = None
    """The response format's name."""
    messages: int
    """How many conversation messages (after the system prompt) were sent."""
    messages_digest: str

    @classmethod
    def of(
        cls, request: LLMRequest, messages_digest: str, *, conversation: int | None = None
    ) -> RequestHeader:
        """The header of ``request`` whose conversation has ``messages_digest``.

        ``conversation``: how many messages follow the leading system messages, when the
        caller knows that none of them is a system message (a session's transcript never
        holds one); the header then costs the same at 50,000 messages as at 10.
        """
        if conversation is not None:
            messages = request.messages
            lead = len(messages) - conversation
            if type(messages) is MessageView and lead <= len(messages.lead):
                leading: Sequence[Message] = messages.lead[:lead]  # no view built for it
            else:
                leading = messages[:lead]
            system = "\n\n".join(m.content for m in leading if isinstance(m, SystemMessage))
            return cls._made(request, system, conversation, messages_digest)
        system = "\n\n".join(m.content for m in request.messages if isinstance(m, SystemMessage))
        count = sum(not isinstance(m, SystemMessage) for m in request.messages)
        return cls._made(request, system, count, messages_digest)

    @classmethod
    def _made(
        cls, request: LLMRequest, system: str, count: int, messages_digest: str
    ) -> RequestHeader:
        names, digest = _tools_digest(request.tools)
        return cls(
            system=system,
            model=request.model,
            tools=names,
            tools_digest=digest,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            response_format=request.response_format.name if request.response_format else None,
            messages=count,
            messages_digest=messages_digest,
        )

    def differences(self, other: RequestHeader) -> list[str]:
        """Readable lines for each field where ``other`` (the replayed request) differs."""
        lines: list[str] = []
        if self.system != other.system:
            diff = difflib.unified_diff(
                self.system.splitlines(),
                other.system.splitlines(),
                "recorded system prompt",
                "replayed system prompt",
                lineterm="",
            )
            lines.extend(diff)
        for name in ("model", "tools", "max_tokens", "temperature", "response_format"):
            old, new = getattr(self, name), getattr(other, name)
            if old != new:
                lines.append(f"{name}: recorded {old!r}, replayed {new!r}")
        if self.tools == other.tools and self.tools_digest != other.tools_digest:
            lines.append("tools: same names, but a description or schema changed")
        if (self.messages, self.messages_digest) != (other.messages, other.messages_digest):
            lines.append(
                f"conversation: recorded {self.messages} messages, replayed {other.messages}"
                " (the transcript the code builds from the log changed)"
            )
        return lines


_with_messages = replacer(LLMRequest)
_with_conversation = replacer(RequestHeader)


@final
class RequestFrame:
    """What a run's model calls share: everything of a request but its conversation.

    A run asks the model several times with the same parameters, system prompt and tools
    (and the same compaction, until the next one); only the conversation grows. The frame
    holds the request without it, its fingerprint frame and its header, so each call
    costs a view of the transcript, one hash and two copies of frozen values, not a walk
    and a canonical writing of every parameter.

    ``key`` is what the frame was made from, which a user of it compares by identity (the
    session's: the run's own system prompt and response format, its tools and the latest
    compaction). A kept frame is a cache: the request it makes equals the one made from
    scratch (a test compares them).
    """

    __slots__ = ("_fingerprint", "_header", "_request", "key", "lead")

    def __init__(self, key: tuple[object, ...], request: LLMRequest) -> None:
        self.key = key
        self.lead = tuple(request.messages)
        """The messages sent before the conversation (the system prompt, a summary)."""
        self._request = request
        self._fingerprint: FingerprintFrame = request.fingerprint_frame()
        self._header = RequestHeader.of(request, "", conversation=0)

    def request(
        self, messages: MessageView, conversation: int, digest: str
    ) -> tuple[LLMRequest, str, RequestHeader]:
        """The request whose ``messages`` end with a conversation of ``conversation``
        messages chained to ``digest``, its fingerprint and its header."""
        return (
            _with_messages(self._request, messages=messages),
            self._fingerprint.fingerprint(digest),
            _with_conversation(self._header, messages=conversation, messages_digest=digest),
        )
