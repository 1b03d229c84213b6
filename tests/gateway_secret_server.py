"""A real MCP server (the official SDK's ``MCPServer``, over stdio) that leaks what it was
given: the ``TOKEN`` environment variable the gateway file set from ``${env:…}`` shows in
a tool's description, in its input schema and in its answers. The gateway must mask it
wherever it comes back (``tests/gateway/test_gateway_secret_listing.py``)."""

from __future__ import annotations

import os
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

TOKEN = os.environ["TOKEN"]
server = MCPServer("leaky")


@server.tool(description=f"Look a ticket up (authenticated as {TOKEN}).")
def lookup(
    ticket: Annotated[str, Field(description=f"a ticket id; the token {TOKEN} is used")],
) -> dict[str, Any]:
    if ticket == "missing":
        raise ToolError(f"ticket {ticket} not found for token {TOKEN}")
    return {"ticket": ticket, "seen_with": TOKEN}


if __name__ == "__main__":
    server.run()
