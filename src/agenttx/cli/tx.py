"""``agenttx tx``: the group, and what ``tx list``, ``tx show`` and ``tx rollback`` do and print
on a running server (their arguments and options are their rows' bindings,
``api/operations/cli_bindings.py``; begin, step and commit are in tx_step.py, preview and
approval in tx_receipts.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from agenttx.cli.common import echo_json, status_markup, to_dict, when, wire_message
from agenttx.cli.output import command_console
from agenttx.cli.reconcile import unknown_outcome_fact
from agenttx.cli.rows import Connect, TableGroup
from agenttx.cli.watch import watch
from agenttx.plural import plural
from agenttx.receipts import voided_because
from agenttx.types import ReceiptView, TransactionInfo, TxStatus

if TYPE_CHECKING:
    from agenttx.client import TransactionSummary


@click.group(cls=TableGroup)
def tx() -> None:
    """Run, list, inspect and roll back transactions on a running server."""


def tx_list(
    connect: Connect,
    as_json: bool,
    statuses: tuple[str, ...],
    agent: str | None,
    label: str | None,
    limit: int,
) -> None:
    """``tx list``: the listing read a page at a time up to ``--limit``, as a table."""
    found: list[TransactionSummary] = []
    with connect() as client:
        token = ""
        while len(found) < limit:
            page = client.list_transactions(
                statuses=[s.upper() for s in statuses],
                agent_id=agent or "",
                label=label or "",
                page_size=min(limit - len(found), 500),
                page_token=token,
            )
            found.extend(page.transactions)
            token = page.next_page_token
            if not token:
                break
    found = found[:limit]
    if as_json:
        echo_json([to_dict(_summary(t)) for t in found])
        return
    console = command_console()
    # Ids are what a user copies into `tx show`: never wrapped or cut. Labels and abort
    # reasons only when the terminal has room for them (`tx show` has them too).
    wide = console.width >= 120
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("transaction", no_wrap=True, min_width=35)
    table.add_column("status", no_wrap=True)
    table.add_column("agent", overflow="fold")
    table.add_column("next", justify="right")
    table.add_column("updated", no_wrap=True)
    if wide:
        table.add_column("labels", overflow="fold")
        table.add_column("reason", overflow="fold")
    for t in found:
        row = [
            t.transaction_id,
            status_markup(t.status),
            escape(t.agent_id),
            str(t.next_step_id or "-"),
            when(t.updated_at, short=True),
        ]
        if wide:
            row += [escape(", ".join(t.labels)), escape(t.abort_reason)]
        table.add_row(*row)
    console.print(table)
    console.print(plural(len(found), "transaction"))


def _summary(t: TransactionSummary) -> Any:
    """A ``tx list`` row as the wire's ``TransactionSummary`` (what ``--json`` prints)."""
    from agenttx.wire import agenttx_pb2 as pb

    snapshot = pb.Snapshot(transaction_id=t.transaction_id, revision=t.revision)
    return wire_message(pb.TransactionSummary, t, snapshot=snapshot)


def tx_show(connect: Connect, as_json: bool, transaction_id: str) -> None:
    """``tx show``: the transaction's facts, receipts and steps (a history too large for one
    reply is read page by page: the client's ``get_transaction``)."""
    with connect() as client:
        t = client.get_transaction(transaction_id)
    if as_json:
        from agenttx.api.operations.replies import transaction_reply

        echo_json(to_dict(transaction_reply(t)))
        return
    console = command_console()
    p = t.policy
    facts = [
        ("transaction", t.transaction_id),
        ("status", status_markup(t.status)),
        ("agent", escape(t.agent_id)),
        ("next step", str(t.next_step_id or "- (ended)")),
        ("revision / epoch", f"{t.revision} / {t.epoch}"),
        ("isolation", t.isolation),
        ("mode / principal", f"{t.mode or 'transactional'} / {escape(t.principal) or '-'}"),
        (
            "policy",
            f"max_local_depth={p.max_local_depth} max_global_resets={p.max_global_resets} "
            f"replay_budget_factor={p.replay_budget_factor:g} "
            + (f"max_step_retries={p.max_step_retries} " if p.max_step_retries is not None else "")
            + f"(resets used: {t.global_resets})",
        ),
        ("created / updated", f"{when(t.created_at)} / {when(t.updated_at)}"),
        ("revisions", _revisions(t)),
    ]
    if t.metadata:
        facts.append(("metadata", escape(json.dumps(dict(t.metadata), ensure_ascii=False))))
    if t.abort_reason:
        facts.append(("abort reason", escape(t.abort_reason)))
    if t.outcome_unknown_step:
        facts.append(("outcome unknown", unknown_outcome_fact(t)))
    if t.approval_reasons:  # a commit now needs an approved receipt (tx preview, tx approve)
        facts.append(("needs approval", escape("; ".join(t.approval_reasons))))
    for name, value in facts:
        console.print(f"[bold]{name:<18}[/] {value}")
    for c in t.constraints:
        console.print(f"[bold]{'constraint':<18}[/] {escape(c)}")
    for e in t.compensation_errors:
        console.print(f"[bold red]{'compensation error':<18}[/] {escape(e)}")
    for r in t.receipts:  # newest first: the latest decision on top
        console.print(f"[bold]{'receipt':<18}[/] {_receipt_line(r, t)}")
    steps = Table("step", "try", "tool", "status", "live", "epoch")
    steps.add_column("output / hint", overflow="fold")
    for s in t.steps:
        detail = s.output_json if s.status == "SUCCESS" else s.clean_hint
        steps.add_row(
            str(s.step_id),
            str(s.attempt),
            escape(s.tool_name),
            status_markup(s.status),
            "yes" if s.live else "no",
            str(s.epoch),
            escape(detail if len(detail) <= 120 else detail[:119] + "…"),
        )
    console.print(steps)
    if t.edges:
        edges = ", ".join(f"{a}→{b} ({key})" for a, b, key in t.edges)
        console.print(f"[bold]dependencies[/] {escape(edges)}")


def _receipt_line(r: ReceiptView, t: TransactionInfo) -> str:
    """One receipt of ``tx show`` (of transaction ``t``): its status (``expired`` and
    ``voided`` as the server computed them), who decided it, and — while the transaction is
    open — until when it holds or, once expired or voided, why and what to do."""
    active = t.status == TxStatus.ACTIVE.value
    decided = f" by {escape(r.decided_by)} {when(r.decided_at)}" if r.decided_by else ""
    then = ": preview again for a new receipt" if active else ""
    if r.status == "expired":
        approved = f" (approved{decided})" if r.decided_by else " (never decided)"
        return f"{r.receipt_id} [yellow]expired[/] {when(r.expires_at)}{approved}{then}"
    if r.status == "voided":
        approved = f" (approved{decided})" if r.decided_by else ""
        why = voided_because(r.revision, t.revision, t.status)
        again = "; preview again" if active else ""
        return f"{r.receipt_id} [yellow]voided[/]: {why}{again}{approved}"
    why = f": {escape(r.reason)}" if r.reason else ""
    holds = active and r.status in ("issued", "approved")
    until = f" (expires {when(r.expires_at)})" if holds else ""
    return f"{r.receipt_id} {r.status}{decided}{why}{until}"


def _revisions(t: TransactionInfo) -> str:
    """The revision counters of docs/undo.md in one line."""
    can = [n for n in ("undo", "redo", "commit", "rollback") if getattr(t, f"can_{n}")]
    return (
        f"{t.revision_count} of {t.max_revisions} ({t.remaining_revisions} left); "
        f"can {', '.join(can) or 'nothing'}"
    )


def tx_rollback(
    connect: Connect, as_json: bool, transaction_id: str, to_step: int | None, reason: str
) -> None:
    """``tx rollback``: what the abort or rewind did, and a waiting undo's next command."""
    with connect() as client:
        b = client.rollback(transaction_id, to_step, reason)
    if as_json:
        from agenttx.api.operations.replies import rollback_reply

        echo_json(to_dict(rollback_reply(b)))
        return
    console = command_console()
    if b.compensation_approval_pending:
        console.print(
            f"{transaction_id} is {status_markup(b.transaction_status)}: an undo waits for an "
            f"approver (agenttx tx approve-compensation {transaction_id} --principal NAME "
            "--role approver, or tx refuse-compensation with --reason)"
        )
    elif b.next_step_id:
        console.print(
            f"rewound {transaction_id}: next step {b.next_step_id}, "
            f"status {status_markup(b.transaction_status)}"
        )
    else:
        console.print(f"aborted {transaction_id}: status {status_markup(b.transaction_status)}")
    console.print(f"compensations run: {b.compensations_run}")
    for e in b.compensation_errors:
        console.print(f"[red]compensation error[/] {escape(e)}")


tx.add_command(watch)  # `tx watch`: cli/watch.py
