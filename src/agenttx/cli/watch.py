"""``agenttx tx watch <id>``: follow a transaction live (``WatchTransaction``), printing each
change of its status and every step attempt as it lands, until the transaction ends."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from agenttx.cli.common import call, json_option, server_option, status_markup, to_dict, when
from agenttx.cli.numbers import WholeNumberParam
from agenttx.numbers import AFTER_REVISION


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
    from agenttx.wire import agenttx_pb2 as pb

    console = Console(highlight=False)

    def follow(stub: Any) -> None:
        shown = 0  # step attempts printed so far
        events = stub.WatchTransaction(
            pb.WatchTransactionRequest(transaction_id=transaction_id, after_revision=after_revision)
        )
        for e in events:
            t = stub.GetTransaction(
                pb.GetTransactionRequest(transaction_id=transaction_id), timeout=10
            )
            decisions = {(d.step_id, d.attempt): d for d in t.decisions}
            new = list(t.steps)[shown:]
            shown = len(t.steps)
            if as_json:
                click.echo(json.dumps({"event": to_dict(e), "steps": [to_dict(s) for s in new]}))
                continue
            console.print(
                f"[dim]{when(e.at)}[/] rev {e.revision:<4} {status_markup(e.status):<20} "
                f"{e.kind:<7} next step {e.next_step_id or '-'}"
            )
            for s in new:
                line = f"    step {s.step_id}.{s.attempt} {escape(s.tool_name)} " + status_markup(
                    s.status
                )
                d = decisions.get((s.step_id, s.attempt))
                if s.clean_hint:
                    line += f" {escape(s.clean_hint)}"
                if d is not None:
                    line += f" → {d.strategy}"
                    if d.rollback_to_step:
                        line += f" to step {d.rollback_to_step}"
                    if d.root_cause_step:
                        line += f" (root cause: step {d.root_cause_step})"
                console.print(line)

    try:
        call(server, follow)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
