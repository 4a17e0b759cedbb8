"""The tests' TCP proxy cuts, black-holes and delays what passes through it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from _tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    """An echo server's port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the proxy may reset it
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def _client(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.sendall(b"hello")
    assert sock.recv(1024) == b"hello"
    return sock


def test_a_cut_resets_connections_and_refuses_new_ones_until_healed(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy, _client(proxy) as sock:
        proxy.cut()
        with pytest.raises(ConnectionError):  # the send or the read fails
            sock.sendall(b"again")
            if not sock.recv(1024):
                raise ConnectionResetError("closed")
        # Refused: the connect itself, the send or the read meets the reset.
        with (
            pytest.raises(ConnectionError),
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as refused,
        ):
            refused.sendall(b"x")
            if not refused.recv(1024):
                raise ConnectionResetError("closed")
        proxy.heal()
        _client(proxy).close()


def test_a_black_hole_holds_bytes_back_until_healed(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy, _client(proxy) as sock:
        proxy.black_hole()
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(1024) == b"held"


def test_a_delay_holds_each_chunk_back(echo: int) -> None:
    with TcpProxy("127.0.0.1", echo) as proxy, _client(proxy) as sock:
        proxy.delay(0.2)
        started = time.monotonic()
        sock.sendall(b"slow")
        assert sock.recv(1024) == b"slow"
        assert time.monotonic() - started >= 0.4  # there and back
