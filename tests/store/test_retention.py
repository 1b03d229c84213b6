"""Retention with a fake clock, on both stores: ended transactions (steps, context), delivered
effects and stored replies go after ``retention_days``; audit chains go whole after theirs,
only once their transaction is gone; open transactions and undelivered effects stay."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import NotFound, PermanentDeliveryError
from conftest import FakeClock

DAY = 86_400.0


class Refusing:
    """A channel whose receiver refuses every effect for good: they become dead letters."""

    async def deliver(self, effect: agenttx.Effect) -> None:
        raise PermanentDeliveryError("the receiver said 400")


async def open_clocked(open_engine: Any, clock: FakeClock, **kw: Any) -> agenttx.Engine:
    engine: agenttx.Engine = await open_engine(
        clock=clock,
        background=False,
        retention_days=30,
        audit_retention_days=365,
        channels={"refused": Refusing()},
        **kw,
    )
    return engine


async def committed(engine: agenttx.Engine, channel: str = "mail") -> str:
    tx = (
        await engine.begin(request_id=f"begin-{channel}-{id(engine)}-{engine.clock()}")
    ).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1}, raw_context="why: ctx")
    await engine.execute_step(tx, 2, "effect.stage", {"channel": channel, "payload": {"n": 1}})
    await engine.commit(tx)
    return tx


async def audit_count(engine: agenttx.Engine, tx: str) -> int:
    return len(await engine.store.load_audit(tx))


async def test_ended_transactions_go_after_the_retention(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    old = await committed(engine)
    rolled = (await engine.begin()).transaction_id
    await engine.rollback(rolled)
    still_open = (await engine.begin()).transaction_id
    assert (await engine.store.outbox_counts()).get("delivered") == 1

    clock.advance(20 * DAY)
    recent = await committed(engine)
    clock.advance(11 * DAY)  # old and rolled: 31 days; recent: 11 days

    pruned = await engine.prune_retained()
    assert (pruned.transactions, pruned.delivered_effects) == (2, 1)
    assert pruned.stored_replies >= 1
    for gone in (old, rolled):
        with pytest.raises(NotFound):
            await engine.get_transaction(gone)
        assert await engine.store.load_steps(gone, live_only=False) == []
        # The chain outlives its transaction, whole and still verifiable.
        assert (await engine.verify_audit(gone)).ok
    for kept in (recent, still_open):
        assert (await engine.get_transaction(kept)).transaction_id == kept
    assert (await engine.get_transaction(recent)).context[0].raw_context == "why: ctx"
    assert (await engine.store.outbox_counts()).get("delivered") == 1  # recent's
    # A pass with nothing due deletes nothing.
    assert (await engine.prune_retained()).total == 0


async def test_audit_chains_go_whole_after_their_own_retention(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    old = await committed(engine)
    still_open = (await engine.begin()).transaction_id
    records = await audit_count(engine, old)
    assert records >= 4

    clock.advance(31 * DAY)
    assert (await engine.prune_retained()).audit_chains == 0  # only the row went
    assert await audit_count(engine, old) == records

    clock.advance(335 * DAY)  # the chain's newest record is now 366 days old
    pruned = await engine.prune_retained()
    assert pruned.audit_chains == 1
    assert await audit_count(engine, old) == 0  # all of it, not a prefix
    # An open transaction's chain is never due, however old.
    assert await audit_count(engine, still_open) >= 1
    assert (await engine.verify_audit(still_open)).ok
    ids = [v.transaction_id async for v in engine.verify_all_audit()]
    assert old not in ids
    assert still_open in ids


async def test_a_dead_letter_keeps_its_transaction(open_engine: Any, clock: FakeClock) -> None:
    # Dead letters kept forever here: their own retention is
    # tests/store/test_dead_letter_retention.py.
    engine = await open_clocked(
        open_engine, clock, dispatch_max_attempts=1, dead_letter_retention_days=0
    )
    dead = await committed(engine, channel="refused")
    assert (await engine.store.outbox_counts()).get("dead") == 1
    clock.advance(400 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.transactions, pruned.audit_chains) == (0, 0)
    assert (await engine.get_transaction(dead)).transaction_id == dead
    assert (await engine.store.outbox_counts()).get("dead") == 1


async def test_zero_keeps_everything(open_engine: Any, clock: FakeClock) -> None:
    engine: agenttx.Engine = await open_engine(
        clock=clock, background=False, retention_days=0, audit_retention_days=0
    )
    tx = await committed(engine)
    clock.advance(3650 * DAY)
    pruned = await engine.prune_retained()
    assert (pruned.transactions, pruned.delivered_effects, pruned.audit_chains) == (0, 0, 0)
    assert (await engine.get_transaction(tx)).transaction_id == tx


async def test_audit_retention_shorter_than_the_transactions_is_refused(
    open_engine: Any,
) -> None:
    with pytest.raises(
        agenttx.InvalidArgument, match=r"at least retention_days \(--retention-days, 30\)"
    ):
        await open_engine(retention_days=30, audit_retention_days=7)
