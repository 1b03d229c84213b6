"""What ``agenttx tx undo`` and ``agenttx tx redo`` do and print (their arguments are their
rows' bindings, ``api/operations/cli_bindings.py``): move a transaction on a running server one step
back (undo the last live step) or forward again (re-apply the step just undone, exactly).

A refusal (nothing to undo, an irreversible step, something ran since the undo) prints the
server's hint and exits 1, like every refused ``tx`` command (``common.connected``)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from agenttx.cli.common import echo_json, status_markup, to_dict
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect
from agenttx.types import UndoResult


def tx_undo(connect: Connect, as_json: bool, transaction_id: str) -> None:
    """``tx undo``: the step undone, what its undo ran, what can come next."""
    with connect() as client:
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


def tx_redo(connect: Connect, as_json: bool, transaction_id: str) -> None:
    """``tx redo``: the step re-applied, what can come next."""
    with connect() as client:
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
