"""``agenttx tx watch <id>``: follow a transaction live (the client's ``watch``), printing each
change of its status and every change of a step attempt as it lands — a new attempt, a
status it moved to (RUNNING, then SUCCESS or FAILED), and an attempt an undo or rewind took
out of the transaction — until the transaction ends."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from agenttx.cli.common import (
    connected,
    json_option,
    server_option,
    status_markup,
    to_dict,
    when,
    wire_message,
)
from agenttx.cli.numbers import WholeNumberParam
from agenttx.cli.output import command_console
from agenttx.numbers import AFTER_REVISION
from agenttx.types import StepView, TxStatus

if TYPE_CHECKING:
    from agenttx.client import TransactionEvent

# The status column is as wide as the longest transaction status, so every row lines up.
_STATUS_WIDTH = max(len(s.value) for s in TxStatus)
# The longest event kind (core.events: begin, state, step, rewind, commit, abort, compensate).
_KIND_WIDTH = len("compensate")


@click.command("watch")
@click.argument("transaction_id")
@click.option(
    "--after-revision",
    type=WholeNumberParam(AFTER_REVISION),
    default=0,
    show_default=True,
    help="Start after this revision (0: show the current state first).",
)
@server_option
@json_option
def watch(transaction_id: str, after_revision: int, server: str, as_json: bool) -> None:
    """Follow a transaction live until it commits or ends (Ctrl-C stops watching)."""
    console = command_console()
    try:
        # Each read of the transaction after an event has 10 seconds; the stream has none.
        with connected(server, timeout=10) as client:
            # (status, live) of each step attempt as last printed, in the history's order
            # (attempts are appended, never reordered: position i is the same attempt each read).
            seen: list[tuple[str, bool]] = []
            for e in client.watch(transaction_id, after_revision):
                t = client.get_transaction(transaction_id)
                changed = _changes(seen, t.steps)
                seen = [(s.status, s.live) for s in t.steps]
                if as_json:
                    click.echo(json.dumps(_event_json(e, changed)))
                    continue
                console.print(
                    f"[dim]{when(e.at)}[/] rev {e.revision:<4} "
                    f"{status_markup(e.status, _STATUS_WIDTH)} {e.kind:<{_KIND_WIDTH}} "
                    f"next step {e.next_step_id or '-'}"
                )
                for s, undone in changed:
                    console.print(_step_line(s, undone))
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _event_json(e: TransactionEvent, changed: list[tuple[StepView, bool]]) -> dict[str, Any]:
    """One ``--json`` line: the event and the attempts it changed, as the wire has them."""
    from agenttx.api.operations.replies import step_record
    from agenttx.wire import agenttx_pb2 as pb

    event = wire_message(pb.TransactionEvent, e)
    return {"event": to_dict(event), "steps": [to_dict(step_record(s)) for s, _ in changed]}


def _changes(seen: list[tuple[str, bool]], steps: list[StepView]) -> list[tuple[StepView, bool]]:
    """The attempts to print, each with whether the line is its undo: a new attempt, one
    whose status moved since it was printed, and a successful one an undo or rewind took out
    since (also when that happened before this read first saw it: events carry no steps, so
    a read may come a few revisions late)."""
    changed: list[tuple[StepView, bool]] = []
    for i, s in enumerate(steps):
        moved = i >= len(seen) or seen[i][0] != s.status
        if moved:
            changed.append((s, False))
        if s.status == "SUCCESS" and not s.live and (moved or seen[i][1]):
            changed.append((s, True))
    return changed


def _step_line(s: StepView, undone: bool) -> str:
    head = f"    step {s.step_id}.{s.attempt} {escape(s.tool_name)} "
    if undone:
        return head + "undone"
    line = head + status_markup(s.status)
    if s.clean_hint:
        line += f" {escape(s.clean_hint)}"
    if s.strategy:  # the controller's decision on a failed attempt
        line += f" → {s.strategy}"
        if s.rollback_to_step:
            line += f" to step {s.rollback_to_step}"
        if s.root_cause_step:
            line += f" (root cause: step {s.root_cause_step})"
    return line
