"""Outcome unknown, reconciled (issue 13 point 4), on both stores, against a real payment
provider over HTTP (``psp.py``): a charge that times out after it arrived (or never arrived)
leaves its step OUTCOME_UNKNOWN with the checkpointed provider operation; new steps and commit
are refused until ``reconcile_step`` asks the provider and settles it — happened (the step
succeeds with the reconciled output and keeps its undo), not happened (send it again), or
still unknown (a new earliest time). Never a blind retry."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus
from psp import TOOLS, PaymentProvider


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    yield provider
    provider.stop()


async def unknown_charge(open_engine: Any, psp: PaymentProvider, clock: Any, mode: str) -> Any:
    psp.mode = mode
    engine = await open_engine(tools=TOOLS, clock=clock)
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    return engine, tx, r


async def test_a_timed_out_charge_is_unknown_with_its_operation_and_earliest_time(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, r = await unknown_charge(open_engine, psp, clock, "hang")
    assert r.next_step_id == 1
    assert r.retry_after_ms == 5000  # the default earliest reconcile time
    assert r.operation_provider == "psp"
    assert r.operation_id.startswith("op-")
    assert r.operation_id in psp.charges  # it did arrive: a timeout is no proof of nothing
    assert "reconcile_step after 5000 ms" in r.clean_hint
    info = await engine.get_transaction(tx)
    assert info.outcome_unknown_step == 1
    assert info.reconcile_state == "outcome_unknown"
    assert info.reconcile_after == pytest.approx(clock() + 5.0)
    assert (info.operation_provider, info.operation_id) == ("psp", r.operation_id)
    assert info.steps[-1].operation_id == r.operation_id


async def test_new_steps_and_commit_are_refused_until_it_is_settled(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "hang")
    for call in (
        engine.execute_step(tx, 1, "pay.charge", {"amount": 42}),
        engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1}),
        engine.commit(tx),
    ):
        with pytest.raises(agenttx.OutcomeUnknownPending) as refused:
            await call
        assert f"transaction {tx}: step 1 has an unknown outcome; reconcile it" in str(
            refused.value
        )
        assert "an operator resolves it" in str(refused.value)
    assert len(psp.charges) == 1  # nothing was sent again


async def test_reconcile_before_the_earliest_time_is_refused_with_the_time_left(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "hang")
    clock.advance(2.0)
    with pytest.raises(agenttx.ReconcileNotDue) as early:
        await engine.reconcile_step(tx, 1)
    assert early.value.retry_after_ms == 3000
    assert psp.status_queries == []  # the provider was not asked


async def test_reconcile_happened_keeps_the_step_with_the_reconciled_output_and_its_undo(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, r = await unknown_charge(open_engine, psp, clock, "hang")
    clock.advance(5.0)
    got = await engine.reconcile_step(tx, 1)
    assert got.outcome == "happened"
    assert got.output == {"charge": r.operation_id, "amount": 42}
    assert got.next_step_id == 2
    assert psp.status_queries == [r.operation_id]
    # The reconciled output is the step's: a later step references it.
    step2 = await engine.execute_step(
        tx, 2, "kv.put", {"key": "receipt", "value": "${steps.1.charge}"}
    )
    assert step2.status is StepStatus.SUCCESS
    info = await engine.get_transaction(tx)
    assert info.outcome_unknown_step == 0
    assert info.reconcile_state == ""
    # It kept its undo: rolling back refunds the charge at the provider.
    await engine.rollback(tx)
    assert psp.refunds == [r.operation_id]
    kinds = [rec.kind for rec in await engine.audit_records(tx)]
    assert kinds.count("reconcile") == 2  # started, then answered
    assert "step.checkpoint" in kinds
    assert (await engine.verify_audit(tx)).ok


async def test_reconcile_not_happened_lets_the_step_be_sent_again(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "drop")
    assert psp.charges == {}  # the call never got there
    clock.advance(5.0)
    got = await engine.reconcile_step(tx, 1)
    assert got.outcome == "not_happened"
    assert got.next_step_id == 1
    psp.mode = "ok"
    again = await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    assert again.status is StepStatus.SUCCESS
    assert list(psp.charges) == [again.output["charge"]]
    committed = await engine.commit(tx)
    assert committed.committed
    assert psp.refunds == []  # the first attempt's undo was dropped unrun: nothing to refund


async def test_reconcile_unknown_stays_with_a_new_time_and_cursor(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "hang")
    psp.status_mode = "pending"
    clock.advance(5.0)
    got = await engine.reconcile_step(tx, 1)
    assert got.outcome == "unknown"
    assert got.retry_after_ms == 1000  # the handler's
    assert "reconcile_step again in 1000 ms" in got.clean_hint
    with pytest.raises(agenttx.ReconcileNotDue):
        await engine.reconcile_step(tx, 1)
    with pytest.raises(agenttx.OutcomeUnknownPending):
        await engine.commit(tx)
    info = await engine.get_transaction(tx)
    assert info.reconcile_state == "outcome_unknown"
    assert info.reconcile_after == pytest.approx(clock() + 1.0)
    psp.status_mode = "truth"
    clock.advance(1.0)
    assert (await engine.reconcile_step(tx, 1)).outcome == "happened"
    assert (await engine.commit(tx)).committed


async def test_a_handler_that_fails_leaves_the_outcome_unknown(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "hang")
    psp.stop()  # the provider is down: the handler cannot ask it
    clock.advance(5.0)
    got = await engine.reconcile_step(tx, 1)
    assert got.outcome == "unknown"
    assert got.retry_after_ms == 5000
    assert "handler failed" in got.clean_hint
    assert (await engine.get_transaction(tx)).outcome_unknown_step == 1


async def test_a_second_concurrent_reconcile_is_refused(
    open_engine: Any, psp: PaymentProvider, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, tx, r = await unknown_charge(open_engine, psp, clock, "hang")
    clock.advance(5.0)
    entered, gate = asyncio.Event(), asyncio.Event()
    handler = engine.registry.get("pay.charge").reconcile_fn

    async def slow(ctx: Any, **kwargs: Any) -> Any:
        entered.set()
        await gate.wait()
        return await handler(ctx, **kwargs)

    monkeypatch.setattr(engine.registry.get("pay.charge"), "reconcile_fn", slow)
    first = asyncio.create_task(engine.reconcile_step(tx, 1))
    await asyncio.wait_for(entered.wait(), 10)
    with pytest.raises(agenttx.ReconcileInProgress):
        await engine.reconcile_step(tx, 1)
    with pytest.raises(agenttx.ReconcileInProgress):
        await engine.resolve_step(tx, 1, "not_happened")
    gate.set()
    assert (await first).outcome == "happened"
    assert psp.status_queries == [r.operation_id]  # asked once


async def test_a_tool_without_a_handler_needs_an_operator(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    psp.mode = "hang"
    engine = await open_engine(tools=TOOLS, clock=clock)
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.legacy", {"amount": 7})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    assert r.operation_id == ""  # it checkpointed none
    clock.advance(5.0)
    with pytest.raises(agenttx.NoReconcileHandler) as refused:
        await engine.reconcile_step(tx, 1)
    assert f"agenttx tx resolve {tx} 1 happened|not-happened" in str(refused.value)
    with pytest.raises(agenttx.InvalidArgument):
        await engine.resolve_step(tx, 1, "maybe")
    got = await engine.resolve_step(tx, 1, "happened", output={"charge": "seen"}, reason="ops")
    assert got.outcome == "happened"
    assert got.next_step_id == 2
    records = await engine.audit_records(tx)
    assert records[-1].kind == "step.resolved"
    assert '"via":"operator"' in records[-1].body
    assert '"reason":"ops"' in records[-1].body
    assert (await engine.commit(tx)).committed


async def test_the_operation_id_is_immutable_once_checkpointed(
    open_engine: Any, psp: PaymentProvider
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.twice", {"first": "op-a", "second": "op-b"})
    assert r.status is not StepStatus.SUCCESS
    assert "immutable" in r.clean_hint or "op-a" in r.clean_hint
    info = await engine.get_transaction(tx)
    assert info.steps[-1].operation_id == "op-a"  # the first id stayed
    # The same id again (with a new cursor) is fine.
    ok = await engine.execute_step(tx, 1, "pay.twice", {"first": "op-c", "second": "op-c"})
    assert ok.status is StepStatus.SUCCESS


async def test_checkpoint_limits_are_enforced_in_bytes(open_engine: Any) -> None:
    @agenttx.tool(name="pay.big", effect="irreversible")
    async def big(ctx: agenttx.ToolContext, what: str) -> None:
        if what == "id":
            await ctx.checkpoint_operation("psp", "é" * 600)  # 1200 bytes
        elif what == "cursor":
            await ctx.checkpoint_operation("psp", "op", cursor="x" * 5000)
        else:
            await ctx.checkpoint_operation("", "op")

    @agenttx.tool(name="kv.checkpointing", effect="state")
    async def state_tool(ctx: agenttx.ToolContext) -> None:
        await ctx.checkpoint_operation("psp", "op")

    engine = await open_engine(tools=[big, state_tool])
    tx = (await engine.begin()).transaction_id
    for what, words in (("id", "1024-byte"), ("cursor", "4096-byte"), ("provider", "non-empty")):
        r = await engine.execute_step(tx, 1, "pay.big", {"what": what})
        assert r.status is not StepStatus.SUCCESS
        assert words in r.clean_hint, r.clean_hint
    r = await engine.execute_step(tx, 1, "kv.checkpointing", {})
    assert "no outside effect" in r.clean_hint


async def test_an_uncertain_outcome_keeps_its_reported_operation_and_time(open_engine: Any) -> None:
    @agenttx.tool(name="gw.call", effect="irreversible")
    async def call(ctx: agenttx.ToolContext) -> None:
        raise agenttx.UncertainOutcome(
            "downstream timed out", operation_id="dn-7", provider="gw", retry_after_ms=250
        )

    engine = await open_engine(tools=[call])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "gw.call", {})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    assert (r.operation_provider, r.operation_id, r.retry_after_ms) == ("gw", "dn-7", 250)


async def test_rolling_back_settles_the_unknown_step_by_its_undo(
    open_engine: Any, psp: PaymentProvider, clock: Any
) -> None:
    engine, tx, r = await unknown_charge(open_engine, psp, clock, "hang")
    await engine.rollback(tx)
    assert psp.refunds == [r.operation_id]
    with pytest.raises(agenttx.NotActive):
        await engine.reconcile_step(tx, 1)


async def test_a_cancelled_reconcile_frees_its_lease(
    open_engine: Any, psp: PaymentProvider, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, tx, _r = await unknown_charge(open_engine, psp, clock, "hang")
    clock.advance(5.0)
    entered = asyncio.Event()

    async def hangs(ctx: Any, **kwargs: Any) -> Any:
        entered.set()
        await asyncio.sleep(60)

    monkeypatch.setattr(engine.registry.get("pay.charge"), "reconcile_fn", hangs)
    task = asyncio.create_task(engine.reconcile_step(tx, 1))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    assert (await engine.reconcile_step(tx, 1)).outcome == "happened"
