"""``agenttx demo``: a scripted agent taken through one transaction over gRPC, step by step.

The plan has a planted mistake (a customer id that does not exist). The step that uses it
fails, AgentTx traces the bad value to the step that produced it, rewinds there (undoing the
draft file written in between), the agent corrects itself from the hint, and the commit
releases the staged email exactly once.

The agent is a client (``AsyncAgentTxClient``) and speaks only the wire protocol: to a server
given with ``--server``, or to one started in-process on a free loopback port over a fresh
data directory.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.plural import plural
from agenttx.types import StepStatus

LAST_STEP = 6


def _plan(step: int, learned: bool, run: str = "") -> tuple[str, dict[str, Any]]:
    """Step ``step`` of the plan; ``run`` keeps ids of repeated runs on one store apart."""
    good = f"c-1{run}"
    customer = good if learned else "c-404"
    plan: dict[int, tuple[str, dict[str, Any]]] = {
        1: ("record.insert", {"table": "customers", "id": good, "fields": {"name": "Acme"}}),
        2: ("kv.put", {"key": "session/customer", "value": customer}),
        3: ("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": '{"status":"draft"}'}),
        4: ("kv.put", {"key": "invoice/amount", "value": 1200}),
        5: (
            "record.insert",
            {
                "table": "invoices",
                "id": f"inv-1{run}",
                "fields": {"customer_id": "${steps.2.value}", "amount": "${steps.4.value}"},
                "references": {"customer_id": "customers"},
            },
        ),
        6: (
            "effect.stage",
            {
                "channel": "email",
                "payload": {"to": "billing@acme.example", "invoice": f"inv-1{run}"},
                "idempotency_key": f"invoice-inv-1{run}",
            },
        ),
    }
    return plan[step]


async def run_plan(
    address: str,
    console: Console,
    *,
    shared: bool = False,
    api_key: str | None = None,
    tls_roots: bytes | None = None,
) -> bool:
    """Run the scripted agent against the AgentTx server at ``address`` through our client
    (over TLS checked against ``tls_roots`` when given, each call carrying ``api_key`` when
    given; one attempt, so a refusal or an unreachable server ends it at once); True iff the
    transaction committed. ``shared``: the store may hold earlier runs, so ids get a suffix of
    this transaction's id."""
    retry = RetryPolicy(max_attempts=1)
    async with AsyncAgentTxClient(
        address, api_key=api_key, root_certificates=tls_roots, retry=retry
    ) as client:
        begun = await client.begin("demo-agent", labels=["demo"])
        tx = begun.transaction_id
        run = f"-{tx[-6:]}" if shared else ""
        console.print(f"[bold]begin[/] {tx}  (server: {address})")
        table = Table("step", "tool", "status", "what AgentTx said")
        learned, step = False, 1
        while 0 < step <= LAST_STEP:
            tool_name, args = _plan(step, learned, run)
            r = await client.execute_step(tx, step, tool_name, args, f"plan step {step}")
            if r.status is StepStatus.SUCCESS:
                table.add_row(str(step), tool_name, "[green]SUCCESS[/]", r.output_json[:60])
            else:
                learned = learned or "customer_id" in r.clean_hint
                said = f"{r.clean_hint}\n→ {r.strategy.value}: resume at step {r.next_step_id}"
                table.add_row(str(step), tool_name, f"[red]{r.status.value}[/]", said)
                if r.next_step_id == 0:
                    console.print(table)
                    return False
            step = r.next_step_id
        console.print(table)
        c = await client.commit(tx)
        console.print(
            f"[bold]commit[/] committed={c.committed} steps={c.steps_committed} "
            f"effects released={c.effects_dispatched}"
        )
        return c.committed


async def run_demo(
    directory: Path | None = None,
    console: Console | None = None,
    server: str | None = None,
    api_key: str | None = None,
    *,
    keep: bool = False,
    tls_roots: bytes | None = None,
) -> bool:
    """The demo against ``server`` (over TLS checked against ``tls_roots``, the PEM of its CA
    or certificate, when given), or against an in-process server over ``directory``, whose
    sandbox and outbox it shows afterwards; each call carries ``api_key`` when given. Without
    ``directory`` the data goes to a new temporary directory, removed at the end unless
    ``keep``; the last line says which happened."""
    console = console or Console()
    if server is not None:
        return await run_plan(server, console, shared=True, api_key=api_key, tls_roots=tls_roots)

    from agenttx.server import ServeConfig, start

    workdir = directory or Path(tempfile.mkdtemp(prefix="agenttx-demo-"))
    try:
        config = ServeConfig(listen_addr="127.0.0.1:0", data_dir=workdir, metrics_addr=None)
        running = await start(config)
        try:
            console.print(
                f"[dim]in-process server on {running.address}, store {config.store_url}[/]"
            )
            ok = await run_plan(running.address, console, api_key=api_key)
        finally:
            await running.stop(grace=1.0)
        files = sorted(str(p.relative_to(config.files_dir)) for p in config.files_dir.rglob("*"))
        console.print(f"files in the sandbox: {files}")
        outbox = (
            config.outbox_file.read_text().strip().splitlines()
            if config.outbox_file.exists()
            else []
        )
        console.print(f"outbox ({plural(len(outbox), 'line')}): {outbox[0] if outbox else ''}")
    finally:
        if directory is None and not keep:
            shutil.rmtree(workdir, ignore_errors=True)  # a half-written one too
            console.print(f"removed the demo's data directory {workdir} (--keep keeps it)")
        else:
            console.print(f"the demo's data is in {workdir} (the store, files/, outbox.jsonl)")
    return ok
