"""A scripted HTTP server on loopback: real sockets, canned replies, faults on demand.

It plays what a small local model cannot: tool calls streamed in fragments, 429 with
Retry-After, 5xx then success, streams cut mid-event, malformed events, error events.
Each connection takes the next reply of the script; every request is recorded.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType

import attrs
import orjson


@attrs.define
class Reply:
    """One canned HTTP reply."""

    status: int = 200
    """The status code."""
    head_delay: float = 0.0
    """Seconds to sleep before sending anything (to provoke read timeouts)."""
    headers: list[tuple[str, str]] = attrs.Factory(list)
    """Extra headers."""
    chunks: list[bytes] = attrs.Factory(list)
    """Body pieces, sent one by one."""
    chunked: bool = True
    """Send with ``Transfer-Encoding: chunked``; else close-delimited."""
    delay: float = 0.0
    """Seconds to sleep before each piece."""
    cut: bool = False
    """Close the socket after the pieces without finishing the body."""
    drip: bytes | None = None
    """After the pieces, keep sending this every ``drip_every`` s until the client hangs up."""
    drip_every: float = 0.05
    """Seconds between two drips."""


@attrs.define
class RecordedRequest:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        """The body parsed as a JSON object."""
        data = orjson.loads(self.body)
        assert isinstance(data, dict)
        return data


def sse(*events: tuple[str | None, object]) -> bytes:
    """SSE bytes for (event name or None, data) pairs; data that is not str is JSON-encoded."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text}\n\n")
    return "".join(out).encode()


def json_reply(status: int, body: object, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    """A JSON reply."""
    return Reply(
        status=status,
        headers=[("content-type", "application/json"), *headers],
        chunks=[orjson.dumps(body)],
        chunked=False,
    )


def sse_reply(*pieces: bytes, **kwargs: object) -> Reply:
    """A ``text/event-stream`` reply made of the given pieces."""
    return Reply(
        headers=[("content-type", "text/event-stream")],
        chunks=list(pieces),
        **kwargs,  # type: ignore[arg-type]  # test helper passthrough
    )


class ScriptedHTTPServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 answering from a script of replies."""

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self._replies: deque[Reply] = deque(replies)
        self.requests: list[RecordedRequest] = []
        self.hung_up = threading.Event()
        """Set when a dripping reply notices the client closed the connection."""
        self.hung_up_at: float | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)  # so the accept loop notices closing promptly
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._closing = False

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self._sock.getsockname()
        return f"http://{host}:{port}"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        self._replies.extend(replies)

    def __enter__(self) -> ScriptedHTTPServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing = True
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            request = self._read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            reply = self._replies.popleft() if self._replies else json_reply(
                599, {"error": {"message": "scripted server: script exhausted"}}
            )
            self._write(conn, reply)

    def _read_request(self, conn: socket.socket) -> RecordedRequest | None:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return None
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            piece = conn.recv(65536)
            if not piece:
                break
            body += piece
        return RecordedRequest(method, path, headers, body)

    def _write(self, conn: socket.socket, reply: Reply) -> None:
        head = [f"HTTP/1.1 {reply.status} Scripted", "connection: close"]
        head += [f"{k}: {v}" for k, v in reply.headers]
        if reply.chunked:
            head.append("transfer-encoding: chunked")
        try:
            if reply.head_delay:
                time.sleep(reply.head_delay)
            conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            for piece in reply.chunks:
                if reply.delay:
                    time.sleep(reply.delay)
                conn.sendall(_frame(piece) if reply.chunked else piece)
            if reply.drip is not None:
                while True:
                    time.sleep(reply.drip_every)
                    conn.sendall(_frame(reply.drip) if reply.chunked else reply.drip)
            if reply.cut:
                conn.shutdown(socket.SHUT_RDWR)
                return
            if reply.chunked:
                conn.sendall(b"0\r\n\r\n")
        except OSError:
            self.hung_up_at = time.monotonic()
            self.hung_up.set()


def _frame(piece: bytes) -> bytes:
    return f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
