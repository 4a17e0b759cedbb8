"""OpenAI-compatible Chat Completions over httpx (OpenAI, llama.cpp, vLLM, and the like)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, final

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
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols._llm_stream import (
    FinishDelta,
    StreamAssembler,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
)

from ._base import HTTPTransport, JsonDict, StreamParser
from ._errors import error_from_body
from ._sse import ServerSentEvent

__all__ = ["OpenAITransport"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def _finish(raw: object) -> FinishReason:
    return _FINISH.get(str(raw), "other")


def _usage(data: Any) -> Usage:
    """Our usage from OpenAI's, including cached and reasoning tokens when reported."""
    if not isinstance(data, dict):
        return Usage()
    prompt_details = data.get("prompt_tokens_details") or {}
    completion_details = data.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=int(data.get("prompt_tokens") or 0),
        completion_tokens=int(data.get("completion_tokens") or 0),
        cached_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
    )


def _message(message: Message) -> JsonDict:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        parts = message.content
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            return {"role": "user", "content": parts[0].text}
        content: list[JsonDict] = []
        for part in parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append({"type": "image_url", "image_url": _image(part)})
        return {"role": "user", "content": content}
    if isinstance(message, AssistantMessage):
        out: JsonDict = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        return out
    return _tool_result(message)


def _image(part: ImagePart) -> JsonDict:
    image: JsonDict = {"url": part.url}
    if part.detail is not None:
        image["detail"] = part.detail
    return image


def _tool_result(message: ToolResultMessage) -> JsonDict:
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}


@final
class OpenAITransport(HTTPTransport):
    """Chat Completions (``POST {base_url}/chat/completions``) with SSE streaming.

    Speaks to OpenAI and to any server implementing the same API (llama.cpp's server,
    vLLM, Ollama, ...). Streams ask for usage (``stream_options.include_usage``); tool-call
    arguments arriving in fragments are joined by index. Thinking blocks on assistant
    messages are not sent (the API has no field for them).

    Args:
        config (ProviderConfig): ``provider`` should be ``"openai"``.
        client (httpx.AsyncClient | None): a shared client, or None to own one.
        on_attempt (AttemptObserver | None): told about every attempt.
        rand (Callable[[], float] | None): jitter source for retries.
    """

    provider: ClassVar[str] = "openai"

    def _path(self) -> str:
        return "/chat/completions"

    def _headers(self) -> dict[str, str]:
        if self._config.api_key is None:
            return {}
        return {"authorization": f"Bearer {self._config.api_key.reveal()}"}

    def _body(self, request: LLMRequest, *, stream: bool) -> JsonDict:
        body: JsonDict = {
            "model": request.model or self._config.model,
            "messages": [_message(m) for m in request.messages],
        }
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop:
            body["stop"] = list(request.stop)
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        choice = request.tool_choice
        if choice is not None:
            if choice.mode == "tool":
                body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
            else:
                body["tool_choice"] = choice.mode
        if request.response_format is not None:
            fmt = request.response_format
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": fmt.name, "schema": fmt.schema, "strict": fmt.strict},
            }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _parse(self, data: JsonDict) -> LLMResponse:
        if "error" in data:
            raise error_from_body(self.provider, _dumps(data), secrets=self._secrets)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self._malformed("the answer has no choices")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise self._malformed("a choice has no message")
        calls = tuple(
            ToolCall(
                id=str(call["id"]),
                name=str(call["function"]["name"]),
                arguments=str(call["function"].get("arguments") or "{}"),
            )
            for call in message.get("tool_calls") or ()
        )
        raw_finish = choice.get("finish_reason")
        content = str(message.get("content") or "")
        if not (content or calls or raw_finish):
            raise self._malformed("the answer has no text, no tool call and no finish reason")
        return LLMResponse(
            content=content,
            tool_calls=calls,
            finish_reason=_finish(raw_finish)
            if raw_finish
            else ("tool_calls" if calls else "stop"),
            usage=_usage(data.get("usage")),
            model=str(data.get("model") or ""),
            id=data.get("id"),
        )

    def _stream_parser(self) -> StreamParser:
        return _Stream(self).event


@attrs.define(eq=False)
class _Stream:
    """What one Chat Completions stream has said so far, and the items each event adds."""

    transport: OpenAITransport
    assembler: StreamAssembler = attrs.Factory(StreamAssembler)
    model: str = ""
    response_id: str | None = None
    saw_choice: bool = False
    said_something: bool = False
    """Text, a tool call or a finish reason arrived."""

    def event(self, event: ServerSentEvent) -> Sequence[StreamDelta | LLMResponse]:
        """The items ``event`` adds: its deltas, or the whole response at ``[DONE]``."""
        transport = self.transport
        if event.data.strip() == "[DONE]":
            if not self.saw_choice:
                raise transport._malformed("the stream ended without any choice")
            if not self.said_something:
                raise transport._malformed(
                    "the stream ended with no text, no tool call and no finish reason"
                )
            return [self.assembler.response(model=self.model, id=self.response_id)]
        if event.event == "error":
            raise error_from_body(transport.provider, event.data, secrets=transport._secrets)
        chunk = transport._decode(event.data, "a stream event")
        if "error" in chunk:
            raise error_from_body(transport.provider, event.data, secrets=transport._secrets)
        choices = chunk.get("choices")
        # The usage report may come without choices; Azure opens with `"choices": []`.
        if not isinstance(choices, list) and not chunk.get("usage"):
            raise transport._malformed("a stream chunk has no choices")
        if choices:
            self.saw_choice = True
            choice = choices[0]
            if not isinstance(choice.get("delta"), dict) and not choice.get("finish_reason"):
                raise transport._malformed("a choice has no delta")
        self.model = str(chunk.get("model") or self.model)
        self.response_id = chunk.get("id") or self.response_id
        deltas = _chunk_deltas(chunk)
        for delta in deltas:
            self.said_something = self.said_something or not isinstance(delta, UsageDelta)
            self.assembler.add(delta)
        return deltas


def _chunk_deltas(chunk: JsonDict) -> list[StreamDelta]:
    """The deltas carried by one ``chat.completion.chunk`` (first choice only)."""
    out: list[StreamDelta] = []
    choices = chunk.get("choices") or []
    if choices:
        choice = choices[0]
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if text:
            out.append(TextDelta(str(text)))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            out.append(
                ToolCallDelta(
                    index=int(call.get("index", 0)),
                    id=call.get("id"),
                    name=function.get("name"),
                    arguments=str(function.get("arguments") or ""),
                )
            )
        if choice.get("finish_reason"):
            out.append(FinishDelta(_finish(choice["finish_reason"])))
    if chunk.get("usage"):
        out.append(UsageDelta(_usage(chunk["usage"])))
    return out


def _dumps(data: JsonDict) -> str:
    return orjson.dumps(data).decode()
