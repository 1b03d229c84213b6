"""A real MCP server (the official SDK's low-level ``Server``, over stdio) whose one tool
declares its schemas with JSON Schema's boolean subschemas, as a server written against a
lenient SDK may: a property ``true`` (any value), one ``false`` (never), ``items: true``, an
``anyOf`` branch ``true``, ``additionalProperties: false``. The gateway must re-export them
as schema objects (``tests/surfaces/test_mcp_schemas.py``): the TypeScript SDK refuses a ``true``
property schema."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "note": {"type": "string"},
        "anything": True,
        "never": False,
        "tags": {"type": "array", "items": True},
        "either": {"anyOf": [{"type": "string"}, True]},
    },
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"echo": True, "nested": {"type": "object", "properties": {"x": True}}},
}


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name="echo",
                description="Echo the arguments.",
                input_schema=INPUT_SCHEMA,
                output_schema=OUTPUT_SCHEMA,
                annotations=types.ToolAnnotations(read_only_hint=True),
            )
        ]
    )


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    echo = dict(params.arguments or {})
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="echoed")],
        structured_content={"echo": echo, "nested": {"x": 1}},
    )


async def main() -> None:
    server: Server[Any] = Server("booleans", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
