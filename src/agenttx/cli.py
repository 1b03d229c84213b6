"""The ``agenttx`` command line."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from agenttx.embedded import Engine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agenttx")
def main() -> None:
    """AgentTx: transactional tool calls for AI agents."""


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the demo's database, files and outbox here (default: a temp dir).",
)
def demo(directory: Path | None) -> None:
    """Run a scripted agent through a failure, a rewind, a commit and a released effect."""
    from agenttx.demo import run_demo

    ok = asyncio.run(run_demo(directory))
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--tools", "tool_modules", multiple=True, help="Also load tools from module[:attr].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def tools(tool_modules: tuple[str, ...], as_json: bool) -> None:
    """List the tools an engine offers, with effect class and input schema."""

    async def listing() -> list[dict[str, object]]:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            engine = await Engine.open(
                f"sqlite:///{d}/tools.db", tool_modules=tool_modules, background=False
            )
            try:
                return engine.list_tools()
            finally:
                await engine.close()

    described = asyncio.run(listing())
    if as_json:
        click.echo(json.dumps(described, indent=2))
        return
    table = Table("tool", "effect", "description")
    for t in described:
        table.add_row(str(t["name"]), str(t["effect"]), str(t["description"]))
    Console().print(table)
