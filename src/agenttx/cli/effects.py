"""``agenttx effects``: the outbox of a running server — effects with their last error —
and a dead letter retried."""

from __future__ import annotations

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from agenttx.cli.common import (
    connected,
    echo_json,
    json_option,
    server_option,
    timeout_option,
    to_dict,
    when,
)
from agenttx.cli.numbers import WholeNumberParam
from agenttx.cli.output import command_console
from agenttx.cli.rows import TableGroup
from agenttx.numbers import EFFECT_ID
from agenttx.plural import plural
from agenttx.types import EffectInfo

STATUSES = ("pending", "delivering", "delivered", "dead")
_STYLE = {"delivered": "green", "dead": "red", "pending": "yellow", "delivering": "cyan"}


@click.group(cls=TableGroup)
def effects() -> None:
    """List the outbox's effects and retry dead letters on a running server."""


@effects.command("list")
@click.option("--dead", is_flag=True, help="Only dead letters (same as --status dead).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES, case_sensitive=False),
    help="Only these statuses (repeatable).",
)
@click.option("--tx", "transaction_id", default="", help="Only this transaction's effects.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@server_option
@json_option
@timeout_option
def effects_list(
    dead: bool,
    statuses: tuple[str, ...],
    transaction_id: str,
    limit: int,
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Effects, oldest first, each with its status, attempts and last error."""
    from agenttx.api.effects_wire import record

    wanted = sorted({s.lower() for s in statuses} | ({"dead"} if dead else set()))
    found: list[EffectInfo] = []
    with connected(server, timeout) as client:
        after = 0
        while len(found) < limit:
            page = client.list_effects(
                statuses=wanted,
                transaction_id=transaction_id,
                after_id=after,
                page_size=min(limit - len(found), 1000),
            )
            found.extend(page.effects)
            after = page.next_after_id
            if not after:
                break
    found = found[:limit]
    if as_json:
        echo_json([to_dict(record(e)) for e in found])
        return
    console = command_console()
    # Ids are what a user copies into `effects retry` and `tx show`: never wrapped or cut.
    # The errors go under the table, whole, where a narrow terminal cannot squeeze them.
    wide = console.width >= 120
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("transaction", no_wrap=True, min_width=35)
    table.add_column("step", justify="right")
    table.add_column("channel", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tries", justify="right")
    if wide:
        table.add_column("queued", no_wrap=True)
    for e in found:
        row = [
            str(e.effect_id),
            e.transaction_id,
            str(e.step_id),
            escape(e.channel),
            _status(e.status),
            str(e.attempts),
        ]
        if wide:
            row.append(when(e.created_at, short=True))
        table.add_row(*row)
    console.print(table)
    failed = [e for e in found if e.last_error and e.status != "delivered"]
    if failed:
        console.print("last errors:")
        for e in failed:
            console.print(f"  {e.effect_id}: {escape(e.last_error)}", soft_wrap=True)
    console.print(plural(len(found), "effect"))


@effects.command("retry")
@click.argument("effect_id", type=WholeNumberParam(EFFECT_ID))
@server_option
@json_option
@timeout_option
def effects_retry(effect_id: int, server: str, as_json: bool, timeout: float) -> None:
    """Requeue dead effect EFFECT_ID and try it once now; prints how that went."""
    from agenttx.api.effects_wire import record

    with connected(server, timeout) as client:
        e = client.retry_effect(effect_id)
    if as_json:
        echo_json(to_dict(record(e)))
        return
    console = command_console()
    outcome = {
        "delivered": "the receiver took it",
        "pending": "failed again; queued for another attempt",
        "delivering": "being delivered",
        "dead": "refused again; still a dead letter",
    }.get(e.status, e.status)
    console.print(f"effect {e.effect_id} ({escape(e.channel)}): {_status(e.status)} — {outcome}")
    if e.status != "delivered" and e.last_error:
        console.print(f"last error: {escape(e.last_error)}")
    if e.status == "dead":
        raise SystemExit(1)


def _status(status: str) -> str:
    style = _STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status
