"""What ``agenttx tools`` prints: the tools a running server offers (the command is its row's
binding, ``api/operations/cli_bindings.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from agenttx.cli.common import echo_json, to_dict, wire_message
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect

if TYPE_CHECKING:
    from agenttx.client import ToolInfo


def tools(connect: Connect, as_json: bool) -> None:
    """``agenttx tools``: the catalogue as a table."""
    with connect() as client:
        found = client.list_tools()
    if as_json:
        echo_json([to_dict(_wire(t)) for t in found])
        return
    table = Table("tool", "effect", "timeout")
    table.add_column("description", overflow="fold")
    for t in found:
        table.add_row(escape(t.name), t.effect, f"{t.timeout_s:g}s", escape(t.description))
    command_console().print(table)


def _wire(t: ToolInfo) -> Any:
    """A tool as the wire's ``ToolInfo`` describes it (what ``--json`` prints)."""
    from agenttx.wire import agenttx_pb2 as pb

    return wire_message(pb.ToolInfo, t, timeout_ms=round(t.timeout_s * 1000))
