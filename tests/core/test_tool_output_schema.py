"""A tool's output schema comes from its return annotation, the way its input schema comes from
its argument hints: shown in ``Tool.describe()`` and in ListTools' ``output_schema_json``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, NotRequired, TypedDict

import pytest
from pydantic import BaseModel

import agenttx
from agenttx.client import AsyncAgentTxClient
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving


class Invoice(TypedDict):
    invoice_id: str
    total_cents: int
    note: NotRequired[str]


class Line(TypedDict):
    sku: str


class Order(TypedDict):
    order_id: str
    first_line: Line


class Receipt(BaseModel):
    receipt_id: str
    lines: list[str] = []


class Opaque:
    """Not a type pydantic can describe."""


@agenttx.tool(name="out.mapping")
async def returns_mapping(ctx: agenttx.ToolContext) -> dict[str, Any]:
    return {}


@agenttx.tool(name="out.typed_dict")
async def returns_typed_dict(ctx: agenttx.ToolContext, amount: int) -> Invoice:
    return {"invoice_id": "i-1", "total_cents": amount}


@agenttx.tool(name="out.nested_typed_dict")
def returns_nested(ctx: agenttx.ToolContext) -> Order:
    return {"order_id": "o-1", "first_line": {"sku": "s-1"}}


@agenttx.tool(name="out.model")
async def returns_model(ctx: agenttx.ToolContext) -> Receipt:
    return Receipt(receipt_id="r-1")


@agenttx.tool(name="out.text")
async def returns_text(ctx: agenttx.ToolContext) -> str:
    return "ok"


@agenttx.tool(name="out.nothing")
async def returns_nothing(ctx: agenttx.ToolContext) -> None:
    return None


@agenttx.tool(name="out.unannotated")
async def unannotated(ctx: agenttx.ToolContext):  # type: ignore[no-untyped-def]
    return 1


@agenttx.tool(name="out.opaque")
async def returns_opaque(ctx: agenttx.ToolContext) -> Opaque:
    return Opaque()


USER_TOOLS = [
    returns_mapping,
    returns_typed_dict,
    returns_nested,
    returns_model,
    returns_text,
    returns_nothing,
    unannotated,
    returns_opaque,
]

EXPECTED: dict[str, dict[str, Any]] = {
    "out.mapping": {"type": "object", "additionalProperties": True},
    "out.typed_dict": {
        "type": "object",
        "properties": {
            "invoice_id": {"title": "Invoice Id", "type": "string"},
            "total_cents": {"title": "Total Cents", "type": "integer"},
            "note": {"title": "Note", "type": "string"},
        },
        "required": ["invoice_id", "total_cents"],
    },
    "out.model": {
        "type": "object",
        "properties": {
            "receipt_id": {"title": "Receipt Id", "type": "string"},
            "lines": {
                "title": "Lines",
                "type": "array",
                "items": {"type": "string"},
                "default": [],
            },
        },
        "required": ["receipt_id"],
    },
    "out.text": {"type": "string"},
    "out.nothing": {"type": "null"},
    "out.unannotated": {},
    "out.opaque": {},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_return_annotation_becomes_the_output_schema(name: str) -> None:
    tool = next(t for t in USER_TOOLS if t.name == name)
    assert tool.output_schema == EXPECTED[name]
    assert tool.describe()["output_schema"] == EXPECTED[name]


def test_a_typed_dict_inside_a_typed_dict_is_described_too() -> None:
    schema = returns_nested.output_schema
    assert schema["required"] == ["order_id", "first_line"]
    line = schema["properties"]["first_line"]
    target = schema["$defs"][line["$ref"].rsplit("/", 1)[1]] if "$ref" in line else line
    assert target["properties"] == {"sku": {"title": "Sku", "type": "string"}}


def test_built_in_tools_declare_their_outputs() -> None:
    from agenttx.tools.builtin import BUILTIN_TOOLS

    schemas = {t.name: t.output_schema for t in BUILTIN_TOOLS}
    assert schemas["kv.put"]["required"] == ["key", "value"]
    assert schemas["kv.get"]["required"] == ["key", "value"]
    assert schemas["kv.delete"]["properties"]["deleted"]["type"] == "boolean"
    assert schemas["fs.write"]["properties"]["bytes"]["type"] == "integer"
    assert schemas["fs.read"]["properties"]["contents"]["type"] == "string"
    assert schemas["effect.stage"]["required"] == ["staged", "channel", "idempotency_key"]
    assert schemas["record.insert"] == {"type": "object", "additionalProperties": True}
    assert schemas["record.get"] == {"type": "object", "additionalProperties": True}


@pytest.fixture
async def target(open_engine: Any) -> AsyncIterator[str]:
    engine = await open_engine(tools=USER_TOOLS)
    async with serving(engine) as address:
        yield address


async def test_list_tools_sends_the_output_schemas_over_grpc(target: str) -> None:
    async with AsyncAgentTxClient(target, timeout=10) as client:
        tools = {t.name: t for t in await client.list_tools()}
    for name, expected in EXPECTED.items():
        assert tools[name].output_schema == expected, name
    assert tools["kv.put"].output_schema["required"] == ["key", "value"]


async def test_the_wire_field_is_json_text_of_the_schema(target: str) -> None:
    import grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.ListTools(pb.ListToolsRequest(), timeout=10)
    by_name = {t.name: t for t in reply.tools}
    assert json.loads(by_name["out.text"].output_schema_json) == {"type": "string"}
    assert json.loads(by_name["out.unannotated"].output_schema_json) == {}
    assert json.loads(by_name["fs.write"].output_schema_json)["required"] == ["path", "bytes"]
