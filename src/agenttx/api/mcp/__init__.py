"""MCP adapter: AgentTx's tools for an MCP client, over stdio or streamable HTTP.

Thin like the gRPC adapter: read the tool call, make the same service call the gRPC servicer
makes, shape the reply from the same wire fields. The parts:

``catalog``        the tools as ``tools/list`` shows them, made from the operation table's
                   ``mcp`` bindings in one loop, and the instructions
``arguments``      each argument read leniently, as its binding declares it
``handlers``       each tool's call by its row's name: the service call, the result shaped
                   (``results``, ``undo``, ``reconcile``, ``compensation``,
                   ``effect_tools``), or the row served generically
``served``         what the tools call: ``TransactionService`` (the embedded engine bound to
                   its caller, or a server over gRPC), a live step's progress and cancel,
                   the listings
``server``         the SDK ``Server`` with ``tools/list`` and ``tools/call``; progress, cancel
(failures → ``{ok: false, error, continuation, diagnostics}``, their continuations from
``agenttx.api.continuations``, the ladder every surface shares, with MCP's tool names)

``serve_stdio`` runs one on stdin/stdout (``agenttx mcp``); ``agenttx.api.http.app`` mounts
one at ``/mcp`` (``agenttx serve --http-addr``). docs/mcp.md is the user's page.
"""

from __future__ import annotations

import io
from typing import Any

from agenttx.api.mcp.served import Served, embedded, remote
from agenttx.api.mcp.server import AgentTxMCP

__all__ = ["AgentTxMCP", "Served", "embedded", "remote", "serve_stdio"]


async def serve_stdio(mcp: AgentTxMCP) -> None:
    """Serve MCP on this process's stdin and stdout until stdin closes. While it runs, fd 0
    reads the null device and fd 1 points at stderr, so only protocol frames come in and go
    out; a line is at most 4 MiB, and replies are written by the event loop (``frames.py``)."""
    from mcp.server.stdio import stdio_server

    from agenttx.api.mcp.frames import (
        AnsweringMalformed,
        CappedLines,
        LoopStdout,
        claimed_stdin,
        claimed_stdout,
    )

    with claimed_stdin() as stdin, claimed_stdout() as raw_stdout:
        lines: Any = CappedLines(stdin)
        stdout: Any = await LoopStdout.open(raw_stdout)
        if stdout is None:  # a file: the SDK's blocking writes, on its worker thread
            import anyio

            stdout = anyio.wrap_file(io.TextIOWrapper(raw_stdout, encoding="utf-8"))
        try:
            async with stdio_server(stdin=lines, stdout=stdout) as (read, write):
                frames: Any = AnsweringMalformed(read, write)
                await mcp.server.run(frames, write, mcp.server.create_initialization_options())
        finally:
            await stdout.aclose()
