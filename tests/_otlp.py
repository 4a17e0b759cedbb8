"""A tiny OTLP/HTTP trace receiver on loopback: what a collector would be told, decoded.

It answers ``POST /v1/traces`` as a collector does and keeps each span with its
resource's attributes, decoded from the protobuf ``ExportTraceServiceRequest`` (the
``opentelemetry-proto`` package, which the OTLP exporter brings).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
from _wait import wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KIND_INTERNAL = 1
KIND_CLIENT = 3
STATUS_ERROR = 2


@attrs.frozen
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    resource: dict[str, Any]
    scope: str


def value_of(value: AnyValue) -> Any:
    """An attribute's value as Python: arrays stay lists, so a string where an array is
    due shows."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which is not None else None


@attrs.define
class OtlpReceiver:
    port: int
    spans: list[ReceivedSpan] = attrs.Factory(list)
    requests: list[str] = attrs.Factory(list)
    """Each request's path and content type."""
    lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_for(self, test: Callable[[list[ReceivedSpan]], bool], what: str) -> None:
        """Poll until ``test`` holds of the spans received (a minute at most)."""

        def received() -> bool:
            with self.lock:
                return test(list(self.spans))

        def described() -> str:
            return f"{what}; got {sorted(s.name for s in self.spans)}"

        wait_until(received, described, timeout=60)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)  # strict: a malformed body raises
            received = []
            for resource_spans in request.resource_spans:
                resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        received.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                kind=span.kind,
                                attributes={kv.key: value_of(kv.value) for kv in span.attributes},
                                status_code=span.status.code,
                                resource=resource,
                                scope=scope_spans.scope.name,
                            )
                        )
            with receiver.lock:
                receiver.requests.append(f"{self.path} {self.headers.get('Content-Type')}")
                receiver.spans.extend(received)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
