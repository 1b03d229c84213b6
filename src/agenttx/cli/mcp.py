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
from agenttx.core.offload import share_interpreter_promptly


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
@click.option(
    "--principal",
    envvar="AGENTTX_MCP_PRINCIPAL",
    show_envvar=True,
    default="local",
    show_default=True,
    help="Who this session acts as in the embedded engine (it owns the transactions begun).",
)
@click.option(
    "--tenant",
    envvar="AGENTTX_MCP_TENANT",
    show_envvar=True,
    default="default",
    show_default=True,
    help="The tenant of the embedded session: its state, records, files and outbox.",
)
@click.option(
    "--api-key",
    envvar="AGENTTX_API_KEY",
    show_envvar=True,
    default=None,
    help="With --server: the API key to call it with (its --api-keys file holds the hash).",
)
@click.option(
    "--tls-ca",
    envvar="AGENTTX_TLS_CA",
    show_envvar=True,
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="With --server: PEM of the CA (or self-signed certificate) to reach it over TLS.",
)
def mcp(**opts: Any) -> None:
    """Serve AgentTx's MCP tools over stdio (stdin/stdout; logs on stderr).

    An agent app starts this command itself; see `agenttx connect` for its configuration.
    """
    import asyncio

    from agenttx.errors import InvalidArgument
    from agenttx.server import StartupError
    from agenttx.types import local_caller

    if opts["server"] and opts["gateway"]:
        # The gateway lives with the engine: the one behind --server is not this process's.
        raise click.UsageError(
            "--gateway needs the embedded engine; give it to the `agenttx serve` that "
            "--server points at"
        )
    try:
        caller = local_caller(opts["tenant"], opts["principal"])
    except InvalidArgument as exc:
        raise click.UsageError(exc.message) from None
    config = serve_config(opts, metrics_addr=None)
    remote = (opts["server"], opts["api_key"], opts["tls_ca"])
    share_interpreter_promptly()  # as `agenttx serve`: the loop waits less on busy threads
    try:
        asyncio.run(_serve(config, remote, caller, opts["mcp_effect_tools"]))
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # a signal ended the session; the engine was closed on the way out


async def _serve(
    config: Any,
    remote: tuple[str | None, str | None, str | None],
    caller: Any,
    effect_tools: bool = False,
) -> None:
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
    from agenttx.api.mcp import AgentTxMCP, serve_stdio, served
    from agenttx.api.mcp.effect_tools import add_effect_tools
    from agenttx.server import open_engine, redact

    log = logging.getLogger("agenttx.mcp")
    server, api_key, tls_ca = remote
    if server:
        from pathlib import Path

        from agenttx.client import AsyncAgentTxClient

        roots = Path(tls_ca).read_bytes() if tls_ca else None
        client = AsyncAgentTxClient(server, api_key=api_key, root_certificates=roots)
        log.info("AgentTx %s MCP on stdio · server %s", __version__, server)
        adapter = AgentTxMCP(served.remote(client), version=__version__)
        if effect_tools:
            add_effect_tools(adapter)
        try:
            await serve_stdio(adapter)
        finally:
            await client.close()
        return
    engine = await open_engine(config)
    # The session's user is this process's: one configured local principal, admin of its
    # tenant (the store is the operator's own), so its transactions are scoped like a key's.
    log.info(
        "AgentTx %s MCP on stdio · store %s · as %r in tenant %r",
        __version__,
        redact(config.store_url),
        caller.principal,
        caller.tenant,
    )
    adapter = AgentTxMCP(served.embedded(engine, caller), version=__version__)
    if effect_tools:
        add_effect_tools(adapter)
    try:
        await serve_stdio(adapter)
    finally:
        await engine.close()
        log.info("stopped")
