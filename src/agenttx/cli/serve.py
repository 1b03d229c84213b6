"""``agenttx serve``: the gRPC server with health, reflection and metrics, and, with
``--http-addr``, MCP over streamable HTTP at ``/mcp`` on the same engine."""

from __future__ import annotations

from typing import Any

import click

from agenttx.cli.engine_options import serve_config, setting_options


@click.command()
@setting_options("server", "command", "engine")
def serve(**opts: Any) -> None:
    """Serve AgentTx over gRPC (with health, reflection and Prometheus metrics), and MCP over
    HTTP with --http-addr.

    SIGTERM or Ctrl-C drains: new calls are refused, in-flight calls get --grace-s to
    finish, then the store closes and the process exits 0.
    """
    from agenttx.server import StartupError, run

    config = serve_config(opts)  # every flag is a setting (``agenttx.settings``)
    try:
        run(config)
    except StartupError as exc:
        # Exit 1 with the reason; exit 2 is click's, for a flag value out of its range.
        raise click.ClickException(str(exc)) from None
