"""A rollback's reply carries the snapshot to echo, as every reply showing a transaction's
state does (issue 13 point 1): over the wire it is the state the transaction is in now."""

from __future__ import annotations

from typing import Any

from agenttx.api.operations.replies import rollback_reply


async def test_a_partial_rollback_reply_carries_the_current_snapshot(engine: Any) -> None:
    tx = (await engine.begin(agent_id="snap")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await engine.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2})
    back = await engine.rollback(tx, to_step=2)
    reply = rollback_reply(back)
    now = await engine.get_transaction(tx)
    assert (reply.snapshot.transaction_id, reply.snapshot.revision) == (tx, now.revision)
    # Echoing it commits exactly this state.
    assert (await engine.commit(tx, expected_revision=reply.snapshot.revision)).committed
