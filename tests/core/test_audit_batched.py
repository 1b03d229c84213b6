"""Batched step records (``docs/audit.md``, "Batched step records"): a successful state-only
step's record is pending until the transaction's next write that carries records, which
chains it first — byte for byte the record the step's own write would have made, rebuilt
from the journal by whichever process makes that write. Nothing is lost or doubled across a
restart, a SIGKILL, two engines on one store, a failed sealing write or a schema-3 store; a
bare store's verification counts the pending records and stays ok.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.audit import AuditRecord, make_record
from agenttx.core.audit import AuditReader, step_event
from agenttx.core.images import AUDIT_BATCH
from agenttx.store.contract import Store
from audit_helpers import run_sql
from paths import TESTS

WORKER = TESTS.joinpath("audit_batched_worker.py")


async def put_steps(engine: agenttx.Engine, tx: str, first: int, last: int) -> None:
    for n in range(first, last + 1):
        r = await engine.execute_step(tx, n, "kv.put", {"key": f"k{n}", "value": n})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint


async def stored_chain(store: Store, tx: str) -> list[AuditRecord]:
    return await store.load_audit(tx)


async def assert_rebuilt(store: Store, tx: str, steps: int) -> list[AuditRecord]:
    """The chain of a transaction of ``steps`` kv.put steps holds, in order, exactly one record
    per step, the one the journal says the step's own write makes: built here from the stored
    step rows with the dict encoder (not the engine's fast path), step n at revision n + 1,
    after whatever record precedes it."""
    stored = await stored_chain(store, tx)
    rows = [st for st in await store.load_steps(tx, live_only=False) if st.status == "SUCCESS"]
    assert [st.step_id for st in rows] == list(range(1, steps + 1))
    tenant = json.loads(stored[0].body)["tenant"]
    at_step = [i for i, r in enumerate(stored) if r.kind.startswith("step.")]
    assert len(at_step) == steps
    for i, st in zip(at_step, rows, strict=True):
        kind, data = step_event(st)
        expected = make_record(
            stored[i - 1].head, tx_id=tx, tenant=tenant, kind=kind, at=st.started_at,
            revision=st.step_id + 1, data=data,
        )  # fmt: skip
        assert stored[i] == expected
    assert [r.seq for r in stored] == list(range(1, len(stored) + 1))  # no gap, no double
    return stored


async def test_the_chain_after_steps_and_commit_is_the_journal_rebuilt(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 40)  # one full batch (32) sealed by a step, 8 by the commit
    assert (await engine.commit(tx)).committed
    chain = await assert_rebuilt(engine.store, tx, 40)
    assert [r.kind for r in chain] == ["begin", *["step.succeeded"] * 40, "commit"]
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.pending) == (True, 42, 0)


async def test_a_bare_store_counts_pending_records_and_the_engine_seals_before_showing(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 5)
    assert len(await stored_chain(engine.store, tx)) == 1  # the begin; 5 steps pending
    bare = await AuditReader(engine.store).verify(tx)
    assert (bare.ok, bare.records, bare.pending) == (True, 1, 5)
    v = await engine.verify_audit(tx)  # one small write chains them first
    assert (v.ok, v.records, v.pending) == (True, 6, 0)
    await assert_rebuilt(engine.store, tx, 5)
    assert len(await engine.audit_records(tx)) == 6
    # Removing the newest record is still found, pending or not.
    await put_steps(engine, tx, 6, 7)
    store_url = engine.store.url
    run_sql(store_url, "DELETE FROM audit WHERE tx_id = ? AND seq = 6", (tx,))
    bad = await AuditReader(engine.store).verify(tx)
    assert not bad.ok
    assert bad.first_bad == 6


async def test_an_engine_closed_with_pending_records_is_continued_by_the_next(
    open_engine: Any,
) -> None:
    first = await open_engine()
    tx = (await first.begin()).transaction_id
    await put_steps(first, tx, 1, 7)
    await first.close()  # no write with records since the steps: 7 pending
    second = await open_engine()
    bare = await AuditReader(second.store).verify(tx)
    assert (bare.ok, bare.records, bare.pending) == (True, 1, 7)
    await put_steps(second, tx, 8, 9)
    assert (await second.commit(tx)).committed
    await assert_rebuilt(second.store, tx, 9)
    v = await second.verify_audit(tx)
    assert (v.ok, v.records) == (True, 11)


@pytest.mark.stores("sqlite")
async def test_a_process_killed_with_pending_records_loses_none(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), store_url, str(tmp_path), "12",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line.startswith(b"tx_"):
        raise AssertionError((await proc.stderr.read()).decode())
    tx = line.decode().strip()
    proc.kill()  # SIGKILL: the 12 records never left the process's memory
    await proc.wait()
    engine = await open_engine()
    bare = await AuditReader(engine.store).verify(tx)
    assert (bare.ok, bare.records, bare.pending) == (True, 1, 12)
    await put_steps(engine, tx, 13, 13)
    assert (await engine.commit(tx)).committed
    await assert_rebuilt(engine.store, tx, 13)
    assert (await engine.verify_audit(tx)).ok


async def test_two_engines_on_one_store_alternate_on_one_transaction(open_engine: Any) -> None:
    """Steps alternate between two engines on one store (two processes' worth: each keeps its
    own image); one engine's preview chains the other's pending records, and neither chains
    a record twice."""
    a, b = await open_engine(), await open_engine()
    tx = (await a.begin()).transaction_id
    for n in range(1, 71):  # two full batches on the way
        await put_steps(a if n % 2 else b, tx, n, n)
    await put_steps(b, tx, 71, 75)  # pending on b ...
    await a.preview_commit(tx)  # ... chained by a's preview, which moves no revision
    await put_steps(b, tx, 76, 77)  # b sees that: its pending list starts again
    assert (await a.commit(tx)).committed
    chain = await assert_rebuilt(a.store, tx, 77)
    kinds = [r.kind for r in chain]
    steps = ["step.succeeded"]
    assert kinds == ["begin", *steps * 75, "preview", *steps * 2, "commit"]
    assert (await b.verify_audit(tx)).ok


async def test_the_bound_seals_in_batches_each_write_small(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    counts = []
    for n in range(1, 101):
        await put_steps(engine, tx, n, n)
        counts.append(len(await stored_chain(engine.store, tx)))
    before = [1, *counts[:-1]]
    sealing = [(n + 1, c - b) for n, (b, c) in enumerate(zip(before, counts, strict=True)) if c > b]
    # The step that would make AUDIT_BATCH pending chains them all, its own included.
    assert sealing == [(32, AUDIT_BATCH), (64, AUDIT_BATCH), (96, AUDIT_BATCH)]
    bare = await AuditReader(engine.store).verify(tx)
    assert (bare.ok, bare.records, bare.pending) == (True, 97, 4)
    assert (await engine.commit(tx)).committed
    await assert_rebuilt(engine.store, tx, 100)
    assert (await engine.verify_audit(tx)).records == 102


async def test_a_failed_sealing_write_leaves_pending_records_for_the_next(
    engine: agenttx.Engine, store_url: str
) -> None:
    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 3)
    refuse = (
        "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit "
        "BEGIN SELECT RAISE(ABORT, 'audit insert refused'); END"
    )
    drop = "DROP TRIGGER refuse_audit"
    if not store_url.startswith("sqlite"):
        run_sql(
            store_url,
            "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'audit insert refused'; END $$",
        )
        refuse = (
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit FOR EACH ROW "
            "EXECUTE FUNCTION refuse_audit()"
        )
        drop = "DROP TRIGGER refuse_audit ON audit"
    run_sql(store_url, refuse)
    with pytest.raises(agenttx.AgentTxError, match="audit insert refused"):
        await engine.commit(tx)  # the sealing write: rolled back whole
    run_sql(store_url, drop)
    info = await engine.get_transaction(tx, history=False)
    assert info.status is agenttx.TxStatus.ACTIVE
    assert len(await stored_chain(engine.store, tx)) == 1
    assert (await AuditReader(engine.store).verify(tx)).pending == 3
    await put_steps(engine, tx, 4, 4)
    assert (await engine.commit(tx)).committed
    chain = await assert_rebuilt(engine.store, tx, 4)
    assert [r.kind for r in chain][-1] == "commit"
    assert (await engine.verify_audit(tx)).ok


async def test_a_schema_3_store_is_migrated_with_its_steps_chained(
    open_engine: Any, store_url: str
) -> None:
    first = await open_engine()
    tx = (await first.begin()).transaction_id
    await put_steps(first, tx, 1, 3)
    await first.verify_audit(tx)  # chained, as every step of a schema-3 store was
    await first.close()
    # Back to schema 3: no watermark column (what a store written before batching has).
    run_sql(store_url, "ALTER TABLE transactions DROP COLUMN audit_seq")
    if store_url.startswith("sqlite"):
        run_sql(store_url, "PRAGMA user_version=3")
    else:
        run_sql(store_url, "UPDATE agenttx_schema SET version = 3")
    second = await open_engine()
    assert (await AuditReader(second.store).verify(tx)).pending == 0  # none doubled
    await put_steps(second, tx, 4, 5)
    assert (await second.commit(tx)).committed
    await assert_rebuilt(second.store, tx, 5)
    assert (await second.verify_audit(tx)).ok


async def test_without_the_chain_nothing_is_pending(open_engine: Any) -> None:
    engine = await open_engine(audit_chain=False)
    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 40)
    assert await stored_chain(engine.store, tx) == []
    row = await engine.store.get_transaction(tx)
    assert row is not None
    assert row.audit_seq == 0
    assert (await engine.commit(tx)).committed
    assert await stored_chain(engine.store, tx) == []


async def test_the_command_line_on_a_store_reports_pending_records_and_exits_ok(
    engine: agenttx.Engine, store_url: str
) -> None:
    from click.testing import CliRunner

    from agenttx.cli import main

    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 5)

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, ["audit", "verify", "--store", store_url, *args, tx])

    text = await asyncio.to_thread(run)
    assert text.exit_code == 0, text.output
    assert "1 record  head" in text.output
    assert "5 step records pending" in text.output
    as_json = await asyncio.to_thread(run, "--json")
    assert as_json.exit_code == 0, as_json.output
    got = json.loads(as_json.output)
    assert (got["ok"], got["records"], got["pending"]) == (True, 1, 5)


@agenttx.tool(name="batched.remote", effect="compensatable", idempotent=True)
async def remote(ctx: agenttx.ToolContext, name: str) -> dict[str, str]:
    await ctx.register_undo({"name": name})
    return {"name": name}


@remote.undo
async def unremote(ctx: Any, name: str) -> None:
    return None


async def test_eager_writes_chain_the_pending_records_first(open_engine: Any) -> None:
    """An outside step's RUNNING write, an undo and a rollback each chain the pending step
    records before their own, so the chain keeps the events' order."""
    engine = await open_engine(tools=[remote])
    tx = (await engine.begin()).transaction_id
    await put_steps(engine, tx, 1, 3)
    await engine.execute_step(tx, 4, "batched.remote", {"name": "x"})
    await put_steps(engine, tx, 5, 6)
    undone = await engine.undo_step(tx)  # undoes step 6 (pending until now)
    assert undone.next_step_id == 6
    await put_steps(engine, tx, 6, 7)
    await engine.rollback(tx, reason="done here")
    chain = await stored_chain(engine.store, tx)
    kinds = [r.kind for r in chain]
    ok = "step.succeeded"
    assert kinds[:6] == ["begin", ok, ok, ok, "step.started", ok]
    assert kinds[6:9] == [ok, ok, "rollback"]  # steps 5, 6, then undo's rollback
    assert kinds[9] == "step.undone"
    assert kinds[10:12] == [ok, ok]  # steps 6 and 7 again, chained by the rollback's writes
    assert kinds[-1] == "rollback"
    assert kinds.count("compensation") == 1  # step 4's undo ran
    revisions = [json.loads(r.body)["revision"] for r in chain]
    assert revisions == sorted(revisions)
    v = await engine.verify_audit(tx)
    assert (v.ok, v.records, v.pending) == (True, len(chain), 0)
