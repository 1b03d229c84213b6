"""Reconcile over gRPC (issue 13 point 4): ``ReconcileStep`` and ``ResolveStep`` with the
async and the sync client, on both stores, against the real HTTP provider (``psp.py``). The
OUTCOME_UNKNOWN reply, GetTransaction and ListTools carry what reconciling needs, and the
refusals arrive as the same exceptions with the same fields as embedded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import AgentTxClient, AsyncAgentTxClient, RetryPolicy, StepStatus
from psp import TOOLS, PaymentProvider
from server_process import ServerThread, serving

FAST_RETRY = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    provider.mode = "hang"
    yield provider
    provider.stop()


async def test_reconcile_over_grpc_with_the_async_client(
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
        with pytest.raises(agenttx.OutcomeUnknownPending) as pending:
            await c.commit(tx)
        assert pending.value.step_id == 1
        with pytest.raises(agenttx.ReconcileNotDue) as early:
            await c.reconcile_step(tx, 1)
        assert early.value.retry_after_ms == 5000
        clock.advance(5.0)
        got = await c.reconcile_step(tx, 1)
        assert got.outcome == "happened"
        assert got.output == {"charge": r.operation_id, "amount": 42}
        assert got.next_step_id == 2
        assert got.operation_id == r.operation_id
        assert (await c.commit(tx)).committed


def test_resolve_over_grpc_with_the_sync_client(
    tmp_path: Path, store_url: str, psp: PaymentProvider, clock: Any
) -> None:
    server = ServerThread(tmp_path, tools=TOOLS, url=store_url, clock=clock).start()
    try:
        with AgentTxClient(server.target, retry=FAST_RETRY, timeout=10) as c:
            tx = c.begin().transaction_id
            r = c.execute_step(tx, 1, "pay.legacy", {"amount": 7})
            assert r.status is StepStatus.OUTCOME_UNKNOWN
            clock.advance(5.0)
            with pytest.raises(agenttx.NoReconcileHandler) as no_handler:
                c.reconcile_step(tx, 1)
            assert no_handler.value.tool == "pay.legacy"
            with pytest.raises(agenttx.InvalidArgument):
                c.resolve_step(tx, 1, "perhaps")
            got = c.resolve_step(tx, 1, "not-happened", reason="checked the ledger")
            assert got.outcome == "not_happened"
            assert got.next_step_id == 1
            psp.mode = "ok"
            assert c.execute_step(tx, 1, "pay.legacy", {"amount": 7}).status is StepStatus.SUCCESS
            # A charge with a handler, reconciled from the sync client.
            psp.mode = "drop"
            r2 = c.execute_step(tx, 2, "pay.charge", {"amount": 1})
            assert r2.status is StepStatus.OUTCOME_UNKNOWN
            clock.advance(5.0)
            assert c.reconcile_step(tx, 2).outcome == "not_happened"
            assert c.verify_audit(tx).ok
    finally:
        server.stop()
