"""A small real MCP server (the official SDK's ``MCPServer``, over stdio) for the gateway tests
of what the public reference servers do not show: a tool declaring its own undo in
``_meta["io.agenttx/undo"]`` (by argument, and by output), a plain write the gateway stages
or gives a ``before`` capture, and a tool that adds a tool and says the list changed.

Its state is a JSON file (``KV_FILE``) the tests read directly. Run: ``python
gateway_downstream.py`` (stdio) or ``python gateway_downstream.py --http PORT``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

STATE = Path(os.environ["KV_FILE"])
server = MCPServer("kv")


def load() -> dict[str, Any]:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save(data: dict[str, Any]) -> None:
    STATE.write_text(json.dumps(data))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get(key: str) -> dict[str, Any]:
    """Read one key."""
    data = load()
    if key not in data:
        raise ToolError(f"no such key: {key}")
    return {"key": key, "value": data[key]}


@server.tool()
def put(key: str, value: str) -> dict[str, Any]:
    """Write one key (no annotations: the spec's defaults)."""
    data = load()
    data[key] = value
    save(data)
    return {"key": key, "value": value}


@server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
def delete(key: str) -> dict[str, Any]:
    """Remove one key."""
    data = load()
    existed = data.pop(key, None) is not None
    save(data)
    return {"deleted": existed}


@server.tool(
    meta={"io.agenttx/undo": {"tool": "delete", "arguments": {"key": "${args.key}"}}},
)
def create(key: str, value: str) -> dict[str, Any]:
    """Create a key; declares its own undo."""
    data = load()
    if key in data:
        raise ToolError(f"key {key} already exists")
    data[key] = value
    save(data)
    return {"key": key}


@server.tool(
    meta={"io.agenttx/undo": {"tool": "delete", "arguments": {"key": "${output.id}"}}},
)
def append(value: str) -> dict[str, Any]:
    """Store a value under a new id; its undo needs the id from the output."""
    data = load()
    new_id = uuid.uuid4().hex[:8]
    data[new_id] = value
    save(data)
    return {"id": new_id}


@server.tool()
async def add_tool(name: str, ctx: Context) -> dict[str, Any]:
    """Add a read-only tool ``name`` and tell subscribers the tool list changed."""

    def echo(text: str) -> str:
        return text

    server.add_tool(echo, name=name, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()
    return {"added": name}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def wait(seconds: float) -> dict[str, Any]:
    """Sleep; the call leaves ``waiting: true`` in the state file once it runs, and
    ``cancelled: true`` if it is cancelled."""
    data = load()
    data["waiting"] = True
    save(data)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        data = load()
        data["cancelled"] = True
        save(data)
        raise
    return {"slept": seconds}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def seen_headers(ctx: Context) -> dict[str, Any]:
    """The HTTP request headers this call came with (streamable HTTP only)."""
    request = ctx.request_context.request
    headers = {k.lower(): v for k, v in dict(getattr(request, "headers", {}) or {}).items()}
    # Each value's SHA-256 too, as [name, digest] pairs: AgentTx masks secret-named fields
    # (authorization) in the outputs it stores and returns, so a test compares digests.
    digests = [[k, hashlib.sha256(v.encode()).hexdigest()] for k, v in headers.items()]
    return {"headers": headers, "header_sha256": digests}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":  # streamable HTTP on 127.0.0.1:PORT
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
