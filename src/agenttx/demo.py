"""``agenttx demo``: a scripted agent taken through one transaction, printed step by step.

The plan has a planted mistake (a customer id that does not exist). The step that uses it
fails, AgentTx traces the bad value to the step that produced it, rewinds there (undoing the
draft file written in between), the agent corrects itself from the hint, and the commit
releases the staged email exactly once.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agenttx.embedded import Engine


def _plan(step: int, learned: bool) -> tuple[str, dict[str, Any]]:
    customer = "c-1" if learned else "c-404"
    plan: dict[int, tuple[str, dict[str, Any]]] = {
        1: ("record.insert", {"table": "customers", "id": "c-1", "fields": {"name": "Acme"}}),
        2: ("kv.put", {"key": "session/customer", "value": customer}),
        3: ("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": '{"status":"draft"}'}),
        4: ("kv.put", {"key": "invoice/amount", "value": 1200}),
        5: (
            "record.insert",
            {
                "table": "invoices",
                "id": "inv-1",
                "fields": {"customer_id": "${steps.2.value}", "amount": "${steps.4.value}"},
                "references": {"customer_id": "customers"},
            },
        ),
        6: (
            "effect.stage",
            {
                "channel": "email",
                "payload": {"to": "billing@acme.example", "invoice": "inv-1"},
                "idempotency_key": "invoice-inv-1",
            },
        ),
    }
    return plan[step]


async def run_demo(directory: Path | None = None, console: Console | None = None) -> bool:
    console = console or Console()
    workdir = directory or Path(tempfile.mkdtemp(prefix="agenttx-demo-"))
    engine = await Engine.open(f"sqlite:///{workdir / 'agenttx.db'}")
    try:
        tx = (await engine.begin(agent_id="demo-agent")).transaction_id
        console.print(f"[bold]begin[/] {tx}  (store: {workdir / 'agenttx.db'})")
        table = Table("step", "tool", "status", "what AgentTx said")
        learned, step = False, 1
        while step <= 6:
            tool_name, args = _plan(step, learned)
            r = await engine.execute_step(
                tx, step, tool_name, args, raw_context=f"plan step {step}"
            )
            if r.status.value == "SUCCESS":
                table.add_row(str(step), tool_name, "[green]SUCCESS[/]", json.dumps(r.output)[:60])
            else:
                learned = learned or "customer_id" in r.clean_hint
                said = f"{r.clean_hint}\n→ {r.strategy.value}: resume at step {r.next_step_id}"
                table.add_row(str(step), tool_name, f"[red]{r.status.value}[/]", said)
                if r.next_step_id == 0:
                    console.print(table)
                    return False
            step = r.next_step_id
        console.print(table)
        c = await engine.commit(tx)
        console.print(
            f"[bold]commit[/] committed={c.committed} steps={c.steps_committed} "
            f"effects released={c.effects_dispatched}"
        )
        files = sorted(
            str(p.relative_to(workdir / "files")) for p in (workdir / "files").rglob("*")
        )
        console.print(f"files in the sandbox: {files}")
        outbox = (workdir / "outbox.jsonl").read_text().strip().splitlines()
        console.print(f"outbox ({len(outbox)} line): {outbox[0] if outbox else ''}")
        return c.committed
    finally:
        await engine.close()
