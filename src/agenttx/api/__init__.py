"""Adapters: gRPC (wire-compatible with the reference), later MCP and HTTP. Each translates
its protocol to calls on ``agenttx.Engine`` and back, nothing more."""
