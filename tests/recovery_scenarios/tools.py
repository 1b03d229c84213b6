"""The scenario's service-backed tools and the raw errors they fail with.

``make_bench_tools()`` builds a fresh set per run (baseline or AgentTx), so ``bench.flaky``
fails exactly once per run. The error texts are the reference's, byte for byte: Python
tracebacks from a tool service, as an agent would receive them.
"""

from __future__ import annotations

from typing import Any

import agenttx
from agenttx.tools.builtin.record import record_insert

TIMEOUT_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/agent-tools/payments/charge.py", line 51, in charge_card\n'
    "    response = await stub.Charge(request, timeout=5.0)\n"
    '  File "/usr/local/lib/python3.12/site-packages/grpc/aio/_call.py", line 327, in __await__\n'
    "    raise _create_rpc_error(\n"
    "grpc.aio._call.AioRpcError: <AioRpcError of RPC that terminated with:\n"
    "\tstatus = StatusCode.DEADLINE_EXCEEDED\n"
    '\tdetails = "Deadline Exceeded"\n'
    '\tdebug_error_string = "UNKNOWN:Error received from peer ipv4:10.0.4.17:443 '
    '{grpc_message:"Deadline Exceeded", grpc_status:4}"\n'
    ">"
)

LEDGER_MISMATCH_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/agent-tools/ledger/reconcile.py", line 133, in reconcile_invoice\n'
    "    assert_totals_match(invoice, ledger_entries)\n"
    '  File "/srv/agent-tools/ledger/checks.py", line 27, in assert_totals_match\n'
    "    raise LedgerMismatchError(\n"
    "ledger.errors.LedgerMismatchError: invoice total 1200.00 does not match ledger total 1180.00"
)

_PSYCOPG_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/agent-tools/billing/invoices.py", line 88, in insert_invoice\n'
    "    await cur.execute(INSERT_INVOICE, params)\n"
    '  File "/usr/local/lib/python3.12/site-packages/psycopg/cursor_async.py", line 97, '
    "in execute\n"
    "    raise ex.with_traceback(None)\n"
    "psycopg.errors.IntegrityError: {first}\n"
    "{detail}\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/agent-tools/server.py", line 212, in dispatch\n'
    "    result = await registry.call(request.tool, request.arguments)\n"
    '  File "/srv/agent-tools/registry.py", line 64, in call\n'
    "    return await tool(**arguments)\n"
    '  File "/srv/agent-tools/billing/invoices.py", line 94, in insert_invoice\n'
    '    raise ToolExecutionError("insert_invoice failed") from exc\n'
    "agent_tools.errors.ToolExecutionError: insert_invoice failed"
)


def psycopg_trace(message: str) -> str:
    """``record.insert``'s PostgreSQL-worded error as a Python tool service surfaces it: each
    line loses a leading ``ERROR: `` and is trimmed; the first line is the exception message,
    the rest (``DETAIL: …``) follows it."""
    lines = [line.removeprefix("ERROR: ").strip() for line in message.split("\n")]
    first, detail = (lines[0], "\n".join(lines[1:])) if lines else ("", "")
    return _PSYCOPG_TRACE.format(first=first, detail=detail)


class ToolFailure(Exception):
    """A failure whose text is exactly what the remote tool service returned."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


_INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "table": {"type": "string"},
        "id": {"type": ["string", "number"]},
        "fields": {"type": "object"},
        "references": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["table", "id"],
}


def make_bench_tools() -> list[agenttx.Tool]:
    """A fresh ``bench.insert_invoice``, ``bench.flaky`` (one failure left) and
    ``bench.broken``."""
    failures_left = [1]

    @agenttx.tool(
        name="bench.insert_invoice",
        effect="state",
        schema=_INVOICE_SCHEMA,
        description="record.insert behind a Python tool service (errors arrive as psycopg).",
    )
    async def insert_invoice(ctx: agenttx.ToolContext, arguments: Any) -> Any:
        try:
            return await record_insert.fn(ctx, arguments)
        except Exception as exc:
            raise ToolFailure(psycopg_trace(str(exc))) from None

    @agenttx.tool(name="bench.flaky", effect="read", description="Times out once, then succeeds.")
    async def flaky(ctx: agenttx.ToolContext, operation: str) -> dict[str, Any]:
        if failures_left[0] > 0:
            failures_left[0] -= 1
            raise ToolFailure(TIMEOUT_TRACE)
        return {"charged": True, "amount": 1200}

    @agenttx.tool(name="bench.broken", effect="read", description="Always fails.")
    async def broken(ctx: agenttx.ToolContext, operation: str) -> dict[str, Any]:
        raise ToolFailure(LEDGER_MISMATCH_TRACE)

    return [insert_invoice, flaky, broken]
