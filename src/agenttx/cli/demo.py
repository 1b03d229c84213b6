"""``agenttx demo``: a scripted agent through a failure, a rewind, a commit and an effect."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from agenttx.cli.common import api_key, fail, refusal_text, tls_roots
from agenttx.cli.output import command_console
from agenttx.redaction import redact


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory of the in-process server, kept afterwards (default: a new temporary "
    "directory, removed at the end).",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the temporary data directory (its path is printed) to look at afterwards.",
)
@click.option(
    "--server",
    envvar="AGENTTX_SERVER",
    default=None,
    help="Run against this server instead of an in-process one.",
)
def demo(directory: Path | None, keep: bool, server: str | None) -> None:
    """Run a scripted agent through a failure, a rewind, a commit and a released effect."""
    from agenttx.demo import run_demo
    from agenttx.errors import AgentTxError

    if server is not None and (keep or directory is not None):
        raise click.UsageError(
            "--dir and --keep are for the demo's own in-process server; with --server the "
            "data stays on that server: leave them out"
        )
    try:
        ok = asyncio.run(
            run_demo(
                directory,
                command_console(),
                server,
                api_key(),
                keep=keep,
                tls_roots=tls_roots() if server is not None else None,
            )
        )
    except AgentTxError as exc:  # as every command prints a refusal
        fail(f"demo failed: {refusal_text(exc, server or 'the in-process server')}")
    except Exception as exc:  # one line, not a traceback, its secrets masked
        fail(f"demo failed: {redact(str(exc))}")
    sys.exit(0 if ok else 1)
