"""An issued or approved receipt that no commit used reads as ``voided`` once its transaction
moved past it — a later step, ``undo_step``, a rewind — or ended without it (rolled back,
failed, committed with another receipt): computed at read time from the transaction's row,
never stored. A refused receipt stays ``refused``, the receipt a commit used keeps its status,
and a receipt both voided and past its expiry reads ``expired``: the refusal an approval, a
refusal and a commit of it give first (``core/approvals.py`` checks the expiry before the
revision). On every store; the engine's clock is a fake one moved by hand."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import agenttx
from agenttx.core.reads import receipt_status
from agenttx.errors import CommitConflict, ReceiptRefused, SnapshotMismatch
from agenttx.receipts import ReceiptStatus, voided_because
from conftest import FakeClock

TTL = 60.0
APPROVER = ("approver",)


async def approval_tx(engine: agenttx.Engine, key: str = "void/k") -> str:
    tx = (await engine.begin(principal="bob", mode="approval_required")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": key, "value": 1})
    return tx


async def statuses(engine: agenttx.Engine, tx: str) -> dict[str, str]:
    return {r.receipt_id: r.status for r in (await engine.get_transaction(tx)).receipts}


async def stored(engine: agenttx.Engine, receipt_id: str) -> str:
    row = await engine.store.get_receipt(receipt_id)
    assert row is not None
    return row.status


async def test_an_issued_receipt_reads_voided_after_a_step_and_cannot_be_decided(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    assert await statuses(engine, tx) == {p.receipt_id: "issued"}
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k2", "value": 2})
    assert await statuses(engine, tx) == {p.receipt_id: ReceiptStatus.VOIDED}
    assert ReceiptStatus.VOIDED == "voided"
    # Nothing stored changed: only reads say voided.
    assert await stored(engine, p.receipt_id) == "issued"
    # What the read says agrees with what a decision says: the change voided it.
    for decide in (
        engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER),
        engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER),
    ):
        with pytest.raises(SnapshotMismatch, match="a later change voided it"):
            await decide
    # A new preview holds, listed first (newest first); the old one stays voided.
    clock.advance(1)
    again = await engine.preview_commit(tx)
    info = await engine.get_transaction(tx)
    assert [(r.receipt_id, r.status) for r in info.receipts] == [
        (again.receipt_id, "issued"),
        (p.receipt_id, "voided"),
    ]
    assert [r.revision for r in info.receipts] == [again.revision, p.revision]
    assert again.revision == p.revision + 1 == info.revision


async def test_an_approved_receipt_reads_voided_after_a_step_and_keeps_its_approver(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    approval = await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k2", "value": 2})
    [view] = (await engine.get_transaction(tx)).receipts
    assert (view.status, view.decided_by, view.decided_at) == (
        "voided",
        "al",
        approval.approved_at,
    )
    assert await stored(engine, p.receipt_id) == "approved"
    # Every decision on it says what the read says: voided — a second approval or a refusal
    # too, not "approved already" (whose advice, commit with it, the commit would refuse).
    for decide in (
        engine.commit(tx, receipt_id=p.receipt_id),
        engine.approve_commit(tx, p.receipt_id, principal="carol", roles=APPROVER),
        engine.refuse_commit(tx, p.receipt_id, "no", principal="carol", roles=APPROVER),
    ):
        with pytest.raises(SnapshotMismatch, match="a later change voided it"):
            await decide
    assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.ACTIVE


async def test_undo_step_and_a_rewind_void_the_receipts_made_before_them(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k2", "value": 2})
    before_undo = await engine.preview_commit(tx)
    await engine.undo_step(tx)
    assert await statuses(engine, tx) == {before_undo.receipt_id: "voided"}
    before_rewind = await engine.preview_commit(tx)
    assert (await statuses(engine, tx))[before_rewind.receipt_id] == "issued"
    await engine.rollback(tx, to_step=1, reason="start over")
    info = await engine.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ACTIVE
    assert {r.receipt_id: r.status for r in info.receipts} == {
        before_undo.receipt_id: "voided",
        before_rewind.receipt_id: "voided",
    }


async def test_an_abort_voids_every_unrefused_receipt_and_a_refused_one_stays_refused(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    refused = await engine.preview_commit(tx)
    await engine.refuse_commit(tx, refused.receipt_id, "halve it", principal="al", roles=APPROVER)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k", "value": 1})
    # A step after a refusal: the refused receipt stays refused, with who and why.
    [view] = (await engine.get_transaction(tx)).receipts
    assert (view.status, view.decided_by, view.reason) == ("refused", "al", "halve it")
    issued = await engine.preview_commit(tx)
    approved = await engine.preview_commit(tx)
    await engine.approve_commit(tx, approved.receipt_id, principal="al", roles=APPROVER)
    assert await statuses(engine, tx) == {
        approved.receipt_id: "approved",
        issued.receipt_id: "issued",
        refused.receipt_id: "refused",
    }
    await engine.rollback(tx, reason="operator")
    assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.ROLLED_BACK
    assert await statuses(engine, tx) == {
        approved.receipt_id: "voided",
        issued.receipt_id: "voided",
        refused.receipt_id: "refused",
    }
    clock.advance(TTL * 10)  # past every expiry: expired, the refused one still refused
    assert await statuses(engine, tx) == {
        approved.receipt_id: "expired",
        issued.receipt_id: "expired",
        refused.receipt_id: "refused",
    }


async def test_a_commit_keeps_the_status_of_the_receipt_it_used_and_voids_the_others(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    older = await engine.preview_commit(tx)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k2", "value": 2})
    beside = await engine.preview_commit(tx)  # same revision as the one used, never used
    used = await engine.preview_commit(tx)
    await engine.approve_commit(tx, used.receipt_id, principal="al", roles=APPROVER)
    assert await statuses(engine, tx) == {
        used.receipt_id: "approved",
        beside.receipt_id: "issued",
        older.receipt_id: "voided",
    }
    await engine.commit(tx, receipt_id=used.receipt_id, expected_revision=used.revision)
    assert await statuses(engine, tx) == {
        used.receipt_id: "approved",
        beside.receipt_id: "voided",  # committed with another receipt
        older.receipt_id: "voided",
    }
    clock.advance(TTL * 2)  # the used one never expires; the others then read expired
    assert await statuses(engine, tx) == {
        used.receipt_id: "approved",
        beside.receipt_id: "expired",
        older.receipt_id: "expired",
    }


async def test_a_commit_that_named_no_receipt_voids_only_previews_of_earlier_revisions(
    open_engine: Any, clock: FakeClock
) -> None:
    # The commit published exactly what the last previews showed (their revision is the one
    # it committed): those keep ``issued``; a preview of an earlier revision is voided.
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "void/plain", "value": 1})
    older = await engine.preview_commit(tx)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/plain2", "value": 2})
    latest = await engine.preview_commit(tx)
    done = await engine.commit(tx)
    assert done.committed
    assert await statuses(engine, tx) == {latest.receipt_id: "issued", older.receipt_id: "voided"}
    # Used with its own receipt, a transactional commit keeps that one and voids the rest.
    named = (await engine.begin()).transaction_id
    await engine.execute_step(named, 1, "kv.put", {"key": "void/named", "value": 1})
    other = await engine.preview_commit(named)
    mine = await engine.preview_commit(named)
    await engine.commit(named, receipt_id=mine.receipt_id)
    assert await statuses(engine, named) == {mine.receipt_id: "issued", other.receipt_id: "voided"}


async def test_a_transaction_that_failed_on_a_commit_conflict_voids_its_receipts(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    first = (await engine.begin()).transaction_id
    second = (await engine.begin()).transaction_id
    for tx in (first, second):
        await engine.execute_step(tx, 1, "kv.put", {"key": "void/contended", "value": tx})
    p = await engine.preview_commit(second)
    await engine.commit(first)
    with pytest.raises(CommitConflict):
        await engine.commit(second)
    assert (await engine.get_transaction(second)).status is agenttx.TxStatus.FAILED
    assert await statuses(engine, second) == {p.receipt_id: "voided"}


async def test_expiry_wins_over_voided_as_it_does_in_every_decision(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    approved = await engine.preview_commit(tx)
    await engine.approve_commit(tx, approved.receipt_id, principal="al", roles=APPROVER)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/k2", "value": 2})
    clock.advance(TTL - 1)
    assert await statuses(engine, tx) == {p.receipt_id: "voided", approved.receipt_id: "voided"}
    with pytest.raises(SnapshotMismatch):  # stale, not yet expired: the revision refuses it
        await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    clock.advance(1)  # exactly expires_at: stale and expired
    assert await statuses(engine, tx) == {p.receipt_id: "expired", approved.receipt_id: "expired"}
    for decide in (
        engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER),
        engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER),
        engine.commit(tx, receipt_id=approved.receipt_id),
    ):
        with pytest.raises(ReceiptRefused) as refused:
            await decide
        assert refused.value.why == "expired"  # the reason the read shows


async def test_the_read_rule_on_rows_a_test_cannot_easily_reach(
    open_engine: Any, clock: FakeClock
) -> None:
    # ``receipt_status`` is a function of the receipt row, the time and the transaction row:
    # checked here on rows edited by hand (a step under way, a compensated end, a commit whose
    # receipt was not recorded).
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    row = await engine.store.get_transaction(tx)
    receipt = await engine.store.get_receipt(p.receipt_id)
    assert row is not None
    assert receipt is not None
    now = clock()
    assert receipt_status(receipt, now, row) == "issued"
    # A row read before a step and the preview after it (the receipts are read second): the
    # receipt is newer than the row, so current, not voided.
    assert receipt_status(receipt, now, dataclasses.replace(row, revision=row.revision - 1)) == (
        "issued"
    )
    executing = dataclasses.replace(row, status="EXECUTING", revision=row.revision + 1)
    assert receipt_status(receipt, now, executing) == "voided"
    assert receipt_status(receipt, now, dataclasses.replace(row, status="FAILED")) == "voided"
    # A commit of an older version recorded no receipt: which it used is unknown, so every
    # receipt keeps its stored status (as for expiry).
    old = dataclasses.replace(row, status="COMMITTED", revision=row.revision + 5)
    assert "commit_receipt_id" not in old.body
    assert receipt_status(receipt, now, old) == "issued"
    assert receipt_status(receipt, now + TTL, old) == "issued"


def test_the_words_for_why_a_receipt_is_voided() -> None:
    assert voided_because(3, 4, "ACTIVE") == "revision 3 moved to 4"
    assert voided_because(3, 5, "ROLLING_BACK") == "revision 3 moved to 5"
    ended = "the transaction ended ROLLED_BACK without using it"
    assert voided_because(3, 4, "ROLLED_BACK") == ended
    assert voided_because(3, 4, "FAILED") == "the transaction ended FAILED without using it"
    assert voided_because(3, 4, "COMMITTED") == "the transaction was committed without it"
