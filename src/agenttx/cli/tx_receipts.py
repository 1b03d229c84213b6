"""What ``agenttx tx preview``, ``agenttx tx approve`` and ``agenttx tx refuse`` do and print
(their arguments and options are their rows' bindings, ``api/operations/cli_bindings.py``):
review the exact change a commit would make, and approve or refuse its receipt as an approver
(``docs/safety.md``). They talk to a running server through the client, like the rest of
``agenttx tx`` (``common.connected``); the approver names itself with ``--principal`` (until
API keys carry it) and holds ``approver`` through ``--role``."""

from __future__ import annotations

import time
from typing import Any

import click
from rich.markup import escape

from agenttx.cli.common import echo_json, to_dict
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect
from agenttx.jsontext import compact
from agenttx.plural import plural


def tx_preview(connect: Connect, as_json: bool, transaction_id: str) -> None:
    """``tx preview``: the change, the receipt and the command to run next."""
    with connect() as client:
        p = client.preview_commit(transaction_id)
    if as_json:
        from agenttx.api.receipts_wire import preview_reply

        echo_json(to_dict(preview_reply(p)))
        return
    console = command_console()
    left = max(0, int(p.expires_at - time.time()))
    console.print(f"[bold]receipt[/]      {p.receipt_id}  (expires in {left} s)")
    console.print(f"[bold]change hash[/]  {p.change_hash}")
    console.print(f"[bold]revision[/]     {p.revision}   [bold]mode[/] {p.mode}")
    if p.approval_required:
        console.print("[bold yellow]approval required[/]: " + escape("; ".join(p.approval_reasons)))
    c = p.changes
    for s in c.state:
        console.print(
            f"  state  {escape(s.key)}: {escape(_value(s.before))} → {escape(_value(s.after))}"
        )
    for f in c.files:
        console.print(
            f"  file   {escape(f.path)}: {f.before_sha256[:12] or 'new'} → "
            f"{f.after_sha256[:12] or 'deleted'}"
        )
        if f.diff:
            console.print(escape(f.diff.rstrip("\n")), highlight=False)
        elif f.note:
            console.print(f"         ({escape(f.note)})")
    for e in c.effects:
        console.print(
            f"  effect step {e.step_id} {escape(e.channel)} key {escape(e.idempotency_key)}: "
            f"{escape(e.summary)}"
        )
    for i in c.irreversible:
        console.print(f"  [red]irreversible[/] step {i.step_id} {escape(i.tool)} (already done)")
    for u in c.discarded_undo:
        console.print(f"  undo discarded: step {u.step_id} {escape(u.handler)}")
    for a in p.compensation:  # what a rollback or compensation could not simply run
        if a.verdict != "run":
            why = f": {escape(a.reason)}" if a.reason else ""
            console.print(
                f"  [yellow]undo {a.verdict.replace('_', ' ')}[/] step {a.step_id} "
                f"{escape(a.tool)} ({escape(a.contract)}){why}"
            )
    if c.values_elided:
        console.print(f"  ({plural(c.values_elided, 'value')} shown by hash only: see --json)")
    if not (c.state or c.files or c.effects or c.irreversible):
        console.print("  (no change)")
    next_step = (
        f"agenttx tx approve {p.transaction_id} {p.receipt_id} --principal <you>"
        if p.approval_required
        else f"agenttx tx commit {p.transaction_id} --receipt-id {p.receipt_id} "
        f"--expected-revision {p.revision}"
    )
    console.print(f"next: {next_step}")


def tx_approve(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    receipt_id: str,
    principal: str,
    roles: tuple[str, ...],
) -> None:
    """``tx approve``: the approval and the commit to run next."""
    with connect() as client:
        a = client.approve_commit(transaction_id, receipt_id, principal=principal, roles=roles)
    if as_json:
        from agenttx.api.receipts_wire import approval_reply

        echo_json(to_dict(approval_reply(a)))
        return
    click.echo(
        f"approved {a.receipt_id} of {a.transaction_id} as {a.approved_by} "
        f"(change {a.change_hash[:16]}…, revision {a.revision})"
    )
    click.echo(
        f"next: agenttx tx commit {a.transaction_id} --receipt-id {a.receipt_id} "
        f"--expected-revision {a.revision}"
    )


def tx_refuse(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    receipt_id: str,
    principal: str,
    reason: str,
    roles: tuple[str, ...],
) -> None:
    """``tx refuse``: the refusal, the transaction left open."""
    with connect() as client:
        r = client.refuse_commit(
            transaction_id, receipt_id, reason, principal=principal, roles=roles
        )
    if as_json:
        from agenttx.api.receipts_wire import refusal_reply

        echo_json(to_dict(refusal_reply(r)))
        return
    click.echo(
        f"refused {r.receipt_id} of {r.transaction_id} as {r.refused_by}: {r.reason} "
        f"(the transaction stays open at revision {r.revision})"
    )


def _value(value: Any) -> str:
    """A state value as the wire's text carries it (compact JSON), cut to 80 characters."""
    if value is None:
        return "(absent)"
    text = compact(value)
    return text if len(text) <= 80 else text[:79] + "…"
