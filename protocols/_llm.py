"""The LLM vocabulary: messages, tool calls, requests, responses, deltas, the LLM protocol."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, final

import attrs
import orjson

from ._message_view import MessageView
from ._types import JsonObject
from ._util import cache_by_identity, slot_setter

__all__ = [
    "AssistantMessage",
    "EMPTY_CHAIN",
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
]

#: Why the model stopped, normalised across providers. ``other`` covers reasons a provider
#: invents later (Anthropic's ``pause_turn``, for instance).
FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "other"]


# --- content parts -------------------------------------------------------------------


@final
@attrs.frozen
class TextPart:
    """A piece of text inside a user message."""

    text: str
    """The text."""
    type: Literal["text"] = attrs.field(default="text", kw_only=True)
    """The union tag; always ``"text"``."""


@final
@attrs.frozen(kw_only=True)
class ImagePart:
    """An image inside a user message, by URL or as a ``data:`` URL.

    Providers differ in how they take images; the transports translate this one shape
    (OpenAI ``image_url`` parts, Anthropic ``image`` blocks with a ``base64`` or ``url``
    source).
    """

    url: str
    """An ``https://`` URL or a ``data:<media type>;base64,<data>`` URL."""
    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's resolution hint; ignored by providers that have none."""
    type: Literal["image"] = "image"
    """The union tag; always ``"image"``."""


#: A part of a user message's content, tagged by ``type``.
ContentPart: TypeAlias = TextPart | ImagePart


def _to_parts(value: str | Sequence[ContentPart]) -> tuple[ContentPart, ...]:
    """Normalise user content: a bare string is one text part; sequences become tuples."""
    if isinstance(value, str):
        return (TextPart(value),)
    return tuple(value)


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _blocks(value: Iterable[ThinkingBlock]) -> tuple[ThinkingBlock, ...]:
    return tuple(value)


def _messages(value: Iterable[Message]) -> Sequence[Message]:
    # A view shares the transcript's buffer (O(1)); anything else is copied once.
    if isinstance(value, tuple | MessageView):
        return value
    return tuple(value)


def _tools(value: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return tuple(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


# --- tool calls and definitions ------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call the model asked for.

    ``arguments`` is the raw JSON text the model produced, unparsed: models emit invalid
    JSON now and then, and the tool layer must be able to report that precisely (and the
    log must keep exactly what the model said).
    """

    id: str
    """The provider's call id; the matching tool result quotes it."""
    name: str
    """The tool's name."""
    arguments: str
    """The arguments as the raw JSON string the model produced (``"{}"`` for none)."""


@final
@attrs.frozen(kw_only=True)
class ToolDefinition:
    """A tool as offered to a provider: a name, a description, a JSON Schema for arguments.

    .. note:: ``parameters`` is a dict, so instances compare by value but are not hashable.
    """

    name: str
    """The name the model calls the tool by."""
    description: str
    """What the tool does, written for the model."""
    parameters: JsonObject = attrs.Factory(lambda: {"type": "object", "properties": {}})
    """The JSON Schema of the arguments object."""


@final
@attrs.frozen
class ToolChoice:
    """Whether and which tool the model must call.

    Build one with the constructors: ``ToolChoice.auto()``, ``ToolChoice.none()``,
    ``ToolChoice.required()`` or ``ToolChoice.tool("name")``.
    """

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    """``auto``: the model decides; ``none``: no tool; ``required``: some tool; ``tool``: the
    one named by ``name``."""
    name: str | None = None
    """The tool to call when ``mode`` is ``"tool"``; ``None`` otherwise."""

    def __attrs_post_init__(self) -> None:
        if (self.mode == "tool") != (self.name is not None):
            msg = "ToolChoice needs a name exactly when mode is 'tool'"
            raise ValueError(msg)

    @classmethod
    def auto(cls) -> ToolChoice:
        """Let the model decide whether to call a tool."""
        return cls("auto")

    @classmethod
    def none(cls) -> ToolChoice:
        """Forbid tool calls."""
        return cls("none")

    @classmethod
    def required(cls) -> ToolChoice:
        """Require at least one tool call, any tool."""
        return cls("required")

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        """Require a call of the tool ``name``."""
        return cls("tool", name)


@final
@attrs.frozen(kw_only=True)
class ResponseFormat:
    """Ask for a JSON answer matching a JSON Schema (OpenAI ``response_format``).

    .. note:: ``schema`` is a dict, so instances compare by value but are not hashable.
    """

    name: str
    """A name for the schema (OpenAI requires one)."""
    schema: JsonObject
    """The JSON Schema the answer must match."""
    strict: bool = True
    """Ask the provider to enforce the schema exactly, where it can."""


# --- messages ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class ThinkingBlock:
    """A reasoning block the model produced (Anthropic extended thinking).

    Anthropic requires these to be passed back unchanged, signature included, in the next
    request of a tool loop, so they are kept on the assistant message.
    """

    thinking: str
    """The reasoning text, or the opaque data of a redacted block."""
    signature: str | None = None
    """The provider's signature over the block; passed back verbatim."""
    redacted: bool = False
    """True for a ``redacted_thinking`` block, whose ``thinking`` is opaque data."""


@final
@attrs.frozen
class SystemMessage:
    """Instructions for the model; Anthropic takes these as the top-level ``system``."""

    content: str
    """The instructions."""
    role: Literal["system"] = attrs.field(default="system", kw_only=True)
    """The union tag; always ``"system"``."""

    @property
    def text(self) -> str:
        """Its text: the instructions (every message type has ``text``)."""
        return self.content


@final
@attrs.frozen
class UserMessage:
    """What the user said: text and images. A bare string is taken as one text part."""

    content: tuple[ContentPart, ...] = attrs.field(converter=_to_parts)
    """The parts, in order."""
    role: Literal["user"] = attrs.field(default="user", kw_only=True)
    """The union tag; always ``"user"``."""

    @property
    def text(self) -> str:
        """Its text: the text parts joined (every message type has ``text``)."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@final
@attrs.frozen(kw_only=True)
class AssistantMessage:
    """What the model said: text, tool calls and (Anthropic) thinking blocks."""

    content: str = ""
    """The text of the answer; empty when the model only called tools."""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    """The tool calls, in the order the model made them."""
    thinking: tuple[ThinkingBlock, ...] = attrs.field(default=(), converter=_blocks)
    """Reasoning blocks to pass back to the provider unchanged."""
    role: Literal["assistant"] = "assistant"
    """The union tag; always ``"assistant"``."""

    @property
    def text(self) -> str:
        """Its text: the answer (every message type has ``text``)."""
        return self.content


@final
@attrs.frozen(kw_only=True)
class ToolResultMessage:
    """The result of one tool call, answering the call with the same id."""

    tool_call_id: str
    """The id of the :class:`ToolCall` this answers."""
    content: str
    """The result as text (usually JSON), as the model will read it."""
    is_error: bool = False
    """True when the tool failed and ``content`` describes the error."""
    role: Literal["tool"] = "tool"
    """The union tag; always ``"tool"``."""

    @property
    def text(self) -> str:
        """Its text: the result (every message type has ``text``)."""
        return self.content


#: A chat message, tagged by ``role``.
Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


# --- request and response ------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class LLMRequest:
    """One model call: the transcript plus the parameters.

    Fields left ``None`` are not sent, so the provider's default applies (``model``: the
    transport's configured model).
    """

    messages: Sequence[Message] = attrs.field(converter=_messages)
    """The transcript, oldest first: a tuple, or a :class:`~protocols.lowlevel.MessageView`
    (a session's requests share its transcript instead of copying it). Either is immutable
    and compares equal to the other when the messages are the same."""
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    """The tools the model may call."""
    tool_choice: ToolChoice | None = None
    """Whether and which tool must be called; ``None`` leaves it to the provider."""
    response_format: ResponseFormat | None = None
    """A JSON Schema the answer must match; ``None`` for free text."""
    max_tokens: int | None = None
    """The most tokens to generate (Anthropic requires a limit; its transport defaults one)."""
    temperature: float | None = None
    """Sampling temperature."""
    model: str | None = None
    """The model to call; ``None`` uses the transport's configured model."""
    stop: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """Stop sequences."""
    thinking_budget: int | None = None
    """Tokens the model may spend reasoning (Anthropic extended thinking); ``None``: off."""

    def fingerprint(self, *, messages_digest: str | None = None) -> str:
        """A stable hash of everything that determines the answer.

        Replay compares the fingerprint of the request the actor asks for now with the one
        recorded in the log, to detect divergence. It is a SHA-256 over a canonical JSON
        form (sorted keys, tuples as lists) of the parameters and the leading system
        messages, plus :func:`chain_messages` over the other messages, so it is the same
        across processes and Python versions.

        The chain is what keeps the cost flat as a conversation grows: a caller that keeps
        the chain of its transcript up to date (one hash per new message) passes it as
        ``messages_digest`` and nothing here walks the whole history.

        Args:
            messages_digest (str | None): ``chain_messages(EMPTY_CHAIN, rest)`` where
                ``rest`` is :attr:`messages` after the leading system messages; computed
                here when ``None``.

        Returns:
            (str): ``"sha256:"`` followed by 64 hex digits.
        """
        frame = self.fingerprint_frame()
        if messages_digest is None:
            messages_digest = chain_messages(EMPTY_CHAIN, self.messages[frame.system_count :])
        return frame.fingerprint(messages_digest)

    def fingerprint_frame(self) -> FingerprintFrame:
        """What :meth:`fingerprint` hashes besides the conversation, written once.

        A caller that asks for many requests which differ only in their conversation
        (a session, at every model call of a run) keeps the frame and pays one hash per
        request, with no parameter walked or written again. It holds the parameters and
        the leading system messages: it is the frame of any request that has the same.
        """
        system = _leading_system(self.messages)
        params: dict[str, object] = {name: getattr(self, name) for name in _REQUEST_PARAMS}
        params["tools"] = orjson.Fragment(canonical_tools(self.tools))
        params["system"] = system  # a tuple, written as the list a slice made
        # The canonical JSON of ``{**params, "messages": digest}`` is the keys before
        # "messages", the digest, then the keys after it (sorted keys, no spaces): the
        # digest's string is spliced between two objects' canonical bytes.
        before = _canonical({k: v for k, v in params.items() if k < "messages"})
        after = _canonical({k: v for k, v in params.items() if k > "messages"})
        head = before[:-1] + (b',"messages":' if len(before) > 2 else b'"messages":')
        tail = b"," + after[1:] if len(after) > 2 else b"}"
        return FingerprintFrame(head, tail, len(system))


@final
class FingerprintFrame:
    """A request's fingerprint less its conversation: :meth:`LLMRequest.fingerprint_frame`."""

    __slots__ = ("_head", "_tail", "system_count")

    def __init__(self, head: bytes, tail: bytes, system_count: int) -> None:
        self._head = head
        self._tail = tail
        self.system_count = system_count
        """How many system messages the request starts with (hashed here, not chained)."""

    def fingerprint(self, messages_digest: str) -> str:
        """The fingerprint of the request whose conversation (after the leading system
        messages) has the :func:`chain_messages` digest ``messages_digest``."""
        canonical = self._head + orjson.dumps(messages_digest) + self._tail
        return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _leading_system(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The system messages ``messages`` starts with. A view's are read from its lead, with
    no view built or indexed for them (a fingerprint is made at every model call)."""
    if type(messages) is MessageView:
        head = messages.lead
        for count, message in enumerate(head):
            if not isinstance(message, SystemMessage):
                return head[:count]
        count = len(head)
        if len(messages) == count or not isinstance(messages[count], SystemMessage):
            return head
    count = 0
    while count < len(messages) and isinstance(messages[count], SystemMessage):
        count += 1
    return tuple(messages[:count])


_REQUEST_PARAMS = tuple(
    a.name for a in attrs.fields(LLMRequest) if a.name not in {"messages", "tools"}
)

_AS_DICT: dict[type, Callable[[object], dict[str, object]]] = {}
"""Per attrs class met in a canonical form: the function that makes its dict."""


def _canonical_default(value: object) -> object:
    """What orjson cannot write itself, as ``attrs.asdict`` would have it: an attrs
    instance as the dict of its fields (their names looked up once per class), a set, a
    tuple subclass or another sequence (a ``MessageView``) as a list. orjson writes the
    rest (str, numbers, dicts, tuples, enums) as ``asdict`` + ``orjson.dumps`` did, so the
    canonical bytes hashed here stay the same; only the walk over the value moved from
    Python into orjson."""
    as_dict = _AS_DICT.get(type(value))
    if as_dict is None:
        cls = type(value)
        if not attrs.has(cls):
            if isinstance(value, Sequence | set | frozenset):
                return list(value)
            raise TypeError(f"Type is not JSON serializable: {cls.__name__}")
        as_dict = _AS_DICT[cls] = _as_dict_of(cls)
    return as_dict(value)


def _as_dict_of(cls: type) -> Callable[[object], dict[str, object]]:
    """A function from an instance of the attrs class ``cls`` to the dict of its fields,
    written for the class: a dict display reading each attribute, with no comprehension
    or ``getattr`` per field (a message is hashed at every turn)."""
    names = [a.name for a in attrs.fields(cls)]
    items = ", ".join(f"{name!r}: value.{name}" for name in names)
    namespace: dict[str, Any] = {}
    exec(f"def as_dict(value):\n    return {{{items}}}", namespace)  # code from field names
    as_dict: Callable[[object], dict[str, object]] = namespace["as_dict"]
    return as_dict


def _canonical(value: object) -> bytes:
    """The canonical JSON of ``value`` (sorted keys, tuples and sets as lists, attrs
    instances as dicts of their fields)."""
    return orjson.dumps(value, default=_canonical_default, option=orjson.OPT_SORT_KEYS)


@cache_by_identity
def canonical_tools(tools: tuple[ToolDefinition, ...]) -> bytes:
    """The canonical JSON of tool definitions (sorted keys, each tool as the dict of its
    fields): what a request's fingerprint hashes of its tools.

    Kept per tuple: a session offers the same tuple to every model call.
    """
    return _canonical(tools)


#: The :func:`chain_messages` digest of no messages.
EMPTY_CHAIN = hashlib.sha256(b"powertrio.messages.v1").hexdigest()


def chain_messages(digest: str, messages: Iterable[Message]) -> str:
    """Extend a hash chain over messages: one SHA-256 per message, in order.

    ``chain_messages(chain_messages(EMPTY_CHAIN, a), b) == chain_messages(EMPTY_CHAIN,
    [*a, b])``, so a transcript can carry its digest forward one message at a time.

    Args:
        digest (str): the chain so far (:data:`EMPTY_CHAIN` to start).
        messages (Iterable[Message]): the messages to add, oldest first.

    Returns:
        (str): the new chain digest, 64 hex digits.
    """
    for message in messages:
        digest = hashlib.sha256(digest.encode() + _canonical(message)).hexdigest()
    return digest


@final
@attrs.frozen(kw_only=True)
class Usage:
    """Token counts of one call, or a sum of calls (``Usage`` supports ``+``).

    ``prompt_tokens`` counts every input token, cached or not, on every provider (for
    Anthropic it is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``),
    so the figures compare across providers.
    """

    prompt_tokens: int = 0
    """Input tokens, including cached ones."""
    completion_tokens: int = 0
    """Generated tokens, including reasoning tokens."""
    cached_tokens: int = 0
    """Input tokens read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic)."""
    reasoning_tokens: int = 0
    """Generated tokens spent on reasoning, when the provider reports them."""

    @property
    def total_tokens(self) -> int:
        """Input plus generated tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        if type(other) is not Usage:  # final: the same test as isinstance
            return NotImplemented
        # Usage(...) without the frozen-attribute guard on each field: a session folds
        # three sums per model answer. The same object (a test compares them).
        total: Usage = _new_object(Usage)
        _SET_PROMPT(total, self.prompt_tokens + other.prompt_tokens)
        _SET_COMPLETION(total, self.completion_tokens + other.completion_tokens)
        _SET_CACHED(total, self.cached_tokens + other.cached_tokens)
        _SET_CACHE_WRITE(total, self.cache_write_tokens + other.cache_write_tokens)
        _SET_REASONING(total, self.reasoning_tokens + other.reasoning_tokens)
        return total


_new_object = object.__new__
_SET_PROMPT = slot_setter(Usage, "prompt_tokens")
_SET_COMPLETION = slot_setter(Usage, "completion_tokens")
_SET_CACHED = slot_setter(Usage, "cached_tokens")
_SET_CACHE_WRITE = slot_setter(Usage, "cache_write_tokens")
_SET_REASONING = slot_setter(Usage, "reasoning_tokens")


@final
@attrs.frozen(kw_only=True)
class LLMResponse:
    """The model's answer to one request."""

    content: str = ""
    """The text of the answer."""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    """The tool calls the model made, in order."""
    finish_reason: FinishReason = "stop"
    """Why the model stopped."""
    usage: Usage = Usage()
    """Token counts."""
    model: str = ""
    """The model that answered, as the provider names it."""
    thinking: tuple[ThinkingBlock, ...] = attrs.field(default=(), converter=_blocks)
    """Reasoning blocks (Anthropic); pass them back through :meth:`to_message`."""
    id: str | None = None
    """The provider's response id, when it sends one."""
    invalid_text_replaced: bool = False
    """True when the transport replaced invalid text from the provider (lone surrogates)
    with U+FFFD, so the answer differs from what was sent."""

    def to_message(self) -> AssistantMessage:
        """The assistant message to append to the transcript for the next request."""
        return AssistantMessage(
            content=self.content, tool_calls=self.tool_calls, thinking=self.thinking
        )
