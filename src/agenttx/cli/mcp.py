"""``agenttx mcp``: AgentTx as an MCP server on stdin/stdout, for an agent app to launch.

By default it embeds an engine opened with the same flags and environment variables as
``agenttx serve`` (several such processes may share one SQLite data dir: each agent session
runs its own, and the store keeps them consistent). With ``--server HOST:PORT`` it embeds
nothing and drives a running ``agenttx serve`` over gRPC instead.

stdout carries only MCP frames; every log line goes to stderr.
"""

from __future__ import annotations

from typing import Any

import click

from agenttx.cli.engine_options import engine_options, serve_config


@click.command()
@engine_options
@click.option(
    "--server",
    envvar="AGENTTX_MCP_SERVER",
    show_envvar=True,
    default=None,
    help="Drive a running `agenttx serve` at HOST:PORT over gRPC instead of embedding an "
    "engine (the engine flags are then unused).",
)
def mcp(**opts: Any) -> None:
    """Serve AgentTx's MCP tools over stdio (stdin/stdout; logs on stderr).

    An agent app starts this command itself; see `agenttx connect` for its configuration.
    """
    import asyncio

    from agenttx.server import StartupError

    config = serve_config(opts, metrics_addr=None)
    try:
        asyncio.run(_serve(config, opts["server"]))
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass


async def _serve(config: Any, server: str | None) -> None:
    import logging

    from agenttx import __version__
    from agenttx.api.mcp import AgentTxMCP, Backend, ClientBackend, EngineBackend, serve_stdio
    from agenttx.server import open_engine, redact

    log = logging.getLogger("agenttx.mcp")
    backend: Backend
    if server:
        from agenttx.client import AsyncAgentTxClient

        client = AsyncAgentTxClient(server)
        backend = ClientBackend(client)
        log.info("AgentTx %s MCP on stdio · server %s", __version__, server)
        try:
            await serve_stdio(AgentTxMCP(backend, version=__version__))
        finally:
            await client.close()
        return
    engine = await open_engine(config)
    backend = EngineBackend(engine)
    log.info("AgentTx %s MCP on stdio · store %s", __version__, redact(config.store_url))
    try:
        await serve_stdio(AgentTxMCP(backend, version=__version__))
    finally:
        await engine.close()
