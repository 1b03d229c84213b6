"""Reconcile over MCP (issue 13 point 4): an OUTCOME_UNKNOWN step's continuation is CallTool
``reconcile_step``, and ``reconcile_step`` answers with what to do next — in process with the
SDK client on both stores (a fake clock for the earliest time), and over stdio against a real
``agenttx mcp`` subprocess. The provider is the real HTTP server of ``psp.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP
from mcp_harness import stdio_client, structured, text
from psp import TOOLS, PaymentProvider


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    provider.mode = "hang"
    yield provider
    provider.stop()


async def call(c: Client, mcp_tool: str, **arguments: Any) -> dict[str, Any]:
    return structured(await c.call_tool(mcp_tool, arguments))


async def test_reconcile_step_follows_the_continuations(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine = await open_engine(tools=TOOLS, clock=clock)
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        listed = {t.name for t in (await c.list_tools()).tools}
        assert "reconcile_step" in listed
        tools = {t["name"]: t for t in (await call(c, "list_tools"))["tools"]}
        assert tools["pay.charge"]["reconcilable"] is True
        tx = (await call(c, "begin_transaction"))["transaction_id"]
        step = await call(c, "run_step", transaction_id=tx, step_id=1, tool="pay.charge",
                          arguments={"amount": 42})  # fmt: skip
        assert step["ok"] is False
        assert step["error"]["code"] == "OUTCOME_UNKNOWN"
        cont = step["continuation"]
        assert cont["kind"] == "CallTool"
        assert cont["tool"] == "reconcile_step"
        assert cont["arguments"] == {"transaction_id": tx, "step_id": 1}
        assert cont["retry_after_ms"] == 5000
        assert "do not run it again" in cont["instruction"]
        # Running the step again is refused with the same continuation.
        again = await call(c, "run_step", transaction_id=tx, step_id=1, tool="pay.charge",
                           arguments={"amount": 42})  # fmt: skip
        assert again["error"]["code"] == "OUTCOME_UNKNOWN_PENDING"
        assert again["continuation"]["tool"] == "reconcile_step"
        # Too early: RetryRequest with the time left.
        early = await call(c, "reconcile_step", transaction_id=tx, step_id=1)
        assert early["error"]["code"] == "RECONCILE_NOT_DUE"
        assert early["continuation"]["kind"] == "RetryRequest"
        assert early["continuation"]["retry_after_ms"] == 5000
        # The provider cannot tell yet: still unknown, RetryRequest after the handler's time.
        psp.status_mode = "pending"
        clock.advance(5.0)
        pending = await call(c, "reconcile_step", transaction_id=tx, step_id=1)
        assert pending["error"]["code"] == "OUTCOME_STILL_UNKNOWN"
        assert pending["continuation"]["kind"] == "RetryRequest"
        assert pending["continuation"]["retry_after_ms"] == 1000
        got = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert "reconcile_step with step_id 1" in text(got)
        assert structured(got)["reconcile_state"] == "outcome_unknown"
        psp.status_mode = "truth"
        clock.advance(1.0)
        done = await c.call_tool("reconcile_step", {"transaction_id": tx, "step_id": 1})
        fields = structured(done)
        assert fields["ok"] is True
        assert fields["outcome"] == "happened"
        assert fields["output"] == {"charge": fields["operation_id"], "amount": 42}
        assert "run_step with step_id 2" in text(done)
        assert (await call(c, "commit_transaction", transaction_id=tx))["committed"] is True


async def test_a_tool_without_a_handler_is_resolved_externally(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine = await open_engine(tools=TOOLS, clock=clock)
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        tx = (await call(c, "begin_transaction"))["transaction_id"]
        await call(c, "run_step", transaction_id=tx, step_id=1, tool="pay.legacy",
                   arguments={"amount": 1})  # fmt: skip
        clock.advance(5.0)
        refused = await call(c, "reconcile_step", transaction_id=tx, step_id=1)
        assert refused["error"]["code"] == "NO_RECONCILE_HANDLER"
        assert refused["continuation"]["kind"] == "ResolveExternally"
        assert f"agenttx tx resolve {tx} 1" in refused["continuation"]["instruction"]


@pytest.mark.stores("sqlite")
async def test_reconcile_over_stdio_against_agenttx_mcp(
    tmp_path: Path, psp: PaymentProvider, store_backend: str
) -> None:
    psp.mode = "ok"
    async with stdio_client(tmp_path / "data", "auto", "--tools", "psp") as c:
        tx = (await call(c, "begin_transaction"))["transaction_id"]
        step = await call(c, "run_step", transaction_id=tx, step_id=1, tool="pay.unsure",
                          arguments={"amount": 9})  # fmt: skip
        assert step["continuation"]["tool"] == "reconcile_step"
        assert step["continuation"]["retry_after_ms"] == 0
        done = await call(c, "reconcile_step", **step["continuation"]["arguments"])
        assert done["outcome"] == "happened"
        assert done["operation_id"] in psp.charges
        assert (await call(c, "commit_transaction", transaction_id=tx))["committed"] is True
