"""The gRPC adapter: ``agenttx.v1.AgentTxService`` (wire-compatible with the reference's)
served from the operation table (``server.py``), each request's bytes checked before a
handler sees them (``requests.py``). It imports neither the HTTP nor the MCP adapter."""
