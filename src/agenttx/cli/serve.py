"""``agenttx serve``: the gRPC server with health, reflection and metrics, and, with
``--http-addr``, MCP over streamable HTTP at ``/mcp`` on the same engine."""

from __future__ import annotations

from typing import Any

import click

from agenttx.cli.common import engine_option
from agenttx.cli.engine_options import engine_options, serve_config


def _hosts(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


@click.command()
@engine_option(
    "--listen-addr", default="127.0.0.1:50051", help="gRPC address (host:port; port 0: any)."
)
@engine_options
@engine_option(
    "--metrics-addr", default="127.0.0.1:9464", help='Prometheus /metrics; "off" disables.'
)
@engine_option(
    "--http-addr",
    default="off",
    help='HTTP listener (host:port) serving MCP streamable HTTP at /mcp; "off" disables.',
)
@engine_option(
    "--http-allowed-hosts",
    default="127.0.0.1:*,localhost:*,[::1]:*",
    help='Host headers the HTTP listener accepts (comma-separated, host:* for any port; "*" '
    "for any host).",
)
@engine_option(
    "--http-allowed-origins",
    default="http://127.0.0.1:*,http://localhost:*,http://[::1]:*",
    help='Origin headers the HTTP listener accepts when one is sent (comma-separated; "*" for '
    "any).",
)
@engine_option(
    "--grace-secs",
    type=click.FloatRange(min=0),
    default=10.0,
    help="On SIGTERM, how long in-flight calls may take to finish.",
)
def serve(**opts: Any) -> None:
    """Serve AgentTx over gRPC (with health, reflection and Prometheus metrics), and MCP over
    HTTP with --http-addr.

    SIGTERM or Ctrl-C drains: new calls are refused, in-flight calls get --grace-secs to
    finish, then the store closes and the process exits 0.
    """
    from agenttx.server import StartupError, run

    metrics_addr = opts["metrics_addr"]
    http_addr = opts["http_addr"]
    config = serve_config(
        opts,
        listen_addr=opts["listen_addr"],
        metrics_addr=None if metrics_addr.strip().lower() == "off" else metrics_addr,
        http_addr=None if http_addr.strip().lower() == "off" else http_addr,
        http_allowed_hosts=_hosts(opts["http_allowed_hosts"]),
        http_allowed_origins=_hosts(opts["http_allowed_origins"]),
        grace_secs=opts["grace_secs"],
    )
    try:
        run(config)
    except StartupError as exc:
        # Exit 1 with the reason; exit 2 is click's, for a flag value out of its range.
        raise click.ClickException(str(exc)) from None
