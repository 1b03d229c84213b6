"""The CLI commands derived from the operation table: one per row with a ``cli`` binding
(``agenttx.api.operations.CliCommand``), in its group beside the commands written by hand.

A group that can hold them is a ``TableGroup`` (``tx``, ``effects``, ``audit``): it finds
them in the table when asked for a command it lacks, or for its listing, and not before, so
the table (which imports the engine's reply builders: half a second) is not imported by a
command that is not one of them.

From the binding and the row's request alone: an option per bound field (``--receipt-id``
for ``receipt_id``), typed by the field (text, a whole number, a flag, repeatable for a
list), with ``--server``, ``--json`` and ``--timeout`` as every command has them. A run fills
the row's request (two options of one oneof are a usage error, exit 2), sends it through the
client's one generic ``call`` (``common.connected``: a refusal is its one line and exit 1, as
for every command) and prints the reply: ``--json`` its fields (``common.to_dict``), else one
``field``/``value`` row per field, nested ones by dotted name, and each list of messages as a
table of its own (``cli/output.py``: tab-separated when stdout is not a terminal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click
from google.protobuf.descriptor import FieldDescriptor
from rich import box
from rich.table import Table
from rich.text import Text

from agenttx.cli.common import connected, echo_json, json_option, server_option, timeout_option
from agenttx.cli.common import to_dict as fields_of

if TYPE_CHECKING:
    from agenttx.api.operations import CliCommand, CliOption, Row

_T = FieldDescriptor
_INTEGERS = (_T.TYPE_UINT32, _T.TYPE_UINT64, _T.TYPE_INT32, _T.TYPE_INT64)


class TableGroup(click.Group):
    """A command group whose commands include the operation table's rows bound to it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *derived(self.name or "")})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and (row := derived(self.name or "").get(cmd_name)) is not None:
            found = command(row)
            self.add_command(found)  # made once per process
        return found


def derived(group: str) -> dict[str, Row]:
    """The rows whose command is in ``group``, by command name."""
    from agenttx.api.operations import ROWS

    return {r.cli.name: r for r in ROWS if r.cli is not None and r.cli.group == group}


def command(row: Row) -> click.Command:
    """``row``'s command, for its binding's group."""
    b = _binding(row)

    def run(server: str, as_json: bool, timeout: float, **values: Any) -> None:
        from agenttx.api.operations.requests import clash, filled

        named = clash(row.request, values)
        if named:
            raise click.UsageError(f"give only one of {', '.join(_flag(n) for n in named)}")
        request = filled(row.request, values)
        with connected(server, timeout) as client:
            reply = client.call(row.rpc, request)
        fields = fields_of(reply)
        if as_json:
            echo_json(fields)
            return
        from agenttx.cli.output import command_console

        console = command_console()
        lists = {k: v for k, v in fields.items() if _is_messages(v)}
        console.print(_facts({k: v for k, v in fields.items() if k not in lists}))
        for name, items in lists.items():
            console.print(_listing(name, items))

    decorated: Callable[..., Any] = server_option(json_option(timeout_option(run)))
    fields = row.request.DESCRIPTOR.fields_by_name
    for o in reversed(b.options):
        decorated = _option(fields[o.name], o)(decorated)
    return click.command(b.name, help=b.help)(decorated)


def _binding(row: Row) -> CliCommand:
    assert row.cli is not None, row.name
    return row.cli


def _option(fd: Any, o: CliOption) -> Callable[[Callable[..., Any]], Any]:
    flag = _flag(o.name)
    if fd.type == _T.TYPE_BOOL:
        return click.option(flag, o.name, is_flag=True, help=o.help)
    kind: Any = click.INT if fd.type in _INTEGERS else click.STRING
    return click.option(
        flag, o.name, type=kind, multiple=fd.is_repeated, required=o.required, help=o.help
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _flat(fields: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in fields.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{name}.")
        else:
            yield prefix + name, value


def _cell(value: Any) -> Text:
    # Text, not markup: a value is shown as sent, brackets and all.
    if isinstance(value, list):
        return Text(", ".join(str(v) for v in value))
    return Text("" if value is None else str(value))


def _facts(fields: dict[str, Any]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in _flat(fields):
        table.add_row(name, _cell(value))
    return table


def _listing(name: str, items: list[dict[str, Any]]) -> Table:
    rows = [dict(_flat(item)) for item in items]
    table = Table(title=name, box=box.SIMPLE_HEAD, pad_edge=False)
    columns = list(rows[0])
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table
