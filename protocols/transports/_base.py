"""The transport base class, and the shared machinery of the HTTP transports."""

from __future__ import annotations

import json
import logging
import random as _random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self, TypeAlias, cast

import attrs
import httpx
import orjson
import trio

from protocols._llm import LLMRequest, LLMResponse
from protocols._llm_stream import LLMStream, StreamDelta
from protocols.errors import LLMMalformedStreamError, LLMTimeoutError

from ._config import ProviderConfig, open_http_client
from ._errors import error_from_status, map_httpx_errors
from ._repair import repair
from ._retry import AttemptObserver, call_with_retries
from ._sse import ServerSentEvent, SSEDecoder

__all__ = ["HTTPTransport", "Transport"]

logger = logging.getLogger("powertrio.transports")

#: What a provider's JSON of the wrong shape raises while we read it.
_SHAPE_ERRORS = (KeyError, TypeError, IndexError, AttributeError, ValueError)

#: A decoded JSON object from a provider (values are whatever orjson produced).
JsonDict = dict[str, Any]

#: One stream's parser: the items each event adds, in order (an ``LLMResponse`` last, at
#: the terminal event). It keeps the stream's state between calls and raises ``LLMError``
#: for an error event or an answer that breaks the provider's rules.
StreamParser: TypeAlias = Callable[[ServerSentEvent], Sequence[StreamDelta | LLMResponse]]

#: The most we wait, after the terminal event, for the end of the body (see ``_drain``).
_DRAIN_SECONDS = 0.05
#: The most bytes we read after the terminal event before giving the connection up.
_DRAIN_BYTES = 65536
#: Bytes that count as progress toward a data event: a stream bringing this much of an
#: event in progress is not idle, however long the event (one of many megabytes takes many
#: reads), while a few trickled bytes or keep-alives are.
_PROGRESS_BYTES = 65536


class Transport:
    """The base of every LLM transport: ``complete``, ``stream`` and ``aclose``.

    Like httpx's transports it is a plain class whose methods raise ``NotImplementedError``,
    not an ABC. It satisfies the :class:`~protocols.LLM` protocol, which is what the session
    actor depends on; the actor receives a transport and never builds an HTTP client.
    """

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` in one piece.

        Raises:
            LLMError: the call failed (a subclass says how).
        """
        raise NotImplementedError

    def stream(self, request: LLMRequest) -> LLMStream:
        """Answer ``request`` as a stream; nothing is sent before ``async with`` is entered."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the transport owns; transports owning nothing do nothing."""

    async def aclose(self) -> None:
        """Release what the transport owns (its HTTP client, if it made one)."""
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class HTTPTransport(Transport):
    """Shared code of the provider transports: retries, error mapping, SSE, timeouts.

    A subclass says where to send (``_path``, ``_headers``), how to encode the request
    (``_body``) and how to read the answer (``_parse``, ``_stream_parser``).

    Args:
        config (ProviderConfig): where and how to call the provider.
        client (httpx.AsyncClient | None): a shared client (not closed by ``aclose``); when
            None the transport opens its own and closes it in ``aclose``.
        on_attempt (AttemptObserver | None): told about every attempt (for attempt events).
        rand (Callable[[], float] | None): jitter source; ``random.random`` when None.
    """

    provider: ClassVar[str] = "http"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        client: httpx.AsyncClient | None = None,
        on_attempt: AttemptObserver | None = None,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self._config = config
        self._owns_client = client is None
        self._client = client if client is not None else open_http_client()
        self._on_attempt = on_attempt
        self._rand = rand or _random.random
        self._secrets: tuple[str, ...] = (
            (config.api_key.reveal(),) if config.api_key is not None else ()
        )
        # What every request of this transport shares, made once: httpx parses a URL given
        # as text and builds a timeout on every call, and that showed in the profile.
        headers = {"content-type": "application/json", **self._headers()}
        headers.update(dict(config.extra_headers))
        self._plain_headers = headers
        self._stream_headers = {**headers, "accept": "text/event-stream"}
        self._extensions = {"timeout": config.timeouts.to_httpx().as_dict()}
        self._url: httpx.URL | None = None  # parsed on first use, where errors are mapped
        # The headers of every request (the client's, ours, Host), made once: building
        # them per request through the client's merge took most of a request's cost
        # before it left. Made again when the client's own headers change.
        self._client_headers: list[tuple[bytes, bytes]] | None = None
        self._raw_headers: dict[bool, list[tuple[bytes, bytes]] | None] = {}
        # An attempt's own total timeout needs a cancel scope only when it can expire before
        # the retry policy's deadline (by default that comes first, 300 s against 600 s).
        deadline = config.retry.deadline
        self._attempt_deadline = deadline is None or deadline > config.timeouts.total

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self._config.base_url!r}, "
            f"model={self._config.model!r})"
        )

    @property
    def config(self) -> ProviderConfig:
        """The configuration (its API key is masked in reprs)."""
        return self._config

    async def aclose(self) -> None:
        """Close the HTTP client if this transport opened it; a shared one stays open."""
        if self._owns_client:
            await self._client.aclose()
        else:
            await trio.lowlevel.checkpoint()

    # --- provider hooks ----------------------------------------------------------

    def _path(self) -> str:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, request: LLMRequest, *, stream: bool) -> JsonDict:
        raise NotImplementedError

    def _parse(self, data: JsonDict) -> LLMResponse:
        raise NotImplementedError

    def _stream_parser(self) -> StreamParser:
        """A new parser for one stream's events (providers override)."""
        raise NotImplementedError

    # --- shared machinery --------------------------------------------------------

    def _build(self, request: LLMRequest, *, stream: bool) -> httpx.Request:
        content = orjson.dumps(self._body(request, stream=stream))
        with map_httpx_errors(self.provider, secrets=self._secrets):
            if self._url is None:
                self._url = httpx.URL(self._config.base_url.rstrip("/") + self._path())
            raw = self._prepared_headers(stream)
            if raw is None:
                return self._client.build_request(
                    "POST",
                    self._url,
                    content=content,
                    headers=self._stream_headers if stream else self._plain_headers,
                    extensions=self._extensions,
                )
            # The request ``build_request`` makes, less its merging: the same headers, in
            # the same order, and the body read (``content``) as it would be.
            headers = httpx.Headers([*raw, (b"Content-Length", b"%d" % len(content))])
            http_request = httpx.Request(
                "POST",
                self._url,
                headers=headers,
                stream=httpx.ByteStream(content),
                extensions=self._extensions,
            )
            http_request.read()
            return http_request

    def _prepared_headers(self, stream: bool) -> list[tuple[bytes, bytes]] | None:
        """The headers ``build_request`` would give a request of ``stream`` (the client's
        merged with ours, ``Host`` first), all but its length; ``None`` when the client
        adds more to a request than headers (cookies it was sent, query parameters) or
        ours already hold what httpx would add, and ``build_request`` must make it."""
        client = self._client
        if client.cookies or client.params:
            return None
        current = client.headers.raw
        if current != self._client_headers:
            self._client_headers = current
            self._raw_headers.clear()
        if stream in self._raw_headers:
            return self._raw_headers[stream]
        headers = httpx.Headers(client.headers)
        headers.update(self._stream_headers if stream else self._plain_headers)
        url = self._url
        assert url is not None
        own = ("host", "content-length", "transfer-encoding")
        raw = self._raw_headers[stream] = (
            None
            if any(name in headers for name in own) or not url.host
            else [(b"Host", url.netloc), *headers.raw]
        )
        return raw

    async def _send(self, http_request: httpx.Request) -> httpx.Response:
        """Send once and return the response with its body unread; raise on an error status."""
        with map_httpx_errors(self.provider, secrets=self._secrets):
            response = await self._client.send(http_request, stream=True)
        if response.status_code < 300:
            return response
        try:
            with map_httpx_errors(self.provider, secrets=self._secrets):
                await response.aread()
        finally:
            await response.aclose()
        raise error_from_status(
            self.provider,
            response.status_code,
            response.text,
            response.headers,
            secrets=self._secrets,
        )

    def _shape_error(self, exc: Exception) -> LLMMalformedStreamError:
        msg = (
            f"{self.provider}: the answer does not have the expected shape "
            f"({type(exc).__name__}: {exc})"
        )
        return LLMMalformedStreamError(msg, provider=self.provider)

    def _malformed(self, problem: str) -> LLMMalformedStreamError:
        """The error for an answer that parsed but lacks what every answer must carry."""
        return LLMMalformedStreamError(f"{self.provider}: {problem}", provider=self.provider)

    def _decode(self, text: str | bytes, what: str) -> JsonDict:
        return self._load(text, what)[0]

    def _load(self, text: str | bytes, what: str) -> tuple[JsonDict, bool]:
        """The JSON object in ``text``, and whether its strings may hold lone surrogates."""
        try:
            data = orjson.loads(text)
            suspect = False
        except orjson.JSONDecodeError as exc:
            # orjson refuses valid JSON it cannot represent: lone surrogate escapes (which
            # `repair` fixes later) and numbers beyond a double. The stdlib parser takes them.
            # So only text that came this way can need the repair.
            try:
                data = json.loads(text, parse_constant=_no_constant)
            except ValueError:
                msg = f"{self.provider}: {what} is not valid JSON: {exc}"
                raise LLMMalformedStreamError(msg, provider=self.provider) from exc
            suspect = True
        if not isinstance(data, dict):
            msg = f"{self.provider}: {what} is JSON but not an object"
            raise LLMMalformedStreamError(msg, provider=self.provider)
        return data, suspect

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` and return the whole answer, retrying as the policy allows.

        Returns:
            (LLMResponse): the answer.

        Raises:
            LLMRateLimitedError: HTTP 429 on the last attempt.
            LLMAuthError: HTTP 401/403.
            LLMContextOverflowError: the prompt does not fit the model's context.
            LLMBadRequestError: another 4xx.
            LLMTimeoutError: a connect/read/write/pool timeout, the per-attempt ``total``
                timeout, or the retry deadline.
            LLMConnectionError: the provider could not be reached.
            LLMServerError: HTTP 5xx (or 409) on the last attempt.
            LLMMalformedStreamError: the body is not the JSON we expect.
            ConfigError: the base URL is unusable.
        """
        total = self._config.timeouts.total

        async def attempt() -> LLMResponse:
            if not self._attempt_deadline:
                return await self._complete_once(request)
            with trio.move_on_after(total):
                return await self._complete_once(request)
            msg = f"{self.provider}: no complete answer within {total:g} s"
            raise LLMTimeoutError(msg, phase="total", provider=self.provider)

        return await call_with_retries(
            attempt,
            policy=self._config.retry,
            provider=self.provider,
            on_attempt=self._on_attempt,
            rand=self._rand,
        )

    async def _complete_once(self, request: LLMRequest) -> LLMResponse:
        """One attempt of :meth:`complete`, with no deadline of its own."""
        http_request = self._build(request, stream=False)
        response = await self._send(http_request)
        try:
            with map_httpx_errors(self.provider, secrets=self._secrets):
                body = await response.aread()
        finally:
            await response.aclose()
        data, suspect = self._load(body, "the response body")
        try:
            answer = self._parse(data)
        except _SHAPE_ERRORS as exc:
            raise self._shape_error(exc) from exc
        # Walking the whole answer for lone surrogates costs more than the rest of the
        # parse; orjson never makes them, so only the fallback's output needs it.
        return _repaired(answer, replaced=False) if suspect else answer

    def stream(self, request: LLMRequest) -> LLMStream:
        """Stream the answer to ``request`` over SSE.

        Opening the stream (up to the response headers) is retried as the policy allows;
        once the first event arrived nothing is retried, since deltas were already seen.
        Leaving the ``async with`` block closes the HTTP response, and with it the
        connection, so the provider stops generating.

        Returns:
            (LLMStream): enter it to send the request.

        Raises:
            LLMError: as :meth:`complete`, raised on entering or while iterating;
                ``LLMMalformedStreamError`` when the stream is cut, ends early or carries
                invalid JSON, and the mapped class for an error event.
        """
        return LLMStream(lambda: self._stream_source(request))

    async def _stream_source(self, request: LLMRequest) -> AsyncIterator[StreamDelta | LLMResponse]:
        http_request = self._build(request, stream=True)
        total = self._config.timeouts.total
        started = trio.current_time()

        async def attempt() -> httpx.Response:
            nonlocal started
            started = trio.current_time()
            if not self._attempt_deadline:
                return await self._send(http_request)
            with trio.move_on_after(total):
                return await self._send(http_request)
            msg = f"{self.provider}: no response headers within the {total:g} s total timeout"
            raise LLMTimeoutError(msg, phase="total", provider=self.provider)

        response = await call_with_retries(
            attempt,
            policy=self._config.retry,
            provider=self.provider,
            on_attempt=self._on_attempt,
            rand=self._rand,
        )
        total_at = started + total
        idle = _IdleDeadline(self._config.timeouts.idle)
        parse = self._stream_parser()
        decoder = SSEDecoder()
        chunks = _body_chunks(response)
        replaced = False
        finished = False
        # One cancel scope per network read, with the earlier of the two deadlines; the
        # events a read completed are parsed and handed out with no scope open, since a
        # cancel scope must not stay open while the consumer runs between two items.
        try:
            while True:
                with (
                    trio.CancelScope(deadline=min(total_at, idle.at)) as scope,
                    map_httpx_errors(self.provider, streaming=True, secrets=self._secrets),
                ):
                    chunk = await anext(chunks, None)
                if scope.cancelled_caught:
                    raise self._expired(total_at=total_at, idle_at=idle.at)
                if chunk is None:
                    break
                idle.read(len(chunk))
                for event in decoder.feed(chunk):
                    if not self._keepalive(event):
                        idle.progress()
                    try:
                        items = parse(event)
                    except _SHAPE_ERRORS as exc:
                        raise self._shape_error(exc) from exc
                    for item in items:
                        if isinstance(item, LLMResponse):
                            finished = True
                            yield _repaired(item, replaced=replaced)
                            return
                        delta, changed = repair(item)
                        replaced = replaced or changed
                        yield delta
        finally:
            try:
                if finished:
                    await _drain(chunks)
                await chunks.aclose()
            finally:
                await response.aclose()
        msg = f"{self.provider}: the stream ended before its final event"
        raise LLMMalformedStreamError(msg, provider=self.provider)

    def _expired(self, *, total_at: float, idle_at: float) -> LLMTimeoutError:
        """The error for the stream deadline that just expired."""
        timeouts = self._config.timeouts
        if total_at <= idle_at:
            msg = f"{self.provider}: the stream ran past its {timeouts.total:g} s total timeout"
            return LLMTimeoutError(msg, phase="total", provider=self.provider)
        msg = f"{self.provider}: no data event for {timeouts.idle:g} s (the stream's idle timeout)"
        return LLMTimeoutError(msg, phase="idle", provider=self.provider)

    def _keepalive(self, event: ServerSentEvent) -> bool:
        """Whether ``event`` only keeps the connection open (providers override)."""
        return False


@attrs.define
class _IdleDeadline:
    """When a stream's idle timeout expires: ``idle`` seconds after its last progress.

    Progress is a data event, or :data:`_PROGRESS_BYTES` more of the body: a large event
    arriving over many reads is not idleness, while keep-alives and a few trickled bytes
    are. Moving the deadline costs a clock read per network read, nothing per byte.
    """

    idle: float
    at: float = attrs.field(init=False)
    _arrived: int = attrs.field(init=False, default=0)
    """Bytes read since the deadline last moved."""

    def __attrs_post_init__(self) -> None:
        self.progress()

    def read(self, size: int) -> None:
        """Count ``size`` bytes just read."""
        self._arrived += size
        if self._arrived >= _PROGRESS_BYTES:
            self.progress()

    def progress(self) -> None:
        """Move the deadline: the stream made progress now."""
        self.at, self._arrived = trio.current_time() + self.idle, 0


def _no_constant(name: str) -> object:
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)


def _repaired(response: LLMResponse, *, replaced: bool) -> LLMResponse:
    """``response`` with valid text, flagged when its text or a delta's needed repair."""
    response, changed = repair(response)
    if changed or replaced:
        response = attrs.evolve(response, invalid_text_replaced=True)
    return response


def _body_chunks(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body's bytes as they arrive, decoded when the provider compressed them.

    An uncompressed body (every provider's SSE we know of) is read raw: one async generator
    fewer per chunk than ``aiter_bytes`` (whose decoder would pass it through unchanged).
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    chunks = response.aiter_raw() if encoding in ("", "identity") else response.aiter_bytes()
    # httpx types these as AsyncIterator; they are async generators, which we close.
    return cast("AsyncGenerator[bytes, None]", chunks)


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the rest of a body whose terminal event arrived, so its connection is reused.

    Providers end the body right after the terminal event (``[DONE]``, ``message_stop``).
    Reading up to that end returns the connection to the pool; closing the response any
    earlier closes the connection, and the next call pays a new TCP and TLS handshake. A
    body that does not end promptly, or goes on talking, is left to ``aclose``; a failure
    here only loses the connection, never the answer already given.
    """
    left = _DRAIN_BYTES
    with trio.move_on_after(_DRAIN_SECONDS):
        try:
            async for chunk in chunks:
                left -= len(chunk)
                if left < 0:
                    return
        except httpx.HTTPError:
            return  # the answer is complete; the connection is closed instead of reused
