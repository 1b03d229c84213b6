"""Every schema AgentTx hands an MCP client is one every client takes: each MCP tool's
``inputSchema`` and ``outputSchema``, and each AgentTx tool's input and output schema in
``list_tools`` (built-ins, user tools, a gateway's downstream tools).

The rule is the strictest a real client applies. The TypeScript SDK (the client of Claude
Code, VS Code, Cursor, Gemini CLI, the Inspector) refuses a whole ``tools/list`` when one
property schema is the boolean ``true``; the Inspector's portability check calls a boolean
anywhere but the four "additional/unevaluated" keywords an error, and a schema that constrains
nothing (``{}``) or a ``type`` array a warning. Our own schemas meet all of it; a downstream
server's are re-exported with each boolean written as the object it means (its ``{}`` stays:
its contract, not ours). ``tests/interop/`` runs the real clients."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client

from agenttx.api.mcp.effect_tools import add_effect_tools
from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP
from gateway_servers import gateway_engine, write_gateway
from mcp_harness import structured
from paths import TESTS

pytestmark = pytest.mark.stores("sqlite")

BOOLEAN_SERVER = TESTS.joinpath("gateway_boolean_schemas.py")

# Where a boolean is the portable spelling (``additionalProperties: false`` closes an object).
BOOLEAN_KEYWORDS = {
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
}
ONE = {"items", "contains", "not", "propertyNames", "if", "then", "else", "contentSchema"}
ONE |= BOOLEAN_KEYWORDS
LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}
MAPS = {"properties", "patternProperties", "dependentSchemas", "dependencies", "$defs"}
MAPS |= {"definitions"}
# A keyword that makes a schema object constrain its instance (``if`` only with then/else).
CONSTRAINING = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "contentMediaType",
    "contentEncoding", "contentSchema", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "maxProperties", "minProperties", "required", "dependentRequired", "allOf",
    "anyOf", "oneOf", "not", "items", "prefixItems", "contains", "additionalItems",
    "unevaluatedItems", "properties", "patternProperties", "additionalProperties",
    "unevaluatedProperties", "propertyNames", "dependentSchemas", "dependencies", "$ref",
}  # fmt: skip


def subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str, Any]]:
    """(path, keyword, subschema) of each subschema directly under ``schema``."""
    for key, value in schema.items():
        if key in LISTS or (key == "items" and isinstance(value, list)):
            for i, sub in enumerate(value if isinstance(value, list) else []):
                yield f"{path}.{key}[{i}]", key, sub
        elif key in ONE:
            yield f"{path}.{key}", key, value
        elif key in MAPS and isinstance(value, dict):
            for name, sub in value.items():
                if not isinstance(sub, list):  # dependencies: a list of names is no schema
                    yield f"{path}.{key}.{name}", key, sub


def booleans(schema: Any, path: str = "$", keyword: str = "") -> list[str]:
    """Where a boolean stands for a schema, outside the four keywords that allow one."""
    if isinstance(schema, bool):
        return [] if keyword in BOOLEAN_KEYWORDS else [f"{path}: {schema}"]
    if not isinstance(schema, dict):
        return [f"{path}: not a schema ({type(schema).__name__})"]
    return [f for p, k, sub in subschemas(schema, path) for f in booleans(sub, p, k)]


def unportable(schema: Any, path: str = "$", keyword: str = "") -> list[str]:
    """``booleans`` plus the Inspector's warnings: a schema object that constrains nothing,
    a ``type`` array."""
    if not isinstance(schema, dict):
        return booleans(schema, path, keyword)
    found = []
    constrains = bool(CONSTRAINING & set(schema)) or (
        "if" in schema and ("then" in schema or "else" in schema)
    )
    if not constrains and keyword != "not":
        found.append(f"{path}: constrains nothing")
    if isinstance(schema.get("type"), list):
        found.append(f"{path}: a type array")
    return found + [f for p, k, sub in subschemas(schema, path) for f in unportable(sub, p, k)]


def test_the_checks_find_what_the_clients_refuse() -> None:
    """The walkers are the test: they must see a boolean wherever a schema may stand."""
    schema = {
        "type": "object",
        "properties": {"a": True, "b": {"type": "array", "items": False}},
        "anyOf": [True, {"type": "object"}],
        "$defs": {"c": {"not": True}},
        "additionalProperties": False,
    }
    assert booleans(schema) == [
        "$.properties.a: True",
        "$.properties.b.items: False",
        "$.anyOf[0]: True",
        "$.$defs.c.not: True",
    ]
    assert unportable({"type": "object", "properties": {"x": {}, "y": {"type": ["a", "b"]}}}) == [
        "$.properties.x: constrains nothing",
        "$.properties.y: a type array",
    ]


@pytest.fixture
async def engine(store_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.lenient]
        command = "{sys.executable}"
        args = ["{BOOLEAN_SERVER}"]
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway, tools=("user_tools",))
    yield engine
    await engine.close()


@asynccontextmanager
async def mcp_client(engine: Any) -> AsyncIterator[Client]:
    """The SDK's client on the engine's MCP server, in memory, with every MCP tool AgentTx
    has (the outbox's too). Entered in the test's own task: the SDK's task group must be."""
    mcp = AgentTxMCP(embedded(engine))
    add_effect_tools(mcp)
    async with Client(mcp.server) as c:
        yield c


async def test_every_mcp_tool_schema_is_portable(engine: Any) -> None:
    async with mcp_client(engine) as c:
        tools = (await c.list_tools()).tools
    assert len(tools) >= 18
    found = {
        (t.name, kind): unportable(schema)
        for t in tools
        for kind, schema in (("inputSchema", t.input_schema), ("outputSchema", t.output_schema))
        if schema is not None
    }
    assert {k: v for k, v in found.items() if v} == {}
    assert all(t.output_schema is not None for t in tools)


async def test_every_listed_agenttx_tool_schema_has_no_boolean(engine: Any) -> None:
    async with mcp_client(engine) as c:
        listed = structured(await c.call_tool("list_tools", {}))["tools"]
    names = {t["name"] for t in listed}
    assert {"kv.put", "lenient.echo"} <= names  # a built-in, a user tool's, the gateway's
    found = {
        (t["name"], kind): booleans(t[kind])
        for t in listed
        for kind in ("input_schema", "output_schema")
    }
    assert {k: v for k, v in found.items() if v} == {}


async def test_a_downstream_boolean_schema_keeps_its_meaning(engine: Any) -> None:
    async with mcp_client(engine) as c:
        listed = structured(await c.call_tool("list_tools", {}))["tools"]
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        arguments = {"anything": {"deep": [1]}, "note": "n"}
        step = structured(
            await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": 1,
                    "tool": "lenient.echo",
                    "arguments": arguments,
                },
            )
        )
    assert step["status"] == "SUCCESS", step
    assert step["output"]["echo"] == arguments
    [echo] = [t for t in listed if t["name"] == "lenient.echo"]
    schema = echo["input_schema"]
    assert schema["properties"]["anything"] == {}
    assert schema["properties"]["never"] == {"not": {}}
    assert schema["additionalProperties"] is False
    assert echo["output_schema"]["properties"]["nested"]["properties"]["x"] == {}
    check = validator_for(schema)(schema)
    assert check.is_valid({"anything": [1, {"a": None}], "tags": [1, "x"], "either": 3})
    assert not check.is_valid({"never": 1})  # false: the property may not appear
    assert not check.is_valid({"other": 1})
