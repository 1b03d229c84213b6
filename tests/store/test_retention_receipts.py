"""Retention prunes a transaction's preview receipts with it (they would otherwise outlive
every row they describe, and the database would grow with each preview). Both stores, a fake
clock."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.errors import NotFound
from conftest import FakeClock
from test_retention import DAY, open_clocked


async def test_an_ended_transactions_receipts_go_with_it(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_clocked(open_engine, clock)
    tx = (await engine.begin(principal="alice", mode="approval_required")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "r", "value": 1})
    preview = await engine.preview_commit(tx)
    assert await engine.store.get_receipt(preview.receipt_id) is not None
    await engine.rollback(tx)
    clock.advance(31 * DAY)
    assert (await engine.prune_retained()).transactions >= 1
    with pytest.raises(NotFound):
        await engine.get_transaction(tx)
    assert await engine.store.get_receipt(preview.receipt_id) is None
