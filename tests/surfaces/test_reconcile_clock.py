"""Reconciling an unknown outcome where the wait is the behaviour (issue 13 point 4): a step
that says when it may be reconciled, a reconcile before then, one the provider cannot answer
yet, and one after the wait — on the surfaces that can run in this process beside a fake
clock (``conftest.FakeClock``): our async client over an in-process gRPC server, our blocking
client and the CLI against a ``ServerThread``, MCP in memory. The real provider is
``psp.py``'s HTTP server.

What takes no wait (an unknown step's reply and continuation, reconcile at once, a tool
without a handler, an operator's word) is the conformance table's, on every surface
(``cases.SAFETY``, the ``psp`` cases): a served engine in another process cannot share a fake
clock, and waiting 5 s of real time per surface is what the fake clock is for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client

import agenttx
from agenttx import AgentTxClient, AsyncAgentTxClient, RetryPolicy, StepStatus
from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP
from agenttx.cli import main
from mcp_harness import structured
from psp import TOOLS, PaymentProvider
from server_process import ServerThread, serving

FAST_RETRY = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    provider.mode = "hang"  # the charge arrives, its answer does not: the tool times out
    yield provider
    provider.stop()


async def test_the_async_client_reconciles_after_the_wait(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine = await open_engine(tools=TOOLS, clock=clock)
    async with serving(engine) as target, AsyncAgentTxClient(target, retry=FAST_RETRY) as c:
        tools = {t.name: t for t in await c.list_tools()}
        assert tools["pay.charge"].reconcilable
        assert not tools["pay.legacy"].reconcilable
        tx = (await c.begin()).transaction_id
        r = await c.execute_step(tx, 1, "pay.charge", {"amount": 42})
        assert r.status is StepStatus.OUTCOME_UNKNOWN
        assert r.retry_after_ms == 5000
        assert r.operation_provider == "psp"
        assert r.operation_id in psp.charges
        info = await c.get_transaction(tx)
        assert info.reconcile_state == "outcome_unknown"
        assert info.reconcile_after == pytest.approx(clock() + 5.0)
        assert info.operation_id == r.operation_id
        assert info.steps[-1].operation_id == r.operation_id
        with pytest.raises(agenttx.ReconcileNotDue) as early:
            await c.reconcile_step(tx, 1)
        assert early.value.retry_after_ms == 5000
        clock.advance(5.0)
        got = await c.reconcile_step(tx, 1)
        assert got.outcome == "happened"
        assert got.output == {"charge": r.operation_id, "amount": 42}
        assert got.operation_id == r.operation_id
        assert (await c.commit(tx)).committed


def test_the_sync_client_learns_a_charge_never_arrived(
    tmp_path: Path, store_url: str, psp: PaymentProvider, clock: Any
) -> None:
    server = ServerThread(tmp_path, tools=TOOLS, url=store_url, clock=clock).start()
    try:
        with AgentTxClient(server.target, retry=FAST_RETRY, timeout=10) as c:
            tx = c.begin().transaction_id
            psp.mode = "drop"  # the call never reached the provider
            r = c.execute_step(tx, 1, "pay.charge", {"amount": 1})
            assert r.status is StepStatus.OUTCOME_UNKNOWN
            with pytest.raises(agenttx.ReconcileNotDue):
                c.reconcile_step(tx, 1)
            clock.advance(5.0)
            assert c.reconcile_step(tx, 1).outcome == "not_happened"
            assert c.verify_audit(tx).ok
    finally:
        server.stop()


async def call(c: Client, mcp_tool: str, **arguments: Any) -> dict[str, Any]:
    return structured(await c.call_tool(mcp_tool, arguments))


async def test_mcp_says_when_to_reconcile_again(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine = await open_engine(tools=TOOLS, clock=clock)
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        tools = {t["name"]: t for t in (await call(c, "list_tools"))["tools"]}
        assert tools["pay.charge"]["reconcilable"] is True
        tx = (await call(c, "begin_transaction"))["transaction_id"]
        step = await call(c, "run_step", transaction_id=tx, step_id=1, tool="pay.charge",
                          arguments={"amount": 42})  # fmt: skip
        assert step["error"]["code"] == "OUTCOME_UNKNOWN"
        assert step["continuation"]["retry_after_ms"] == 5000
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
        psp.status_mode = "truth"
        clock.advance(1.0)
        done = await call(c, "reconcile_step", transaction_id=tx, step_id=1)
        assert done["outcome"] == "happened"
        assert done["output"] == {"charge": done["operation_id"], "amount": 42}


def test_the_cli_says_when_a_step_may_be_reconciled(
    tmp_path: Path, store_url: str, psp: PaymentProvider, clock: Any
) -> None:
    server = ServerThread(tmp_path, tools=TOOLS, url=store_url, clock=clock).start()
    try:
        with AgentTxClient(server.target, timeout=10) as c:
            tx = c.begin().transaction_id
            r = c.execute_step(tx, 1, "pay.charge", {"amount": 5})
            assert r.status is StepStatus.OUTCOME_UNKNOWN
        runner = CliRunner()
        early = runner.invoke(main, ["tx", "reconcile", tx, "1", "--server", server.target])
        assert early.exit_code == 1
        assert "may be reconciled in 5000 ms" in early.output
        clock.advance(5.0)
        done = runner.invoke(
            main, ["tx", "reconcile", tx, "1", "--server", server.target, "--json"]
        )
        assert done.exit_code == 0, done.output
        reply = json.loads(done.output)
        assert (reply["outcome"], reply["next_step_id"]) == ("happened", 2)
    finally:
        server.stop()
