"""``agenttx tools``: the tools a running server offers."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from agenttx.cli.common import call, echo_json, json_option, server_option, timeout_option, to_dict
from agenttx.cli.output import command_console


@click.command()
@server_option
@json_option
@timeout_option
def tools(server: str, as_json: bool, timeout: float) -> None:
    """The tools a running server offers, with effect class and schemas."""
    from agenttx.wire import agenttx_pb2 as pb

    reply = call(server, lambda stub: stub.ListTools(pb.ListToolsRequest(), timeout=timeout))
    if as_json:
        echo_json([to_dict(t) for t in reply.tools])
        return
    table = Table("tool", "effect", "timeout")
    table.add_column("description", overflow="fold")
    for t in reply.tools:
        table.add_row(escape(t.name), t.effect, f"{t.timeout_ms / 1000:g}s", escape(t.description))
    command_console().print(table)
