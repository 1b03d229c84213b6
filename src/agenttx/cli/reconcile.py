"""What ``agenttx tx reconcile`` and ``agenttx tx resolve`` do and print (their arguments and
options are their rows' bindings, ``api/operations/cli_bindings.py``): settle a step whose outside
call has an unknown outcome, on a running server (``docs/reconcile.md``).

``reconcile`` asks the tool's reconcile handler; ``resolve`` is an operator's word after
checking the outside system, for a tool without a handler. Neither ever sends the call again.
"""

from __future__ import annotations

import json

import click
from rich.markup import escape

from agenttx.cli.common import echo_json, to_dict, when
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect
from agenttx.types import ReconcileResult, TransactionInfo

OUTCOME_STYLE = {"happened": "green", "not_happened": "yellow", "unknown": "magenta"}


def _show(r: ReconcileResult, as_json: bool) -> None:
    if as_json:
        from agenttx.api.reconcile_wire import reconcile_reply

        echo_json(to_dict(reconcile_reply(r)))
        return
    console = command_console()
    style = OUTCOME_STYLE.get(r.outcome, "white")
    console.print(
        f"step {r.step_id} of {escape(r.transaction_id)}: [{style}]{r.outcome}[/] · next step "
        f"{r.next_step_id}"
    )
    if r.operation_id:
        console.print(f"operation {escape(r.operation_provider)}:{escape(r.operation_id)}")
    if r.output_json:
        console.print(f"output {escape(r.output_json)}")
    console.print(escape(r.clean_hint))


def unknown_outcome_fact(t: TransactionInfo) -> str:
    """``agenttx tx show``'s line for a pending unknown outcome: where it stands and the
    command that settles it."""
    step, tx = t.outcome_unknown_step, t.transaction_id
    state = "is being reconciled" if t.reconcile_state == "reconciling" else "awaits reconciliation"
    # A rollback or compensation waiting on an unknown undo names the undo, not the step.
    undo = t.reconcile_state == "undo_outcome_unknown"
    parts = [f"the undo of step {step} {state}" if undo else f"step {step} {state}"]
    if t.operation_id:
        parts.append(f"operation {escape(t.operation_provider)}:{escape(t.operation_id)}")
    if t.reconcile_after:
        parts.append(f"from {when(t.reconcile_after)}")
    parts.append(f"`agenttx tx reconcile {escape(tx)} {step}` (no handler: `agenttx tx resolve`)")
    return " · ".join(parts)


def tx_reconcile(connect: Connect, as_json: bool, transaction_id: str, step_id: int) -> None:
    """``tx reconcile``: the step's outcome as its tool's handler found it."""
    with connect() as client:
        r = client.reconcile_step(transaction_id, step_id)
    _show(r, as_json)


def tx_resolve(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    step_id: int,
    outcome: str,
    output_json: str,
    reason: str,
) -> None:
    """``tx resolve``: ``--output`` read as JSON before anything is sent, then the outcome."""
    output = None
    if output_json:
        try:
            output = json.loads(output_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--output") from None
    with connect() as client:
        r = client.resolve_step(
            transaction_id, step_id, outcome.replace("-", "_"), output=output, reason=reason
        )
    _show(r, as_json)
