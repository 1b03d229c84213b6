"""The audit chain on every store: each event of a transaction is one record chained to the
one before, written with the event itself; an edited, removed or reordered record is found
and named; the chain survives a restart and outlives the journal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.audit import AuditKind, canonical, digest
from audit_helpers import committed, run_sql


@agenttx.tool(name="audit.remote", effect="compensatable", idempotent=True)
async def remote(ctx: agenttx.ToolContext, name: str) -> dict[str, str]:
    await ctx.register_undo({"name": name})
    return {"name": name}


@remote.undo
async def unremote(ctx: Any, name: str) -> None:
    return None


async def kinds(engine: agenttx.Engine, tx: str) -> list[str]:
    return [r.kind for r in await engine.audit_records(tx)]


async def test_every_event_of_a_committed_transaction_is_chained(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(agent_id="a")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await engine.execute_step(tx, 2, "effect.stage", {"channel": "c", "payload": {"n": 1}})
    await engine.commit(tx)
    assert await kinds(engine, tx) == [
        "begin",
        "step.succeeded",
        "step.succeeded",
        "commit",
        "delivery",
    ]
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.first_bad, v.reason) == (True, 5, 0, "")
    records = await engine.audit_records(tx)
    assert v.head_hash == records[-1].hash
    # Each record's hash covers its body, and each body names the previous record's hash.
    prev = ""
    for rec in records:
        assert digest(rec.body) == rec.hash
        assert rec.content()["prev"] == prev
        prev = rec.hash
    step = records[1].content()
    assert step["data"]["tool"] == "kv.put"
    assert step["data"]["writes"] == 1
    assert step["revision"] == 2
    delivery = records[-1].content()["data"]
    assert delivery["outcome"] == "delivered"
    assert delivery["attempt"] == 1


async def test_a_failure_its_rollback_and_strategy_and_compensations_are_chained(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=[remote])
    # No same-step retries (the reference's decisions), so the failure rewinds past step 2.
    tx = (await engine.begin(policy={"max_step_retries": 0})).transaction_id
    await engine.execute_step(tx, 1, "audit.remote", {"name": "x"})
    failed = await engine.execute_step(tx, 2, "kv.get", {"key": "missing"})
    assert failed.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
    # The failure rewinds to step 1 (a local backtrack), which undoes the outside step.
    assert failed.next_step_id == 1
    await engine.rollback(tx, reason="give up")
    records = await engine.audit_records(tx)
    assert [r.kind for r in records] == [
        "begin",
        "step.started",
        "step.succeeded",
        "step.failed",
        "rollback.started",
        "compensation",
        "rollback",
        "rollback",
    ]
    failure = records[3].content()["data"]
    assert failure["hint"].startswith("Hint: ")
    assert failure["step"] == 2
    started = records[4].content()["data"]
    assert started["strategy"] == failed.strategy.value
    assert started["trigger"] == "step_failure"
    assert started["compensations"] == 1
    assert records[5].content()["data"]["outcome"] == "done"
    assert records[6].content()["data"]["final"] == "ACTIVE"
    last = records[7].content()["data"]
    assert (last["strategy"], last["final"], last["reason"]) == ("ABORT", "ROLLED_BACK", "give up")
    assert (await engine.verify_audit(tx)).ok


async def test_the_chain_survives_a_restart_and_continues(open_engine: Any) -> None:
    first = await open_engine()
    tx = (await first.begin()).transaction_id
    await first.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await first.close()
    second = await open_engine()
    await second.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2})
    await second.commit(tx)
    v = await second.verify_audit(tx)
    assert v.ok
    assert v.records == 4
    assert await kinds(second, tx) == ["begin", "step.succeeded", "step.succeeded", "commit"]


async def test_an_edited_record_is_found(engine: agenttx.Engine, store_url: str) -> None:
    tx = await committed(engine)
    body = (await engine.audit_records(tx))[2].content()
    body["data"]["tool"] = "kv.delete"
    run_sql(
        store_url, "UPDATE audit SET body = ? WHERE tx_id = ? AND seq = 3", (canonical(body), tx)
    )
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, 3)
    assert "edited" in v.reason


async def test_an_edited_record_with_a_recomputed_hash_breaks_the_next(
    engine: agenttx.Engine, store_url: str
) -> None:
    tx = await committed(engine)
    body = (await engine.audit_records(tx))[2].content()
    body["data"]["tool"] = "kv.delete"
    text = canonical(body)
    run_sql(
        store_url,
        "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = 3",
        (text, digest(text), tx),
    )
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, 4)
    assert "does not follow" in v.reason


async def test_a_removed_record_is_found(engine: agenttx.Engine, store_url: str) -> None:
    tx = await committed(engine)
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq = 2", (tx,))
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, 2)
    assert "missing" in v.reason


async def test_removed_newest_records_are_found(engine: agenttx.Engine, store_url: str) -> None:
    tx = await committed(engine)
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq >= 4", (tx,))
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.first_bad) == (False, 3, 4)
    assert "newest records were removed" in v.reason


async def test_a_removed_delivery_record_is_found(engine: agenttx.Engine, store_url: str) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "effect.stage", {"channel": "c", "payload": {}})
    await engine.commit(tx)
    assert (await kinds(engine, tx))[-1] == AuditKind.DELIVERY
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND kind = 'delivery'", (tx,))
    v = await engine.verify_audit(tx)
    assert not v.ok
    assert "delivery records were removed" in v.reason


async def test_reordered_records_are_found(engine: agenttx.Engine, store_url: str) -> None:
    tx = await committed(engine)
    # Swap records 2 and 3 (their positions), by way of a free position.
    run_sql(store_url, "UPDATE audit SET seq = 100 WHERE tx_id = ? AND seq = 2", (tx,))
    run_sql(store_url, "UPDATE audit SET seq = 2 WHERE tx_id = ? AND seq = 3", (tx,))
    run_sql(store_url, "UPDATE audit SET seq = 3 WHERE tx_id = ? AND seq = 100", (tx,))
    v = await engine.verify_audit(tx)
    assert (v.ok, v.first_bad) == (False, 2)
    # Swapping whole contents (bodies and hashes) instead is found as well.
    tx2 = await committed(engine)
    rows = await engine.audit_records(tx2)
    a, b = rows[1], rows[2]
    run_sql(store_url, "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = 2",
            (b.body, b.hash, tx2))  # fmt: skip
    run_sql(store_url, "UPDATE audit SET body = ?, hash = ? WHERE tx_id = ? AND seq = 3",
            (a.body, a.hash, tx2))  # fmt: skip
    v2 = await engine.verify_audit(tx2)
    assert (v2.ok, v2.first_bad) == (False, 2)


async def test_a_chain_removed_whole_is_found_by_verify_all(
    engine: agenttx.Engine, store_url: str
) -> None:
    good = await committed(engine, 1)
    gone = await committed(engine, 1)
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (gone,))
    results = {v.transaction_id: v async for v in engine.verify_all_audit()}
    assert results[good].ok
    assert not results[gone].ok
    assert results[gone].first_bad == 1


async def test_the_chain_outlives_the_journal(engine: agenttx.Engine, store_url: str) -> None:
    tx = await committed(engine)
    # Even with the journal gone (steps and the transaction row), the chain verifies alone.
    run_sql(store_url, "DELETE FROM steps WHERE tx_id = ?", (tx,))
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (tx,))
    v = await engine.verify_audit(tx)
    assert v.ok
    assert v.records == 5


async def test_audit_records_page(engine: agenttx.Engine) -> None:
    tx = await committed(engine, 4)
    first = await engine.audit_records(tx, limit=2)
    rest = await engine.audit_records(tx, after_seq=first[-1].seq)
    assert [r.seq for r in first + rest] == list(range(1, 7))
    line = json.loads(first[0].line())
    assert line["kind"] == "begin"
    assert line["hash"] == first[0].hash


async def test_no_chain_when_turned_off(open_engine: Any) -> None:
    engine = await open_engine(audit_chain=False)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    assert await engine.audit_records(tx) == []
    v = await engine.verify_audit(tx)
    assert not v.ok
    assert "no audit records" in v.reason


async def test_an_unknown_transaction_is_not_found_not_a_bad_chain(
    engine: agenttx.Engine, store_url: str
) -> None:
    with pytest.raises(agenttx.NotFound, match=r"tx_0+` not found"):
        await engine.verify_audit("tx_" + "0" * 32)
    # A transaction the store knows whose records were all removed is a damaged chain.
    tx = await committed(engine)
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ?", (tx,))
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.first_bad) == (False, 0, 1)
    assert "no audit records" in v.reason


def test_export_lines_recompute(tmp_path: Path) -> None:
    """An exported line holds everything its hash covers: recomputable with no store."""
    from agenttx.audit import EMPTY, make_record

    rec = make_record(EMPTY, tx_id="t", tenant="d", kind="begin", at=1.5, revision=1, data={})
    line = json.loads(rec.line())
    given = line.pop("hash")
    assert digest(canonical(line)) == given == rec.hash


async def test_a_store_older_than_the_chain_gets_one_per_transaction(
    open_engine: Any, store_url: str
) -> None:
    first = await open_engine()
    open_tx = (await first.begin()).transaction_id
    await first.execute_step(open_tx, 1, "kv.put", {"key": "a", "value": 1})
    done_tx = await committed(first, 1)
    await first.close()
    # Make the store what schema 2 was: no audit table.
    run_sql(store_url, "DROP TABLE audit")
    if store_url.startswith("sqlite"):
        run_sql(store_url, "PRAGMA user_version=2")
    else:
        run_sql(store_url, "UPDATE agenttx_schema SET version = 2")
    second = await open_engine()
    for tx in (open_tx, done_tx):
        records = await second.audit_records(tx)
        assert [r.kind for r in records] == ["audit.started"]
        assert (await second.verify_audit(tx)).ok
    # The open transaction goes on, its chain with it.
    await second.execute_step(open_tx, 2, "kv.put", {"key": "b", "value": 2})
    await second.commit(open_tx)
    assert await kinds(second, open_tx) == ["audit.started", "step.succeeded", "commit"]
    assert (await second.verify_audit(open_tx)).ok


def test_a_record_body_is_canonical_json_of_its_fields() -> None:
    from agenttx.audit import EMPTY, make_record

    odd = {"z": [1.5, "ü", None], "a": {"y": True, "b": '"quoted"\n'}, "m": 10**20}
    rec = make_record(EMPTY, tx_id='tx_"é', tenant="t\\n", kind="k", at=2.0, revision=7, data=odd)
    assert canonical(json.loads(rec.body)) == rec.body
    assert rec.content()["data"] == odd


async def test_concurrent_deliveries_of_one_transaction_chain_in_turn(
    engine: agenttx.Engine,
) -> None:
    """Deliveries run outside the transaction's lock (several dispatchers, replicas): the
    store places each after the chain's head, one after the other."""
    from agenttx.audit import AuditEvent

    tx = await committed(engine, 1)
    store = engine.store
    events = [
        store.settle_outbox(
            0,
            status="delivered",
            attempts=1,
            next_attempt_at=0.0,
            error="",
            now=float(i),
            audit=AuditEvent(tx, AuditKind.DELIVERY, float(i), {"outbox_id": 0, "attempt": i}),
        )
        for i in range(12)
    ]
    await asyncio.gather(*events)
    records = await engine.audit_records(tx)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert sum(r.kind == "delivery" for r in records) == 12
    assert (await engine.verify_audit(tx)).ok


async def test_a_taken_position_is_a_revision_conflict(engine: agenttx.Engine) -> None:
    from agenttx.audit import ChainHead, make_record

    tx = await committed(engine, 1)
    head = (await engine.audit_records(tx))[1]
    again = make_record(
        ChainHead(1, head.content()["prev"]),
        tx_id=tx,
        tenant="default",
        kind="forged",
        at=0.0,
        revision=2,
        data={},
    )
    with pytest.raises(agenttx.RevisionConflict):
        await engine.store.append_audit([again])
    assert (await engine.verify_audit(tx)).ok
