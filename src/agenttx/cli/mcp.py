"""``agenttx mcp``: AgentTx as an MCP server on stdin/stdout, for an agent app to launch.

By default it embeds an engine opened with the same flags and environment variables as
``agenttx serve`` (several such processes may share one SQLite data dir: each agent session
runs its own, and the store keeps them consistent). With ``--server HOST:PORT`` it embeds
nothing and drives a running ``agenttx serve`` over gRPC instead.

stdout carries only MCP frames; every log line goes to stderr. The session ends when stdin
closes (the app quit) or on SIGTERM/SIGINT; either way the engine is closed and the exit
status is 0.
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
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # a signal ended the session; the engine was closed on the way out


async def _serve(config: Any, server: str | None) -> None:
    import asyncio
    import contextlib
    import logging
    import signal

    # A signal cancels the session, so the ``finally`` blocks below close what is open.
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            if task is not None:
                loop.add_signal_handler(sig, task.cancel)

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
        log.info("stopped")
