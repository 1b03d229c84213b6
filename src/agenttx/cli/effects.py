"""``agenttx effects``: the group, and what ``effects list`` and ``effects retry`` do and print
(their arguments and options are their rows' bindings, ``api/operations/cli_bindings.py``):
the outbox of a running server — effects with their last error — and a dead letter retried."""

from __future__ import annotations

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from agenttx.cli.common import echo_json, to_dict, when
from agenttx.cli.output import command_console
from agenttx.cli.rows import Connect, TableGroup
from agenttx.plural import plural
from agenttx.types import EffectInfo

_STYLE = {"delivered": "green", "dead": "red", "pending": "yellow", "delivering": "cyan"}


@click.group(cls=TableGroup)
def effects() -> None:
    """List the outbox's effects and retry dead letters on a running server."""


def effects_list(
    connect: Connect,
    as_json: bool,
    dead: bool,
    statuses: tuple[str, ...],
    transaction_id: str,
    limit: int,
) -> None:
    """``effects list``: the outbox read a page at a time up to ``--limit``, as a table with
    the errors under it."""
    from agenttx.api.effects_wire import record

    wanted = sorted({s.lower() for s in statuses} | ({"dead"} if dead else set()))
    found: list[EffectInfo] = []
    with connect() as client:
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


def effects_retry(connect: Connect, as_json: bool, effect_id: int) -> None:
    """``effects retry``: how the one attempt went; exits 1 if it is still a dead letter."""
    from agenttx.api.effects_wire import record

    with connect() as client:
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
