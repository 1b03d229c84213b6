"""What ``agenttx tx compensate``, ``agenttx tx approve-compensation`` and ``agenttx tx
refuse-compensation`` do and print (their arguments and options are their rows' bindings,
``api/operations/cli_bindings.py``): compensate a committed transaction on a running server, preview
what that would run, approve or refuse a waiting undo (``docs/compensation.md``)."""

from __future__ import annotations

from rich.markup import escape

from agenttx.cli.common import echo_json, status_markup, to_dict, when
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect
from agenttx.types import CompensationPlan, CompensationResult, RollbackResult


def tx_compensate(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    reason: str,
    principal: str,
    preview: bool,
) -> None:
    """``tx compensate``: what the compensation ran (or, ``--preview``, would run); exits 1
    when steps were left for a human."""
    from agenttx.api import compensation_wire

    with connect() as client:
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


def tx_approve_compensation(
    connect: Connect, as_json: bool, transaction_id: str, principal: str, roles: tuple[str, ...]
) -> None:
    """``tx approve-compensation``: how the transaction stands after the approval."""
    with connect() as client:
        r = client.approve_compensation(transaction_id, principal, roles)
    _print_decision("approved", transaction_id, r, as_json, "compensation error")


def tx_refuse_compensation(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    reason: str,
    principal: str,
    roles: tuple[str, ...],
) -> None:
    """``tx refuse-compensation``: how the transaction stands, each refused step not undone."""
    with connect() as client:
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
