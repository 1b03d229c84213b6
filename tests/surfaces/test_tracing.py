"""OpenTelemetry spans, checked with the SDK's in-memory exporter: one per transaction (begin
to its end) and one per step inside it with tool, status, strategy and rollback target; the
caller's W3C trace context taken from HTTP headers, gRPC metadata and MCP ``_meta``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
from agenttx.api.http.web import web_routes
from agenttx.api.mcp import AgentTxMCP, embedded
from agenttx.api.tracing import TracedEngine, incoming
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(engine: Any, exporter: InMemorySpanExporter) -> TracedEngine:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracedEngine(engine, provider)


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


async def test_a_transaction_span_holds_one_span_per_step(
    traced: TracedEngine, exporter: InMemorySpanExporter
) -> None:
    tx = (await traced.begin(agent_id="otel")).transaction_id
    await traced.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    failed = await traced.execute_step(
        tx, 2, "record.get", {"table": "users", "id": "${steps.1.value.id}"}
    )
    assert failed.rollback_to_step == 1
    assert "agenttx.transaction" not in by_name(exporter)  # still open
    await traced.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
    await traced.commit(tx)
    spans = by_name(exporter)
    [root] = spans["agenttx.transaction"]
    assert root.attributes is not None
    assert root.attributes["agenttx.transaction_id"] == tx
    assert root.attributes["agenttx.status"] == "COMMITTED"
    assert root.attributes["agenttx.agent_id"] == "otel"
    steps = spans["agenttx.step kv.put"] + spans["agenttx.step record.get"]
    assert len(steps) == 3
    for s in [*steps, *spans["agenttx.commit"]]:
        assert s.parent is not None
        assert s.parent.span_id == root.context.span_id
        assert s.context.trace_id == root.context.trace_id
    [bad] = spans["agenttx.step record.get"]
    attrs = dict(bad.attributes or {})
    assert attrs["agenttx.tool"] == "record.get"
    assert attrs["agenttx.step_id"] == 2
    assert attrs["agenttx.step.status"] == "ROLLBACK_TRIGGERED"
    assert attrs["agenttx.step.strategy"] == "DEPENDENCY_JUMP"
    assert attrs["agenttx.step.rollback_to_step"] == 1
    assert str(attrs["agenttx.step.hint"]).startswith("Hint: ")
    assert bad.status.status_code is trace.StatusCode.ERROR


async def test_an_aborted_transaction_ends_its_span_with_the_status(
    traced: TracedEngine, exporter: InMemorySpanExporter
) -> None:
    tx = (await traced.begin()).transaction_id
    await traced.rollback(tx)
    [root] = by_name(exporter)["agenttx.transaction"]
    assert dict(root.attributes or {})["agenttx.status"] == "ROLLED_BACK"
    assert root.status.status_code is trace.StatusCode.ERROR


async def test_a_callers_trace_context_parents_the_step_linked_to_the_transaction(
    traced: TracedEngine, exporter: InMemorySpanExporter
) -> None:
    with incoming({"traceparent": TRACEPARENT}):
        tx = (await traced.begin()).transaction_id
    with incoming({"traceparent": TRACEPARENT.replace("00f067aa0ba902b7", "00f067aa0ba902b8")}):
        await traced.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await traced.commit(tx)
    spans = by_name(exporter)
    [root] = spans["agenttx.transaction"]
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert root.parent is not None
    assert format(root.parent.span_id, "016x") == "00f067aa0ba902b7"
    [s] = spans["agenttx.step kv.put"]
    assert s.parent is not None
    assert format(s.parent.span_id, "016x") == "00f067aa0ba902b8"
    assert [link.context.span_id for link in s.links] == [root.context.span_id]


@pytest.fixture
async def http_base(traced: TracedEngine) -> AsyncIterator[str]:
    sock = bind("127.0.0.1", 0)
    app = build_http_app(
        AgentTxMCP(embedded(traced), version="test"),
        HttpSettings(routes=web_routes(traced, "test")),
    )
    listener = HttpListener(app, sock)
    await listener.start()
    try:
        yield f"http://{listener.address}"
    finally:
        await listener.stop()


def _post(url: str, body: Any, headers: dict[str, str]) -> Any:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


async def test_http_headers_carry_the_trace_context(
    http_base: str, exporter: InMemorySpanExporter
) -> None:
    headers = {"traceparent": TRACEPARENT}
    tx = (await asyncio.to_thread(_post, f"{http_base}/v1/transactions", {}, headers))[
        "transaction_id"
    ]
    body = {"step_id": 1, "tool_name": "kv.put", "arguments": {"key": "h", "value": 1}}
    await asyncio.to_thread(_post, f"{http_base}/v1/transactions/{tx}/steps", body, headers)
    spans = by_name(exporter)
    [s] = spans["agenttx.step kv.put"]
    assert format(s.context.trace_id, "032x") == TRACE_ID


async def test_grpc_metadata_carries_the_trace_context(
    traced: TracedEngine, exporter: InMemorySpanExporter
) -> None:
    async with serving(traced) as target, grpc.aio.insecure_channel(target) as channel:  # type: ignore[arg-type]
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        r = await stub.BeginTransaction(
            pb.BeginTransactionRequest(agent_id="g"), metadata=(("traceparent", TRACEPARENT),)
        )
        await stub.RollbackTransaction(
            pb.RollbackTransactionRequest(transaction_id=r.transaction_id)
        )
    [root] = by_name(exporter)["agenttx.transaction"]
    assert format(root.context.trace_id, "032x") == TRACE_ID


async def test_mcp_meta_carries_the_trace_context(
    http_base: str, exporter: InMemorySpanExporter
) -> None:
    async with Client(f"{http_base}/mcp", read_timeout_seconds=30) as c:
        begun = await c.call_tool(
            "begin_transaction", {"agent_id": "mcp"}, meta={"traceparent": TRACEPARENT}
        )
        assert not begun.is_error
        tx = begun.structured_content["transaction_id"]  # type: ignore[index]
        ended = await c.call_tool("rollback_transaction", {"transaction_id": tx})
        assert not ended.is_error
    [root] = by_name(exporter)["agenttx.transaction"]
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert dict(root.attributes or {})["agenttx.transaction_id"] == tx
