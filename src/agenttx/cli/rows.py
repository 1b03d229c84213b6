"""The CLI commands derived from the operation table: one per row with a ``cli`` binding
(``agenttx.api.operations.cli_bindings``), in its group beside the commands written by hand.

A group that can hold them is a ``TableGroup`` (``agenttx`` itself, ``tx``, ``effects``,
``audit``): it makes one from its binding when asked for a command it lacks, or for its
listing, and not before. The bindings are a light module of their own, so a run never imports
the table (the engine's reply builders: half a second) to find its command.

From the binding alone: an argument or option per declared one, of the kind it declares
(text, a flag, repeatable, a whole number read by ``agenttx.numbers``, a range, choices, a
path), then ``--server``, ``--json`` and ``--timeout`` as every command has them (where the
binding puts them, if it does), and the old spellings of ``agenttx.renamed`` hidden. A run
calls the row's action (``cli/actions.py``) with the parsed values and how to reach the
server (``Connect``: a ``common.connected`` client, a refusal its one line and exit 1, as for
every command): what the command sends and prints is the action's. A row with no action gets
the generic one: it fills the row's request (two options of one oneof are a usage error, exit
2), sends it through the client's one ``call`` and prints the reply: ``--json`` its fields
(``common.to_dict``), else one ``field``/``value`` row per field, nested ones by dotted name,
and each list of messages as a table of its own (``cli/output.py``: tab-separated when
stdout is not a terminal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import click

from agenttx.api.operations.cli_bindings import COMMANDS, SERVER, SHARED, CliCommand, CliOption
from agenttx.cli.common import connected, echo_json, flag, param
from agenttx.cli.common import to_dict as fields_of

if TYPE_CHECKING:
    from rich.table import Table

    from agenttx.client import AgentTxClient

# How an action reaches the server: a ``with connect() as client:`` block is one command
# run's client (``common.connected``), opened after the action's own checks of its values.
Connect = Callable[[], AbstractContextManager["AgentTxClient"]]


class TableGroup(click.Group):
    """A command group whose commands include the rows bound to it (``bound``: its own name
    unless given; "" for ``agenttx`` itself)."""

    def __init__(self, *args: Any, bound: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound = (self.name or "") if bound is None else bound

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *derived(self.bound)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and (binding := derived(self.bound).get(cmd_name)) is not None:
            found = command(binding)
            self.add_command(found)  # made once per process
        return found


def derived(group: str) -> dict[str, CliCommand]:
    """The bindings whose command is in ``group``, by command name."""
    return {b.name: b for b in COMMANDS if b.group == group}


def command(binding: CliCommand) -> click.Command:
    """``binding``'s command, for its group."""
    from agenttx.cli.actions import ACTIONS

    action = ACTIONS.get(binding.row) or _generic(binding)

    def run(server: str, timeout: float | None = None, **values: Any) -> None:
        action(lambda: connected(server, timeout), **values)

    decorated: Callable[..., Any] = run
    if binding.renamed:
        from agenttx.cli.renamed_flags import accepting_old_names

        decorated = accepting_old_names(binding.renamed, with_env=False)(decorated)
    for o in reversed(parameters(binding)):
        decorated = param(o)(decorated)
    return click.command(binding.name, help=binding.help)(decorated)


def parameters(binding: CliCommand) -> tuple[CliOption, ...]:
    """``binding``'s arguments and options in their order: the shared ones last unless it
    places them itself."""
    if SERVER in binding.options:
        return binding.options
    return (*binding.options, *SHARED)


def action_values(binding: CliCommand) -> set[str]:
    """What ``binding``'s action is called with: ``connect`` (made of ``--server`` and
    ``--timeout``) and every other value."""
    return {"connect", *(o.name for o in parameters(binding))} - {"server", "timeout"}


# --------------------------------------------------------------------------- the generic action


def _generic(binding: CliCommand) -> Callable[..., None]:
    """A row's command with no action of its own: its request filled from the values, sent
    through ``call``, its reply printed."""
    flags = {o.name: flag(o) for o in binding.options}

    def act(connect: Connect, as_json: bool, **values: Any) -> None:
        from agenttx.api.operations import ROWS
        from agenttx.api.operations.requests import clash, filled

        [row] = [r for r in ROWS if r.name == binding.row]
        named = clash(row.request, values)
        if named:
            raise click.UsageError(f"give only one of {', '.join(flags[n] for n in named)}")
        request = filled(row.request, values)
        with connect() as client:
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

    return act


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _flat(fields: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in fields.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{name}.")
        else:
            yield prefix + name, value


def _cell(value: Any) -> Any:
    from rich.text import Text

    # Text, not markup: a value is shown as sent, brackets and all.
    if isinstance(value, list):
        return Text(", ".join(str(v) for v in value))
    return Text("" if value is None else str(value))


def _facts(fields: dict[str, Any]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in _flat(fields):
        table.add_row(name, _cell(value))
    return table


def _listing(name: str, items: list[dict[str, Any]]) -> Table:
    from rich import box
    from rich.table import Table

    rows = [dict(_flat(item)) for item in items]
    table = Table(title=name, box=box.SIMPLE_HEAD, pad_edge=False)
    columns = list(rows[0])
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table
