"""``agenttx tx undo`` and ``agenttx tx redo``: move a transaction on a running server one step
back (undo the last live step) or forward again (re-apply the step just undone, exactly).

A refusal (nothing to undo, an irreversible step, something ran since the undo) prints the
server's hint and exits 1, like every refused ``tx`` command (``common.connected``)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.markup import escape

from agenttx.cli.common import (
    connected,
    echo_json,
    json_option,
    server_option,
    status_markup,
    timeout_option,
    to_dict,
)
from agenttx.cli.output import command_console
from agenttx.types import UndoResult


@click.command("undo")
@click.argument("transaction_id")
@server_option
@json_option
@timeout_option
def tx_undo(transaction_id: str, server: str, as_json: bool, timeout: float) -> None:
    """Undo the last live step of a transaction (docs/undo.md)."""
    with connected(server, timeout) as client:
        u = client.undo_step(transaction_id)
    if as_json:
        from agenttx.api.undo_wire import undo_reply

        echo_json(to_dict(undo_reply(u)))
        return
    console = command_console()
    console.print(
        f"undid step {u.step_id} of {transaction_id}: next step {u.next_step_id}, status "
        f"{status_markup(u.transaction_status)}"
    )
    console.print(
        f"compensations run: {u.compensations_run}, staged effects dropped: {u.effects_dropped}"
    )
    for e in u.compensation_errors:
        console.print(f"[red]compensation error[/] {escape(e)}")
    _next(console, u)


@click.command("redo")
@click.argument("transaction_id")
@server_option
@json_option
@timeout_option
def tx_redo(transaction_id: str, server: str, as_json: bool, timeout: float) -> None:
    """Re-apply the step the last undo undid, exactly (docs/undo.md)."""
    with connected(server, timeout) as client:
        u = client.redo_step(transaction_id)
    if as_json:
        from agenttx.api.undo_wire import redo_reply

        echo_json(to_dict(redo_reply(u)))
        return
    console = command_console()
    console.print(
        f"redid step {u.step_id} of {transaction_id}: next step {u.next_step_id}, status "
        f"{status_markup(u.transaction_status)}"
    )
    _next(console, u)


def _next(console: Console, u: UndoResult) -> None:
    can = [name for name, ok in (("undo", u.can_undo), ("redo", u.can_redo)) if ok]
    console.print(f"can now: {', '.join(can) or 'neither undo nor redo'}")
