"""A TCP proxy between one node and PostgreSQL that can cut, black-hole and delay.

Threads, not Trio: the proxy serves real node processes while the test's own thread
drives them. Each accepted connection gets an upstream connection and a pump thread
per direction.

- :meth:`TcpProxy.cut`: every open connection is reset both ways, and new ones are
  refused until :meth:`heal` (a cable pulled, a firewall's reject);
- :meth:`TcpProxy.black_hole`: bytes stop flowing both ways and connections stay open
  (a firewall's drop: TCP retransmits, so what was held back flows on :meth:`heal`);
  new connections are accepted and hang the same way;
- :meth:`TcpProxy.delay`: each chunk waits ``seconds`` before it is passed on.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType
from typing import Literal, Self

Mode = Literal["pass", "cut", "black_hole"]


class TcpProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``target``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._mode: Mode = "pass"
        self._delay = 0.0
        self._flowing = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self.connections = 0
        """Connections accepted so far."""
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a libpq key=value string) pointed at this proxy."""
        fields = dict(part.split("=", 1) for part in dsn.split())
        fields.update(host="127.0.0.1", port=str(self.port))
        return " ".join(f"{key}={value}" for key, value in fields.items())

    @property
    def mode(self) -> Mode:
        """What the proxy does to traffic now."""
        return self._mode

    def cut(self) -> None:
        """Reset every connection and refuse new ones until :meth:`heal`."""
        with self._flowing:
            self._mode = "cut"
            doomed = list(self._sockets)
            self._flowing.notify_all()
        for sock in doomed:
            _reset(sock)

    def black_hole(self) -> None:
        """Hold every byte back, both ways, until :meth:`heal`."""
        with self._flowing:
            self._mode = "black_hole"

    def delay(self, seconds: float) -> None:
        """Pass each chunk on ``seconds`` late."""
        with self._flowing:
            self._delay = seconds

    def heal(self) -> None:
        """Pass traffic again, at once."""
        with self._flowing:
            self._mode = "pass"
            self._delay = 0.0
            self._flowing.notify_all()

    def close(self) -> None:
        """Stop listening and reset every connection."""
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._mode == "cut":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            self.connections += 1
            with self._flowing:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="tcp-proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                with self._flowing:
                    while self._mode == "black_hole":
                        self._flowing.wait()
                    if self._mode == "cut":
                        break
                    delay = self._delay
                if delay:
                    time.sleep(delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._flowing:
                self._sockets.discard(source)
                self._sockets.discard(sink)
            _reset(source)
            _reset(sink)


def _reset(sock: socket.socket) -> None:
    """Close with a reset (``SO_LINGER`` 0), as a pulled cable looks to the peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes a pump blocked reading it
    with contextlib.suppress(OSError):
        sock.close()
