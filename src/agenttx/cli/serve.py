"""``agenttx serve``: the gRPC server with health, reflection and metrics, and, with
``--http-addr``, MCP over streamable HTTP at ``/mcp`` on the same engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agenttx.cli.common import engine_option
from agenttx.cli.engine_options import engine_options, serve_config
from agenttx.cli.renamed_flags import accepting_old_names


def _tls(opts: dict[str, Any]) -> Any:
    from agenttx.auth.tls import TlsFiles

    cert, key, ca = opts["tls_cert"], opts["tls_key"], opts["tls_client_ca"]
    if cert is None and key is None:
        if ca is not None:
            raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        raise click.UsageError("--tls-cert and --tls-key go together: give both")
    return TlsFiles(cert, key, ca)


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
    "--max-streams",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    help="Event streams open at once, of every surface (gRPC WatchTransaction, "
    "/v1/events, /v1/transactions/{id}/events, MCP GET /mcp); one more is refused "
    "(gRPC RESOURCE_EXHAUSTED, HTTP 503 with Retry-After).",
)
@engine_option(
    "--max-streams-per-key",
    type=click.IntRange(1, 1_000_000),
    default=100,
    help="Of those, how many one API key may hold open.",
)
@engine_option(
    "--http-header-timeout-s",
    type=click.FloatRange(0.1, 600),
    default=10.0,
    help="A connection must send a whole request head (request line and headers) within "
    "this, from opening or from its last response; else it is closed.",
)
@engine_option(
    "--http-max-waiting-connections",
    type=click.IntRange(1, 1_000_000),
    default=512,
    help="Connections that have not sent a request head yet, at once; past it the oldest "
    "is closed.",
)
@engine_option(
    "--mcp-effect-tools",
    is_flag=True,
    default=False,
    help="MCP over HTTP also offers the operator's list_effects and retry_effect tools.",
)
@engine_option(
    "--api-keys",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="TOML file of [[key]] tables (`agenttx keys new` prints one); every call must then "
    "carry `authorization: Bearer <key>`. SIGHUP reloads it. Without it only loopback "
    "addresses are bound.",
)
@engine_option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM certificate chain: serve gRPC and HTTP over TLS (with --tls-key).",
)
@engine_option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM private key of --tls-cert (unencrypted).",
)
@engine_option(
    "--tls-client-ca",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM CA: require client certificates it signed (mutual TLS).",
)
@engine_option(
    "--otlp-endpoint",
    default="off",
    help="OpenTelemetry traces to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318/v1/traces; "
    'needs agenttx[otel]); "off" disables.',
)
@engine_option(
    "--grace-s",
    type=click.FloatRange(min=0),
    default=10.0,
    help="On SIGTERM, how many seconds in-flight calls may take to finish.",
)
@accepting_old_names(
    "serve only",
    {
        "grace_secs": click.FloatRange(min=0),
        "http_header_timeout_secs": click.FloatRange(0.1, 600),
        "http_max_streams": click.IntRange(1, 1_000_000),
        "http_max_streams_per_key": click.IntRange(1, 1_000_000),
    },
)
def serve(**opts: Any) -> None:
    """Serve AgentTx over gRPC (with health, reflection and Prometheus metrics), and MCP over
    HTTP with --http-addr.

    SIGTERM or Ctrl-C drains: new calls are refused, in-flight calls get --grace-s to
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
        max_streams=opts["max_streams"],
        max_streams_per_key=opts["max_streams_per_key"],
        http_header_timeout_s=opts["http_header_timeout_s"],
        http_max_waiting_connections=opts["http_max_waiting_connections"],
        mcp_effect_tools=opts["mcp_effect_tools"],
        grace_s=opts["grace_s"],
        api_keys=opts["api_keys"],
        tls=_tls(opts),
        otlp_endpoint=None
        if opts["otlp_endpoint"].strip().lower() == "off"
        else opts["otlp_endpoint"],
    )
    try:
        run(config)
    except StartupError as exc:
        # Exit 1 with the reason; exit 2 is click's, for a flag value out of its range.
        raise click.ClickException(str(exc)) from None
