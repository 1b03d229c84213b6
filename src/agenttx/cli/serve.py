"""``agenttx serve``: the gRPC server with health, reflection and metrics, and, with
``--http-addr``, MCP over streamable HTTP at ``/mcp`` on the same engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agenttx.cli.common import engine_option
from agenttx.cli.engine_options import serve_config, setting_options


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


@click.command()
@setting_options("server", "command", "engine")
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
def serve(**opts: Any) -> None:
    """Serve AgentTx over gRPC (with health, reflection and Prometheus metrics), and MCP over
    HTTP with --http-addr.

    SIGTERM or Ctrl-C drains: new calls are refused, in-flight calls get --grace-s to
    finish, then the store closes and the process exits 0.
    """
    from agenttx.server import StartupError, run

    # The TLS files go together (``ServeConfig.tls``); every other flag is a setting.
    tls = _tls(opts)
    config = serve_config(opts, tls=tls)
    try:
        run(config)
    except StartupError as exc:
        # Exit 1 with the reason; exit 2 is click's, for a flag value out of its range.
        raise click.ClickException(str(exc)) from None
