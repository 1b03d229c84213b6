"""``agenttx serve --otlp-endpoint``: a real server exports its spans over OTLP/HTTP to a
collector (here a plain HTTP server that keeps what it receives, decoded with the OTLP
protobuf messages), the gRPC caller's trace context included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest

from server_process import start_server

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class Collector(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, bytes]] = []  # (path, content type, body)


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.requests.append((self.path, self.headers.get("content-type", ""), body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    thread = threading.Thread(target=c.serve_forever, daemon=True)
    thread.start()
    yield c
    c.shutdown()
    c.server_close()


def _spans(collector: Collector) -> list[Any]:
    spans = []
    for path, ctype, body in collector.requests:
        assert path == "/v1/traces"
        assert ctype == "application/x-protobuf"
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            names = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert names["service.name"] == "agenttx"
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
    return spans


def test_a_served_transaction_is_exported_as_spans(collector: Collector, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    proc = start_server(tmp_path / "data", "--otlp-endpoint", endpoint)
    with proc.killed_on_error():
        from agenttx.wire import agenttx_pb2 as pb
        from agenttx.wire import agenttx_pb2_grpc as pb_grpc

        with grpc.insecure_channel(proc.address) as channel:
            stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
            meta = (("traceparent", TRACEPARENT),)
            tx = stub.BeginTransaction(pb.BeginTransactionRequest(), metadata=meta)
            stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=tx.transaction_id,
                    step_id=1,
                    tool_name="kv.put",
                    arguments_json='{"key": "otlp", "value": 1}',
                ),
                metadata=meta,
            )
            stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx.transaction_id))
        # SIGTERM drains and exits; the SDK flushes its batch at exit.
        assert proc.terminate() == 0
    deadline = time.monotonic() + 30  # the collector gets the batch the server flushed
    while not _spans(collector) and time.monotonic() < deadline:
        time.sleep(0.05)
    spans = {s.name: s for s in _spans(collector)}
    assert {"agenttx.transaction", "agenttx.step kv.put", "agenttx.commit"} <= set(spans)
    root = spans["agenttx.transaction"]
    assert root.trace_id.hex() == TRACE_ID
    assert spans["agenttx.step kv.put"].trace_id.hex() == TRACE_ID
    attrs = {a.key: a.value for a in spans["agenttx.step kv.put"].attributes}
    assert attrs["agenttx.step.status"].string_value == "SUCCESS"
    assert attrs["agenttx.tool"].string_value == "kv.put"
    assert spans["agenttx.commit"].parent_span_id == root.span_id
