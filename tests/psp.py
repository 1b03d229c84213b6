"""A real payment provider for the reconcile tests: an HTTP server on loopback that records
which charges arrived, can be told to hang before answering (so the tool times out after the
charge arrived) or to drop a charge unrecorded (the call never got there), and answers status
queries; and the tools that call it over real HTTP (``pay.charge`` with a reconcile handler,
``pay.legacy`` without one).

The tools find the server through ``PSP_ADDR`` (host:port), set by ``PaymentProvider.start``
in this process, or in a subprocess's environment.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import agenttx

# --------------------------------------------------------------------------- the provider

# The tools' timeout. It bounds the whole tool: a checkpoint and an undo record written to the
# store, then the HTTP call. 0.3 s was too little on a busy machine (a step took 0.28 s with
# PostgreSQL and the CPU shared): an "ok" charge then timed out, or a "hang" charge timed out
# before its request reached the provider. A hanging provider (``hang_s``) answers well after.
TOOL_TIMEOUT_S = 1.0
HANG_S = 3.0


class PaymentProvider:
    """The outside system. ``mode``: "ok" (charge and answer), "hang" (charge, then answer
    only after ``hang_s``), "drop" (hang without charging: the call never arrived);
    ``status_mode``: "truth" or "pending" (the provider cannot tell yet)."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}  # operation id → amount, of charges that arrived
        self.refunds: list[str] = []
        self.status_queries: list[str] = []
        self.mode = "ok"
        self.status_mode = "truth"
        self.hang_s = HANG_S
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                url = urlparse(self.path)
                op = url.path.rsplit("/", 1)[-1]
                amount = int(parse_qs(url.query).get("amount", ["0"])[0])
                mode = provider.mode
                if mode != "drop":
                    with provider.lock:
                        provider.charges[op] = amount
                if mode in ("hang", "drop"):
                    time.sleep(provider.hang_s)
                self._answer(200, {"charged": op})

            def do_DELETE(self) -> None:
                op = urlparse(self.path).path.rsplit("/", 1)[-1]
                with provider.lock:
                    provider.refunds.append(op)
                    provider.charges.pop(op, None)
                self._answer(200, {"refunded": op})

            def do_GET(self) -> None:
                op = urlparse(self.path).path.rsplit("/", 1)[-1]
                with provider.lock:
                    provider.status_queries.append(op)
                    if provider.status_mode == "pending":
                        state = "pending"
                    else:
                        state = "settled" if op in provider.charges else "absent"
                self._answer(200, {"state": state, "amount": provider.charges.get(op)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A tool that timed out hangs up before the answer: that broken pipe is expected.
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> PaymentProvider:
        self.thread.start()
        os.environ["PSP_ADDR"] = self.addr
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- the tools


async def http(method: str, path: str) -> Any:
    """One HTTP/1.0 request to the provider over a real socket; the JSON answer."""
    host, port = os.environ["PSP_ADDR"].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"{method} {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200") and not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"provider answered {head.splitlines()[0]!r}")
    return json.loads(body)


def operation_for(ctx: agenttx.ToolContext) -> str:
    """The provider's operation id for this attempt: derived from its idempotency key."""
    return "op-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:16]


@agenttx.tool(name="pay.charge", effect="compensatable", idempotent=False, timeout=TOOL_TIMEOUT_S)
async def charge(ctx: agenttx.ToolContext, amount: int) -> dict[str, Any]:
    """Charge a card at the provider."""
    op = operation_for(ctx)
    await ctx.checkpoint_operation(provider="psp", operation_id=op, cursor={"page": 0})
    await ctx.register_undo({"operation_id": op})
    if os.environ.get("PSP_MARK"):  # a crash test's sign that the risky call is under way
        await asyncio.to_thread(Path(os.environ["PSP_MARK"]).write_text, op)
    await http("POST", f"/charge/{op}?amount={amount}")
    return {"charge": op, "amount": amount}


@charge.undo
async def refund(ctx: agenttx.ToolContext, operation_id: str) -> None:
    await http("DELETE", f"/charge/{operation_id}")


@charge.reconcile
async def charge_status(
    ctx: agenttx.ReconcileContext, operation_id: str, amount: int
) -> agenttx.Reconciled:
    if os.environ.get("PSP_RECONCILE_MARK"):  # a crash test's sign: reconcile is running
        await asyncio.to_thread(Path(os.environ["PSP_RECONCILE_MARK"]).write_text, operation_id)
        await asyncio.sleep(float(os.environ.get("PSP_RECONCILE_SLEEP", "0")))
    state = await http("GET", f"/status/{operation_id}")
    if state["state"] == "settled":
        return agenttx.Reconciled("happened", output={"charge": operation_id, "amount": amount})
    if state["state"] == "absent":
        return agenttx.Reconciled("not_happened")
    return agenttx.Reconciled("unknown", cursor={"page": ctx.attempt}, retry_after_ms=1000)


@agenttx.tool(name="pay.legacy", effect="irreversible", idempotent=False, timeout=TOOL_TIMEOUT_S)
async def legacy(ctx: agenttx.ToolContext, amount: int) -> dict[str, Any]:
    """A provider call without a reconcile handler: an operator settles its unknown outcome."""
    op = operation_for(ctx)
    await http("POST", f"/charge/{op}?amount={amount}")
    return {"charge": op}


@agenttx.tool(name="pay.twice", effect="compensatable", idempotent=False)
async def twice(ctx: agenttx.ToolContext, first: str, second: str) -> dict[str, Any]:
    """Checkpoints ``first`` then ``second``: a different second id must be refused."""
    await ctx.checkpoint_operation("psp", first)
    await ctx.checkpoint_operation("psp", first, cursor="c1")  # same id, new cursor: fine
    await ctx.checkpoint_operation("psp", second)
    return {"ok": True}


@agenttx.tool(name="pay.unsure", effect="compensatable", idempotent=False)
async def unsure(ctx: agenttx.ToolContext, amount: int) -> dict[str, Any]:
    """Charges, then loses the answer: reports an uncertain outcome with its operation and no
    wait before reconciling (so a real-time test need not sleep)."""
    op = operation_for(ctx)
    await ctx.register_undo({"operation_id": op}, handler="pay.charge#undo")
    await http("POST", f"/charge/{op}?amount={amount}")
    raise agenttx.UncertainOutcome(
        "the provider's answer was lost", operation_id=op, provider="psp", retry_after_ms=0
    )


@unsure.reconcile
async def unsure_status(
    ctx: agenttx.ReconcileContext, operation_id: str, amount: int
) -> agenttx.Reconciled:
    return await charge_status(ctx, operation_id, amount)


@agenttx.tool(name="pay.unhandled", effect="irreversible", idempotent=False)
async def unhandled(ctx: agenttx.ToolContext, amount: int) -> dict[str, Any]:
    """``pay.legacy``'s lost answer without the wait: no reconcile handler, and an operator
    may settle it at once (so a real-time test need not sleep)."""
    op = operation_for(ctx)
    await http("POST", f"/charge/{op}?amount={amount}")
    raise agenttx.UncertainOutcome(
        "the provider's answer was lost", operation_id=op, provider="psp", retry_after_ms=0
    )


TOOLS = [charge, legacy, twice, unsure, unhandled]
