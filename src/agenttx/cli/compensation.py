"""``agenttx tx compensate``, ``agenttx tx approve-compensation`` and ``agenttx tx
refuse-compensation``: compensate a committed transaction on a running server, preview what
that would run, approve or refuse a waiting undo (``docs/compensation.md``)."""

from __future__ import annotations

import click
from rich.markup import escape

from agenttx.cli.common import (
    connected,
    echo_json,
    json_option,
    server_option,
    status_markup,
    timeout_option,
    to_dict,
    when,
)
from agenttx.cli.output import command_console
from agenttx.types import CompensationPlan, CompensationResult, RollbackResult


@click.command("compensate")
@click.argument("transaction_id")
@click.option("--reason", default="", help="Why (kept in the compensation's audit chain).")
@click.option("--principal", default="", help="Who asks (an approver must be someone else).")
@click.option("--preview", is_flag=True, help="Start nothing: show what would run.")
@server_option
@json_option
@timeout_option
def tx_compensate(
    transaction_id: str,
    reason: str,
    principal: str,
    preview: bool,
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Undo a committed transaction's kept undo actions in a new compensating transaction.

    Steps past their compensation window or whose tool declares rollback_not_supported are
    listed, never silently skipped; the compensation then ends FAILED, needing a human."""
    from agenttx.api import compensation_wire

    with connected(server, timeout) as client:
        if preview:
            plan = client.compensation_plan(transaction_id)
            reply = compensation_wire.plan_reply(plan)
            k, needs_approval = _previewed(plan), plan.needs_approval
        else:
            k = client.compensate(transaction_id, reason, principal=principal)
            reply = compensation_wire.result_reply(k)
            needs_approval = any(a.needs_approval for a in k.actions)
    if as_json:
        echo_json(to_dict(reply))
        return
    console = command_console()
    if preview:
        console.print(f"a compensation of {transaction_id} would:")
    else:
        console.print(
            f"compensating transaction {k.transaction_id} for {k.compensation_for}: "
            f"{status_markup(k.status)}"
        )
    for a in k.actions:
        window = f", window ends {when(a.expires_at)}" if a.expires_at else ""
        why = f": {escape(a.reason)}" if a.reason else ""
        console.print(
            f"  step {a.step_id} {escape(a.tool)} ({a.contract}{window}) [bold]{a.verdict}[/]{why}"
        )
    if not k.actions:
        console.print("  nothing: no step left an undo record or an unsupported effect")
    if needs_approval and k.status in ("awaiting_approval", "preview"):
        console.print(
            "an approver must approve: agenttx tx approve-compensation "
            f"{k.transaction_id or '<compensating transaction>'} --principal NAME --role approver"
            " (or refuse it: agenttx tx refuse-compensation … --reason WHY)"
        )
    if k.requires_human:
        for e in k.evidence:
            console.print(
                f"[red]not undone[/] step {e.get('step')} ({escape(str(e.get('tool')))}): "
                f"{escape(str(e.get('reason')))}"
            )
        if not preview:
            raise SystemExit(1)


def _previewed(plan: CompensationPlan) -> CompensationResult:
    """A plan as the compensation it would start: no transaction of its own yet, status
    ``preview``, and the steps it cannot undo as what it would report not undone."""
    evidence = [{"step": a.step_id, "tool": a.tool, "reason": a.reason} for a in plan.reported]
    return CompensationResult(
        transaction_id="",
        compensation_for=plan.transaction_id,
        status="preview",
        reason="",
        actions=plan.actions,
        evidence=evidence,
        requires_human=bool(evidence),
        revision=0,
    )


@click.command("approve-compensation")
@click.argument("transaction_id")
@click.option("--principal", required=True, help="The approver (not the transaction's own).")
@click.option("--role", "roles", multiple=True, help="A role the approver holds (approver).")
@server_option
@json_option
@timeout_option
def tx_approve_compensation(
    transaction_id: str,
    principal: str,
    roles: tuple[str, ...],
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Approve the undo a rollback or compensating transaction waits for."""
    with connected(server, timeout) as client:
        r = client.approve_compensation(transaction_id, principal, roles)
    _print_decision("approved", transaction_id, r, as_json, "compensation error")


@click.command("refuse-compensation")
@click.argument("transaction_id")
@click.option(
    "--reason",
    required=True,
    help="Why the undo must not run (at most 4096 bytes; the person who settles it reads it).",
)
@click.option("--principal", required=True, help="The refuser (not the transaction's own).")
@click.option("--role", "roles", multiple=True, help="A role the refuser holds (approver).")
@server_option
@json_option
@timeout_option
def tx_refuse_compensation(
    transaction_id: str,
    reason: str,
    principal: str,
    roles: tuple[str, ...],
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Refuse the undo a rollback or compensating transaction waits for, saying why.

    The refused undo actions never run; every other one does, and the transaction ends
    needing a human, each refused step listed as not undone with your reason."""
    with connected(server, timeout) as client:
        r = client.refuse_compensation(transaction_id, reason, principal, roles)
    # Exit 0: the refusal was recorded and the rollback or compensation went on; what it
    # left undone is listed for the person who settles it.
    _print_decision("refused", transaction_id, r, as_json, "not undone")


def _print_decision(
    word: str, transaction_id: str, r: RollbackResult, as_json: bool, label: str
) -> None:
    """An approver's decision's result: how the transaction stands, then each compensation
    error under ``label``."""
    if as_json:
        from agenttx.api.compensation_wire import approval_reply

        echo_json(to_dict(approval_reply(r)))
        return
    console = command_console()
    console.print(
        f"{word}: {transaction_id} is {status_markup(r.transaction_status)}, "
        f"compensations run: {r.compensations_run}"
    )
    for e in r.compensation_errors:
        console.print(f"[red]{label}[/] {escape(e)}")


COMMANDS = (tx_compensate, tx_approve_compensation, tx_refuse_compensation)
