"""Retention's tombstones, on both stores: deleting an ended transaction's row (its chain's
anchor) leaves the chain's final seq and hash in ``audit_tombstones``, in the same unit, and
verification holds the chain to it — records cut off the end, a chain rewritten and re-hashed
whole, or removed whole, are BAD; the chain's own expiry takes the tombstone with it."""

from __future__ import annotations

from typing import Any

import agenttx
from agenttx.audit import ChainHead, make_record
from audit_helpers import committed, run_sql
from conftest import FakeClock

DAY = 86_400.0


async def pruned(open_engine: Any, clock: FakeClock) -> tuple[agenttx.Engine, str]:
    """An engine whose retention has deleted one committed transaction's row (31 days)."""
    engine: agenttx.Engine = await open_engine(
        clock=clock, background=False, retention_days=30, audit_retention_days=365
    )
    tx = await committed(engine, 3)
    clock.advance(31 * DAY)
    assert (await engine.prune_retained()).transactions == 1
    assert await engine.store.get_transaction(tx) is None
    return engine, tx


async def test_records_cut_off_a_pruned_transactions_chain_are_found(
    open_engine: Any, clock: FakeClock, store_url: str
) -> None:
    engine, tx = await pruned(open_engine, clock)
    whole = await engine.verify_audit(tx)
    assert whole.ok, whole
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq > ?", (tx, whole.records - 2))
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.first_bad) == (False, whole.records - 2, whole.records - 1)
    assert v.reason == (
        f"the chain ends at record {whole.records - 2}, but retention's tombstone recorded "
        f"its record {whole.records}: its newest records were removed"
    )


async def test_a_chain_rewritten_and_rehashed_whole_is_found(
    open_engine: Any, clock: FakeClock, store_url: str
) -> None:
    engine, tx = await pruned(open_engine, clock)
    records = await engine.audit_records(tx)
    # Rewrite record 2's data and re-hash it and every record after it: a chain that is
    # consistent in itself, with the same length and revisions.
    head = records[0].head
    for rec in records[1:]:
        content = rec.content()
        data = dict(content["data"], forged=True) if rec.seq == 2 else content["data"]
        new = make_record(
            head,
            tx_id=tx,
            tenant=content["tenant"],
            kind=rec.kind,
            at=rec.at,
            revision=content["revision"],
            data=data,
        )
        run_sql(
            store_url,
            "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = ?",
            (new.body, new.hash, tx, rec.seq),
        )
        head = ChainHead(new.seq, new.hash)
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, len(records))
    assert "the chain was rewritten" in v.reason
    assert "retention's tombstone" in v.reason


async def test_a_chain_removed_whole_after_its_row_is_found(
    open_engine: Any, clock: FakeClock, store_url: str
) -> None:
    engine, tx = await pruned(open_engine, clock)
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (tx,))
    found = {v.transaction_id: v async for v in engine.verify_all_audit()}
    assert not found[tx].ok
    assert "it was removed whole" in found[tx].reason


async def test_the_chains_expiry_takes_its_tombstone(
    open_engine: Any, clock: FakeClock, store_url: str
) -> None:
    engine, tx = await pruned(open_engine, clock)
    clock.advance(335 * DAY)  # the chain's newest record is 366 days old
    assert (await engine.prune_retained()).audit_chains == 1
    assert [v async for v in engine.verify_all_audit()] == []
    anchor = await engine.store.audit_anchor(tx)
    assert anchor.end is None
