"""``agenttx demo``: a scripted agent through a failure, a rewind, a commit and an effect."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from agenttx.cli.common import cli_metadata, fail, rpc_error_text


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory of the in-process server (default: a new temp dir).",
)
@click.option(
    "--server",
    envvar="AGENTTX_SERVER",
    default=None,
    help="Run against this server instead of an in-process one.",
)
def demo(directory: Path | None, server: str | None) -> None:
    """Run a scripted agent through a failure, a rewind, a commit and a released effect."""
    import grpc

    from agenttx.demo import run_demo

    try:
        ok = asyncio.run(run_demo(directory, server=server, metadata=cli_metadata()))
    except grpc.RpcError as exc:  # as every command prints a refusal
        fail(f"demo failed: {rpc_error_text(exc, server or 'the in-process server')}")
    except Exception as exc:  # one line, not a traceback
        fail(f"demo failed: {exc}")
    sys.exit(0 if ok else 1)
