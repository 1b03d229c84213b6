"""Adapters: gRPC (wire-compatible with the reference), MCP (``mcp``: stdio and streamable
HTTP) and the HTTP listener (``http.app``) the HTTP/JSON API will join. Each translates its
protocol to calls on ``agenttx.Engine`` and back, nothing more; ``fields`` is the wire
reply → JSON fields code the CLI and MCP share."""
