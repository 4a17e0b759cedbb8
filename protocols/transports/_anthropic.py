"""Anthropic Messages over httpx: system prompt, tool use, thinking, prompt caching, SSE."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, final

import attrs
import orjson

from protocols._llm import (
    AssistantMessage,
    FinishReason,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    SystemMessage,
    TextPart,
    ThinkingBlock,
    ToolCall,
    Usage,
    UserMessage,
)
from protocols._llm_stream import (
    FinishDelta,
    StreamAssembler,
    StreamDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageDelta,
)
from protocols._tools import MAX_ARGUMENT_DEPTH, nests_deeper_than
from protocols.errors import LLMBadRequestError

from ._base import HTTPTransport, JsonDict, StreamParser
from ._errors import error_from_body
from ._sse import ServerSentEvent

__all__ = ["AnthropicTransport"]

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_CACHE = {"type": "ephemeral"}


def _finish(raw: object) -> FinishReason:
    return _FINISH.get(str(raw), "other")


def _usage(data: Any, *, output_tokens: int | None = None) -> Usage:
    """Our usage from Anthropic's: ``prompt_tokens`` counts cached input too."""
    if not isinstance(data, dict):
        return Usage()
    fresh = int(data.get("input_tokens") or 0)
    read = int(data.get("cache_read_input_tokens") or 0)
    written = int(data.get("cache_creation_input_tokens") or 0)
    out = int(data.get("output_tokens") or 0) if output_tokens is None else output_tokens
    return Usage(
        prompt_tokens=fresh + read + written,
        completion_tokens=out,
        cached_tokens=read,
        cache_write_tokens=written,
    )


def _image(part: ImagePart) -> JsonDict:
    if part.url.startswith("data:"):
        header, _, data = part.url.partition(",")
        media_type = header[len("data:") :].split(";")[0] or "image/png"
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": part.url}}


def _tool_input(arguments: str) -> object:
    """The tool-use ``input`` object for a call's raw arguments.

    Anthropic wants an object; a model's invalid JSON is passed back under
    ``_raw_arguments`` so the transcript stays valid and nothing is lost. So are arguments
    nested too deep to be a tool's (they were refused as invalid): orjson writes no more
    than 255 levels, and the request body would fail to encode. Text shorter than the limit
    cannot nest deeper than it, so the usual call is not walked.
    """
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    if not isinstance(value, dict) or (
        len(arguments) > MAX_ARGUMENT_DEPTH and nests_deeper_than(value, MAX_ARGUMENT_DEPTH)
    ):
        return {"_raw_arguments": arguments}
    return value


def _blocks(message: Message) -> tuple[Literal["user", "assistant"], list[JsonDict]]:
    if isinstance(message, UserMessage):
        return "user", [
            {"type": "text", "text": p.text} if isinstance(p, TextPart) else _image(p)
            for p in message.content
        ]
    if isinstance(message, AssistantMessage):
        blocks: list[JsonDict] = []
        for block in message.thinking:
            if block.redacted:
                blocks.append({"type": "redacted_thinking", "data": block.thinking})
            else:
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": block.thinking,
                        "signature": block.signature or "",
                    }
                )
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
            for c in message.tool_calls
        )
        return "assistant", blocks
    assert not isinstance(message, SystemMessage)  # system messages go to `system`
    return "user", [
        {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
            "is_error": message.is_error,
        }
    ]


@final
class AnthropicTransport(HTTPTransport):
    """Anthropic Messages (``POST {base_url}/v1/messages``) with SSE streaming.

    System messages become the top-level ``system`` prompt. Tool results become
    ``tool_result`` blocks of a user turn (consecutive turns of one role are merged, as the
    API wants). Thinking blocks are kept on responses and passed back unchanged. With
    ``prompt_cache`` on, cache breakpoints mark the stable prefix: the last tool, the
    system prompt and the last message, so the next round of a tool loop reads them from
    the cache.

    Args:
        config (ProviderConfig): ``provider`` should be ``"anthropic"``.
        client (httpx.AsyncClient | None): a shared client, or None to own one.
        on_attempt (AttemptObserver | None): told about every attempt.
        rand (Callable[[], float] | None): jitter source for retries.
    """

    provider: ClassVar[str] = "anthropic"

    def _path(self) -> str:
        return "/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self._config.anthropic_version}
        if self._config.api_key is not None:
            headers["x-api-key"] = self._config.api_key.reveal()
        return headers

    def _body(self, request: LLMRequest, *, stream: bool) -> JsonDict:
        if request.response_format is not None:
            msg = (
                "anthropic: response_format is not supported by the Messages transport; "
                "offer a tool with that schema and force it with ToolChoice.tool(name)"
            )
            raise LLMBadRequestError(msg, provider=self.provider)
        cache = self._config.prompt_cache
        system: list[JsonDict] = [
            {"type": "text", "text": m.content}
            for m in request.messages
            if isinstance(m, SystemMessage)
        ]
        turns: list[JsonDict] = []
        for message in request.messages:
            if isinstance(message, SystemMessage):
                continue
            role, blocks = _blocks(message)
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        body: JsonDict = {
            "model": request.model or self._config.model,
            "max_tokens": request.max_tokens or self._config.default_max_tokens,
            "messages": turns,
        }
        if system:
            if cache:
                system[-1]["cache_control"] = _CACHE
            body["system"] = system
        if cache and turns and turns[-1]["content"]:
            turns[-1]["content"][-1]["cache_control"] = _CACHE
        if request.tools:
            tools: list[JsonDict] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            if cache:
                tools[-1]["cache_control"] = _CACHE
            body["tools"] = tools
        choice = request.tool_choice
        if choice is not None:
            if choice.mode == "tool":
                body["tool_choice"] = {"type": "tool", "name": choice.name}
            elif choice.mode == "required":
                body["tool_choice"] = {"type": "any"}
            else:
                body["tool_choice"] = {"type": choice.mode}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        if request.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
        if stream:
            body["stream"] = True
        return body

    def _parse(self, data: JsonDict) -> LLMResponse:
        if data.get("type") == "error":
            raise error_from_body(self.provider, orjson.dumps(data).decode(), secrets=self._secrets)
        content = data.get("content")
        if not isinstance(content, list):
            raise self._malformed("the answer has no content")
        if not content and not data.get("stop_reason"):
            raise self._malformed("the answer has no content block and no stop reason")
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[ThinkingBlock] = []
        for block in content:
            kind = block["type"]
            if kind == "text":
                text.append(str(block["text"]))
            elif kind == "tool_use":
                calls.append(
                    ToolCall(
                        id=str(block["id"]),
                        name=str(block["name"]),
                        arguments=orjson.dumps(block.get("input") or {}).decode(),
                    )
                )
            elif kind == "thinking":
                thinking.append(
                    ThinkingBlock(thinking=str(block["thinking"]), signature=block.get("signature"))
                )
            elif kind == "redacted_thinking":
                thinking.append(ThinkingBlock(thinking=str(block["data"]), redacted=True))
        return LLMResponse(
            content="".join(text),
            tool_calls=tuple(calls),
            finish_reason=_finish(data.get("stop_reason")),
            usage=_usage(data.get("usage")),
            model=str(data.get("model") or ""),
            thinking=tuple(thinking),
            id=data.get("id"),
        )

    def _keepalive(self, event: ServerSentEvent) -> bool:
        """Anthropic's ``ping`` events carry no data; they do not reset the idle timeout."""
        return event.event == "ping"

    def _stream_parser(self) -> StreamParser:
        return _StreamState(transport=self).event


@attrs.define
class _StreamState:
    """What a Messages stream has said so far, and the deltas each event adds."""

    transport: AnthropicTransport
    assembler: StreamAssembler = attrs.Factory(StreamAssembler)
    started: bool = False
    model: str = ""
    response_id: str | None = None
    start_usage: JsonDict = attrs.Factory(dict)
    # Anthropic numbers content blocks across kinds; we number tool calls and thinking
    # blocks separately, so each block's kind and our index are kept.
    blocks: dict[int, tuple[str, int]] = attrs.Factory(dict)
    got_arguments: set[int] = attrs.Factory(set)
    tools: int = 0
    thinking: int = 0

    def event(self, event: ServerSentEvent) -> Sequence[StreamDelta | LLMResponse]:
        """The items ``event`` adds: its deltas, or the whole response at ``message_stop``."""
        transport = self.transport
        data = transport._decode(event.data, f"the {event.event!r} event")
        kind = data.get("type", event.event)
        if kind == "message_stop":
            if not self.started:
                raise transport._malformed("the stream has no message_start event")
            if not self.blocks and self.assembler.finish_reason is None:
                raise transport._malformed(
                    "the stream ended with no content block and no stop reason"
                )
            return [self.assembler.response(model=self.model, id=self.response_id)]
        if kind == "error":
            raise error_from_body(transport.provider, event.data, secrets=transport._secrets)
        deltas = self.deltas(kind, data)
        for delta in deltas:
            self.assembler.add(delta)
        return deltas

    def deltas(self, kind: str, data: JsonDict) -> list[StreamDelta]:
        """The deltas one event adds ("ping" and unknown event types add none)."""
        if kind == "message_start":
            message = data["message"]
            self.started = True
            self.model = str(message.get("model") or "")
            self.response_id = message.get("id")
            self.start_usage = message.get("usage") or {}
            return [UsageDelta(_usage(self.start_usage))]
        if kind == "content_block_start":
            return self._block_start(int(data["index"]), data["content_block"])
        if kind == "content_block_delta":
            return self._block_delta(int(data["index"]), data["delta"])
        if kind == "content_block_stop":
            block_kind, ours = self.blocks[int(data["index"])]
            if block_kind == "tool" and ours not in self.got_arguments:
                return [ToolCallDelta(index=ours, arguments="{}")]
            return []
        if kind == "message_delta":
            out: list[StreamDelta] = []
            reason = (data.get("delta") or {}).get("stop_reason")
            if reason:
                out.append(FinishDelta(_finish(reason)))
            usage = data.get("usage") or {}
            if usage:
                fresh = {k: v for k, v in usage.items() if v is not None}
                out.append(UsageDelta(_usage({**self.start_usage, **fresh})))
            return out
        return []

    def _block_start(self, index: int, block: JsonDict) -> list[StreamDelta]:
        if block["type"] == "tool_use":
            self.blocks[index] = ("tool", self.tools)
            self.tools += 1
            return [ToolCallDelta(index=self.tools - 1, id=block["id"], name=block["name"])]
        if block["type"] in ("thinking", "redacted_thinking"):
            self.blocks[index] = ("thinking", self.thinking)
            self.thinking += 1
            redacted = block["type"] == "redacted_thinking"
            return [
                ThinkingDelta(
                    index=self.thinking - 1,
                    text=str(block.get("data" if redacted else "thinking") or ""),
                    signature=block.get("signature") or None,
                    redacted=redacted,
                )
            ]
        self.blocks[index] = ("text", 0)
        return [TextDelta(str(block["text"]))] if block.get("text") else []

    def _block_delta(self, index: int, delta: JsonDict) -> list[StreamDelta]:
        _, ours = self.blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            return [TextDelta(str(delta["text"]))]
        if kind == "input_json_delta":
            self.got_arguments.add(ours)
            return [ToolCallDelta(index=ours, arguments=str(delta["partial_json"]))]
        if kind == "thinking_delta":
            return [ThinkingDelta(index=ours, text=str(delta["thinking"]))]
        if kind == "signature_delta":
            return [ThinkingDelta(index=ours, signature=str(delta["signature"]))]
        return []
