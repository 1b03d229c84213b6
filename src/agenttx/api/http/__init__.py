"""The HTTP adapter: the listener of ``agenttx serve --http-addr`` (``app.py``, its
connections' request heads in ``heads.py``, one log line per request in ``access_log.py``),
the JSON API at ``/v1`` derived from the operation table (``v1``) and what the listener
serves beside ``/mcp`` (``web.py``). It imports neither the gRPC nor the MCP adapter."""
