"""The LLM vocabulary: values, fingerprints, usage sums, stream assembly, codec round trips."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator

import attrs
import orjson
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from protocols import (
    AssistantMessage,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    ResponseFormat,
    SystemMessage,
    TextPart,
    ThinkingBlock,
    ToolCall,
    ToolChoice,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocols.codec import make_converter
from protocols.errors import LLMMalformedStreamError
from protocols.lowlevel import (
    EMPTY_CHAIN,
    MessageView,
    cache_by_identity,
    canonical_tools,
    chain_messages,
    slot_setter,
)
from protocols.streaming import (
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

REQUEST = LLMRequest(
    messages=[
        SystemMessage("sys"),
        UserMessage([TextPart("look"), ImagePart(url="https://x/cat.png")]),
        AssistantMessage(
            content="ok",
            tool_calls=[ToolCall(id="c1", name="f", arguments='{"a": 1}')],
            thinking=[ThinkingBlock(thinking="t", signature="s")],
        ),
        ToolResultMessage(tool_call_id="c1", content="1", is_error=True),
    ],
    tools=[ToolDefinition(name="f", description="d", parameters={"type": "object"})],
    tool_choice=ToolChoice.required(),
    max_tokens=10,
    temperature=0.5,
    model="m",
    stop=["x"],
)


def test_user_message_accepts_a_string() -> None:
    """A bare string is one text part; `text` joins the text parts."""
    message = UserMessage("hello")
    assert message.content == (TextPart("hello"),)
    assert message.text == "hello"
    assert message.role == "user"


def test_fingerprint_is_stable_and_sensitive() -> None:
    """Equal requests share a fingerprint; any parameter change alters it."""
    same = attrs.evolve(REQUEST)
    assert same.fingerprint() == REQUEST.fingerprint()
    assert REQUEST.fingerprint().startswith("sha256:")
    assert len(REQUEST.fingerprint()) == len("sha256:") + 64
    changed = [
        attrs.evolve(REQUEST, temperature=0.6),
        attrs.evolve(REQUEST, model="n"),
        attrs.evolve(REQUEST, tools=()),
        attrs.evolve(REQUEST, messages=REQUEST.messages[:-1]),
        attrs.evolve(REQUEST, tool_choice=ToolChoice.auto()),
    ]
    prints = {r.fingerprint() for r in changed} | {REQUEST.fingerprint()}
    assert len(prints) == 6


def test_fingerprint_known_value() -> None:
    """The fingerprint does not drift between versions (recorded logs depend on it).

    If this fails, a change altered the canonical form of requests: replays of old logs
    would report divergence. Bump deliberately, with a note in the changelog.
    """
    request = LLMRequest(messages=[UserMessage("hi")])
    assert request.fingerprint() == (
        "sha256:d5a60635537b9162479a53586bcc6af5f3f8bacd60ce4d94869b2b37828d7076"
    )
    assert request.fingerprint() != LLMRequest(messages=[SystemMessage("hi")]).fingerprint()


RICH_REQUEST = LLMRequest(
    messages=[
        SystemMessage('You are "terse".\n'),
        SystemMessage("Second: \u00e9 \u2713"),
        UserMessage([TextPart("look"), ImagePart(url="https://x/cat.png", detail="low")]),
        AssistantMessage(
            content="ok",
            tool_calls=[ToolCall(id="c1", name="f", arguments='{"a": 1}')],
            thinking=[ThinkingBlock(thinking="t", signature="s")],
        ),
        ToolResultMessage(tool_call_id="c1", content="1", is_error=True),
        UserMessage("and now?"),
    ],
    tools=[
        ToolDefinition(
            name="f",
            description="d",
            parameters={"type": "object", "properties": {"messages": {"default": None}}},
        ),
        ToolDefinition(name="g", description="", parameters={}),
    ],
    tool_choice=ToolChoice.required(),
    response_format=ResponseFormat(name="answer", schema={"type": "object", "required": ["x"]}),
    max_tokens=10,
    temperature=0.5,
    model="m",
    stop=["x", "y"],
    thinking_budget=64,
)


def test_fingerprint_known_values_of_every_parameter() -> None:
    """Every parameter, leading system messages, tools and a digest JSON must escape hash
    as they always have: sessions' recorded logs hold these fingerprints, and a resumed or
    replayed session compares its requests' with them."""
    assert RICH_REQUEST.fingerprint() == (
        "sha256:d7b2fa13bc5027ee26ae423eda9551db31832573b4c87ec8b39549472be38c12"
    )
    assert RICH_REQUEST.fingerprint(messages_digest='abc"\\\u00e9\u2028') == (
        "sha256:0584cd748a85a97bd6758255926ff8c864fee3ddb99c3c5351a282bd58ad90ea"
    )
    schema = ResponseFormat(name="n", schema={"type": "object"})
    request = LLMRequest(messages=[UserMessage("hi")], thinking_budget=5, response_format=schema)
    assert request.fingerprint() == (
        "sha256:7b5822bff49f27f94ce003d045527ed466a89d6dbfd3d5379e90f8f567cf178a"
    )
    assert RICH_REQUEST.fingerprint() == _reference_fingerprint(RICH_REQUEST)


def test_fingerprint_frame_is_the_request_less_its_conversation() -> None:
    """A frame kept from one request fingerprints any conversation under the same
    parameters and system messages as the request holding it would."""
    frame = RICH_REQUEST.fingerprint_frame()
    assert frame.system_count == 2
    for cut in (2, 3, 5, 6):
        request = attrs.evolve(RICH_REQUEST, messages=RICH_REQUEST.messages[:cut])
        digest = chain_messages(EMPTY_CHAIN, request.messages[2:])
        assert frame.fingerprint(digest) == request.fingerprint()
    assert frame.fingerprint(EMPTY_CHAIN) != attrs.evolve(RICH_REQUEST, model="n").fingerprint(
        messages_digest=EMPTY_CHAIN
    )


def _reference_fingerprint(request: LLMRequest) -> str:
    """The fingerprint as first written, with ``attrs.asdict`` (the canonical form)."""
    lead = 0
    while lead < len(request.messages) and isinstance(request.messages[lead], SystemMessage):
        lead += 1
    digest = EMPTY_CHAIN
    for message in request.messages[lead:]:
        canonical = orjson.dumps(attrs.asdict(message), option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(digest.encode() + canonical).hexdigest()
    params = attrs.asdict(request, filter=lambda a, _v: a.name != "messages")
    params["system"] = [attrs.asdict(m) for m in request.messages[:lead]]
    params["messages"] = digest
    canonical = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


_texts = st.text(max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=8,
)
_calls = st.builds(ToolCall, id=_texts, name=_texts, arguments=_texts)
_messages = st.one_of(
    st.builds(SystemMessage, _texts),
    st.builds(UserMessage, _texts),
    st.builds(
        UserMessage,
        st.lists(
            st.builds(TextPart, _texts)
            | st.builds(ImagePart, url=_texts, detail=st.sampled_from([None, "low", "high"])),
            max_size=3,
        ),
    ),
    st.builds(
        AssistantMessage,
        content=_texts,
        tool_calls=st.lists(_calls, max_size=2).map(tuple),
        thinking=st.lists(st.builds(ThinkingBlock, thinking=_texts), max_size=1).map(tuple),
    ),
    st.builds(ToolResultMessage, tool_call_id=_texts, content=_texts, is_error=st.booleans()),
)
_definitions = st.builds(
    ToolDefinition,
    name=_texts,
    description=_texts,
    parameters=st.dictionaries(_texts, _json, max_size=3),
)


@given(
    messages=st.lists(_messages, min_size=1, max_size=5),
    tools=st.lists(_definitions, max_size=3),
    model=st.none() | _texts,
    stop=st.lists(_texts, max_size=2),
    temperature=st.none() | st.floats(0, 2),
    choice=st.none() | st.builds(ToolChoice.tool, _texts) | st.just(ToolChoice.required()),
    response_format=st.none()
    | st.builds(ResponseFormat, name=_texts, schema=st.dictionaries(_texts, _json, max_size=3)),
    max_tokens=st.none() | st.integers(1, 2**31),
)
def test_the_fingerprint_keeps_its_canonical_form(
    messages: list[Message],
    tools: list[ToolDefinition],
    model: str | None,
    stop: list[str],
    temperature: float | None,
    choice: ToolChoice | None,
    response_format: ResponseFormat | None,
    max_tokens: int | None,
) -> None:
    """The fast canonical form hashes exactly what ``attrs.asdict`` made (recorded logs
    hold these fingerprints), also when the same tools tuple is offered again."""
    request = LLMRequest(
        messages=messages,
        tools=tools,
        model=model,
        stop=stop,
        temperature=temperature,
        tool_choice=choice,
        response_format=response_format,
        max_tokens=max_tokens,
    )
    assert request.fingerprint() == _reference_fingerprint(request)
    again = LLMRequest(messages=messages[::-1], tools=request.tools, model=model)
    assert again.fingerprint() == _reference_fingerprint(again)


@given(
    lead=st.lists(_messages, max_size=3),
    items=st.lists(_messages, max_size=4),
    start=st.integers(0, 4),
)
def test_a_view_has_the_fingerprint_of_its_tuple(
    lead: list[Message], items: list[Message], start: int
) -> None:
    """A request holding a view (a lead of system prompts or not, the window's first items
    system messages or not) fingerprints as the same request holding a tuple."""
    start = min(start, len(items))
    view = MessageView(items, start, lead=lead)
    expected = LLMRequest(messages=tuple(view)).fingerprint()
    assert LLMRequest(messages=view).fingerprint() == expected


@given(tools=st.lists(_definitions, max_size=3))
def test_canonical_tools_are_the_sorted_json_of_their_fields(tools: list[ToolDefinition]) -> None:
    """What a request header's ``tools_digest`` hashes: the same bytes it hashed when it
    built them with ``attrs.asdict`` (recorded headers hold these digests)."""
    definitions = tuple(tools)
    expected = orjson.dumps([attrs.asdict(t) for t in definitions], option=orjson.OPT_SORT_KEYS)
    assert canonical_tools(definitions) == expected
    assert canonical_tools(definitions) == expected  # from the cache, the same


def test_a_carried_chain_gives_the_same_fingerprint_as_hashing_everything() -> None:
    """Extending the chain one message at a time equals hashing the transcript at once."""
    rest = REQUEST.messages[1:]
    chain = EMPTY_CHAIN
    for message in rest:
        chain = chain_messages(chain, [message])
    assert chain_messages(EMPTY_CHAIN, rest) == chain
    assert REQUEST.fingerprint() == REQUEST.fingerprint(messages_digest=chain)
    assert REQUEST.fingerprint() != REQUEST.fingerprint(messages_digest=EMPTY_CHAIN)


def test_the_chain_depends_on_order_and_content() -> None:
    """Swapping two messages or changing one changes the chain."""
    a, b = UserMessage("a"), UserMessage("b")
    chains = {
        chain_messages(EMPTY_CHAIN, [a, b]),
        chain_messages(EMPTY_CHAIN, [b, a]),
        chain_messages(EMPTY_CHAIN, [a, UserMessage("c")]),
        chain_messages(EMPTY_CHAIN, [a]),
        EMPTY_CHAIN,
    }
    assert len(chains) == 5


def test_tool_choice_validation() -> None:
    """`tool` mode needs a name and other modes refuse one."""
    assert ToolChoice.tool("f") == ToolChoice("tool", "f")
    with pytest.raises(ValueError, match="needs a name exactly when mode is 'tool'"):
        ToolChoice("tool")
    with pytest.raises(ValueError, match="needs a name exactly when mode is 'tool'"):
        ToolChoice("auto", "f")


usages = st.builds(
    Usage,
    prompt_tokens=st.integers(0, 10**6),
    completion_tokens=st.integers(0, 10**6),
    cached_tokens=st.integers(0, 10**6),
    cache_write_tokens=st.integers(0, 10**6),
    reasoning_tokens=st.integers(0, 10**6),
)


@given(usages, usages, usages)
def test_usage_addition(a: Usage, b: Usage, c: Usage) -> None:
    """`+` adds field by field, is associative and commutative, with Usage() as zero."""
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert a + Usage() == a
    assert (a + b).total_tokens == a.total_tokens + b.total_tokens


texts = st.text(max_size=40)
responses = st.builds(
    LLMResponse,
    content=texts,
    tool_calls=st.lists(
        st.builds(
            ToolCall,
            id=st.text(min_size=1, max_size=5),
            name=st.text(min_size=1, max_size=5),
            arguments=texts,
        ),
        max_size=3,
    ).map(tuple),
    finish_reason=st.sampled_from(["stop", "length", "tool_calls", "content_filter", "other"]),
    usage=usages,
    thinking=st.lists(
        st.builds(
            ThinkingBlock, thinking=texts, signature=st.none() | texts, redacted=st.booleans()
        ),
        max_size=2,
    ).map(tuple),
)


@given(responses, st.integers(1, 7))
def test_deltas_assemble_back(response: LLMResponse, chunk_size: int) -> None:
    """Splitting a response into deltas and assembling them gives the response back."""
    assembler = StreamAssembler()
    for delta in response_deltas(response, chunk_size=chunk_size):
        assembler.add(delta)
    assert assembler.response() == attrs.evolve(response, model="", id=None)


def test_response_deltas_rejects_bad_chunk_size() -> None:
    """chunk_size must be positive."""
    with pytest.raises(ValueError, match="chunk_size must be positive, got 0"):
        response_deltas(LLMResponse(), chunk_size=0)


def test_assembler_rejects_headless_tool_fragment() -> None:
    """A fragment of an unknown call is a malformed stream."""
    assembler = StreamAssembler()
    with pytest.raises(LLMMalformedStreamError) as info:
        assembler.add(ToolCallDelta(index=2, arguments="{"))
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == (
        "tool call fragment #2 arrived before the fragment carrying its id and name"
    )


def test_assembler_defaults_and_thinking_signature() -> None:
    """Without a finish delta, calls mean tool_calls; signatures attach to their block."""
    assembler = StreamAssembler()
    deltas: list[StreamDelta] = [
        ThinkingDelta(index=0, text="a"),
        ThinkingDelta(index=0, text="b"),
        ThinkingDelta(index=0, signature="sig"),
        ToolCallDelta(index=0, id="1", name="f", arguments="{}"),
        UsageDelta(Usage(prompt_tokens=1)),
        UsageDelta(Usage(prompt_tokens=2)),
    ]
    for delta in deltas:
        assembler.add(delta)
    response = assembler.response(model="m", id="r")
    assert response.finish_reason == "tool_calls"
    assert response.thinking == (ThinkingBlock(thinking="ab", signature="sig"),)
    assert response.usage == Usage(prompt_tokens=2)
    assert (response.model, response.id) == ("m", "r")
    assert response.to_message() == AssistantMessage(
        tool_calls=response.tool_calls, thinking=response.thinking
    )


def test_codec_round_trip() -> None:
    """Requests and responses survive the event codec (cattrs on orjson)."""
    converter = make_converter()
    assert converter.structure(converter.unstructure(REQUEST), LLMRequest) == REQUEST
    response = LLMResponse(
        content="x",
        tool_calls=[ToolCall(id="1", name="f", arguments="{}")],
        usage=Usage(prompt_tokens=3, cached_tokens=1),
        model="m",
        id="i",
        thinking=[ThinkingBlock(thinking="t", redacted=True)],
    )
    assert converter.structure(converter.unstructure(response), LLMResponse) == response


async def _source(
    items: list[StreamDelta | LLMResponse],
) -> AsyncGenerator[StreamDelta | LLMResponse, None]:
    for item in items:
        yield item


async def test_stream_object() -> None:
    """An LLMStream yields deltas, stops at the response, and keeps it."""
    final = LLMResponse(content="hi")
    stream = LLMStream(lambda: _source([TextDelta("hi"), FinishDelta("stop"), final]))
    async with stream:
        assert [d async for d in stream] == [TextDelta("hi"), FinishDelta("stop")]
        assert stream.response == final
        assert await stream.final_response() == final


async def test_stream_misuse() -> None:
    """Iterating outside `async with`, entering twice, or a source without a response fail."""
    stream = LLMStream(lambda: _source([]))
    with pytest.raises(RuntimeError, match=r"inside `async with llm\.stream"):
        await stream.final_response()
    async with stream:
        with pytest.raises(LLMMalformedStreamError) as info:
            await stream.final_response()
    assert info.value.code == "llm.malformed_stream"
    assert str(info.value) == "the stream ended before the response was complete"
    with pytest.raises(RuntimeError, match="can be entered only once"):
        async with stream:
            pass


async def test_entering_a_stream_is_a_cancel_point_that_sends_at_once() -> None:
    """Entering checks for cancellation but lets no other task run first: the first read,
    which sends the request, comes right after (time to first token)."""
    order: list[str] = []

    async def other() -> None:
        order.append("other task")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        async with LLMStream(lambda: _source([LLMResponse(content="hi")])):
            order.append("entered")
    assert order == ["entered", "other task"]
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            async with LLMStream(lambda: _source([LLMResponse(content="hi")])):
                order.append("entered while cancelled")
    assert order == ["entered", "other task"]


def test_every_message_type_has_text() -> None:
    """One name for a message's text on every type of the ``Message`` union, so a model
    function reads ``request.messages[-1].text`` with no type narrowing first."""
    from protocols import AssistantMessage, SystemMessage, ToolResultMessage, UserMessage

    messages = [
        SystemMessage("be brief"),
        UserMessage("hello"),
        AssistantMessage(content="hi there"),
        ToolResultMessage(tool_call_id="c1", content='{"ok": true}'),
    ]
    assert [m.text for m in messages] == ["be brief", "hello", "hi there", '{"ok": true}']


@given(
    a=st.lists(st.integers(0, 2**40), min_size=5, max_size=5),
    b=st.lists(st.integers(0, 2**40), min_size=5, max_size=5),
)
def test_a_sum_of_usages_is_the_usage_of_the_sums(a: list[int], b: list[int]) -> None:
    """``Usage + Usage`` (built through its slots) is the usual frozen value."""
    names = [f.name for f in attrs.fields(Usage)]
    total = Usage(**dict(zip(names, a, strict=True))) + Usage(**dict(zip(names, b, strict=True)))
    built = Usage(**{n: x + y for n, x, y in zip(names, a, b, strict=True)})
    assert (total, hash(total), repr(total)) == (built, hash(built), repr(built))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        total.prompt_tokens = 0  # type: ignore[misc]  # frozen: mypy knows, this checks the runtime


def test_a_slot_setter_names_a_field_the_class_does_not_have() -> None:
    """``slot_setter`` of a name that is no slot of the class fails at once, naming it."""
    with pytest.raises(KeyError, match="prompt_token"):
        slot_setter(Usage, "prompt_token")


def test_cache_by_identity_computes_once_per_object_and_starts_afresh_past_256() -> None:
    """The same object is computed once; an equal but distinct one is computed again (the
    cache keys by identity); after 256 other objects the first is computed again."""
    calls: list[tuple[int, ...]] = []

    @cache_by_identity
    def total(values: tuple[int, ...]) -> int:
        calls.append(values)
        return sum(values)

    first = (1, 2)
    assert (total(first), total(first)) == (3, 3)
    assert [first] == calls
    twin = tuple([1, 2])
    assert total(twin) == 3
    assert len(calls) == 2
    others = [(i, 0) for i in range(256)]
    for other in others:
        total(other)
    assert total(first) == 3
    assert first is calls[-1]
