"""An approver refuses a receipt (issue 13, points 1–2), on every store.

A refusal follows an approval's rules for who may make it and which receipt it may name; it
keeps the transaction open, makes the receipt unusable for good, tells the agent who refused
and why, shows in the transaction's view and in its audit chain, and races an approval like a
second approval does: exactly one decision wins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agenttx
from agenttx.errors import (
    ApprovalRefused,
    ApprovalRequired,
    InvalidArgument,
    ReceiptRefused,
    SnapshotMismatch,
)
from agenttx.types import Caller, Role
from conftest import FakeClock

APPROVER = ("approver",)


async def approval_tx(engine: agenttx.Engine, mode: str = "approval_required") -> str:
    b = await engine.begin(agent_id="a", principal="bob", mode=mode)
    await engine.execute_step(b.transaction_id, 1, "kv.put", {"key": "acct/1", "value": 100})
    return b.transaction_id


async def test_a_refused_receipt_cannot_commit_and_says_who_refused_and_why(
    engine: agenttx.Engine,
) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    r = await engine.refuse_commit(
        tx, p.receipt_id, "the limit is 50, not 100", principal="alice", roles=APPROVER
    )
    assert (r.receipt_id, r.refused_by, r.reason) == (
        p.receipt_id,
        "alice",
        "the limit is 50, not 100",
    )
    assert r.snapshot == p.snapshot  # a refusal changes no revision
    info = await engine.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ACTIVE  # the agent can still change it
    assert info.revision == p.revision

    with pytest.raises(ReceiptRefused) as refused:
        await engine.commit(tx, expected_revision=p.revision, receipt_id=p.receipt_id)
    assert refused.value.why == "refused"
    assert "'alice'" in refused.value.message
    assert "the limit is 50, not 100" in refused.value.message
    assert "preview it again" in refused.value.message
    assert "roll the transaction back" in refused.value.message
    # Nor can it be approved afterwards, by anyone.
    with pytest.raises(ApprovalRefused) as late:
        await engine.approve_commit(tx, p.receipt_id, principal="carol", roles=APPROVER)
    assert late.value.why == "already_refused"
    assert "refused by 'alice'" in late.value.message
    # Nor refused twice.
    with pytest.raises(ApprovalRefused) as twice:
        await engine.refuse_commit(tx, p.receipt_id, "again", principal="carol", roles=APPROVER)
    assert twice.value.why == "already_refused"
    assert twice.value.message.startswith("refusal of receipt")
    assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.ACTIVE


async def test_the_agent_answers_a_refusal_with_a_change_and_a_new_preview(
    engine: agenttx.Engine,
) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.refuse_commit(tx, p.receipt_id, "at most 50", principal="alice", roles=APPROVER)
    await engine.execute_step(tx, 2, "kv.put", {"key": "acct/1", "value": 50})
    again = await engine.preview_commit(tx)
    assert again.receipt_id != p.receipt_id
    assert again.change_hash != p.change_hash
    await engine.approve_commit(tx, again.receipt_id, principal="alice", roles=APPROVER)
    c = await engine.commit(tx, expected_revision=again.revision, receipt_id=again.receipt_id)
    assert c.committed
    read = await engine.begin()
    got = await engine.execute_step(read.transaction_id, 1, "kv.get", {"key": "acct/1"})
    assert got.output["value"] == 50
    kinds = [rec.kind for rec in await engine.audit_records(tx)]
    assert kinds.count("approval.refused") == 1
    assert kinds.index("approval.refused") < kinds.index("approval") < kinds.index("commit")
    assert (await engine.verify_audit(tx)).ok


async def test_a_commit_without_approval_names_a_refused_receipt_too(
    engine: agenttx.Engine,
) -> None:
    # A transaction that needs no approval: its receipt can still be refused, and is then
    # refused at commit; committing without naming a receipt stays the caller's choice.
    tx = await approval_tx(engine, mode="transactional")
    p = await engine.preview_commit(tx)
    await engine.refuse_commit(tx, p.receipt_id, "not today", principal="alice", roles=APPROVER)
    with pytest.raises(ReceiptRefused, match="not today"):
        await engine.commit(tx, receipt_id=p.receipt_id)


async def test_who_may_refuse_follows_the_approval_rules(engine: agenttx.Engine) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    with pytest.raises(ApprovalRefused) as own:
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="bob", roles=APPROVER)
    assert own.value.why == "same_principal"
    assert "must refuse" in own.value.message
    with pytest.raises(ApprovalRefused) as role:
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="carol", roles=("agent",))
    assert role.value.why == "not_approver"
    with pytest.raises(ApprovalRefused) as nobody:
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="", roles=APPROVER)
    assert nobody.value.why == "no_principal"
    # In server mode the refuser is the caller, whatever the call names.
    agent = Caller(principal="bob", tenant="default", roles=frozenset({Role.AGENT}))
    with pytest.raises(ApprovalRefused) as posing:  # naming alice and approver changes nothing
        await engine.refuse_commit(
            tx, p.receipt_id, "no", principal="alice", roles=APPROVER, caller=agent
        )
    assert posing.value.why == "not_approver"
    assert "'bob'" in posing.value.message
    carol = Caller(principal="carol", tenant="default", roles=frozenset({Role.APPROVER}))
    r = await engine.refuse_commit(
        tx, p.receipt_id, "no", principal="mallory", roles=(), caller=carol
    )
    assert r.refused_by == "carol"


async def test_the_receipt_checks_hold_for_a_refusal(open_engine: Any, clock: FakeClock) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=60)
    tx, other = await approval_tx(engine), await approval_tx(engine)
    p_other = await engine.preview_commit(other)
    with pytest.raises(ReceiptRefused) as foreign:
        await engine.refuse_commit(tx, p_other.receipt_id, "no", principal="al", roles=APPROVER)
    assert foreign.value.why == "foreign"
    with pytest.raises(ReceiptRefused) as unknown:
        await engine.refuse_commit(tx, "rcpt_nope", "no", principal="al", roles=APPROVER)
    assert unknown.value.why == "unknown"
    p = await engine.preview_commit(tx)
    await engine.execute_step(tx, 2, "kv.put", {"key": "acct/2", "value": 1})
    with pytest.raises(SnapshotMismatch):  # a later step voided it: nothing left to refuse
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER)
    p = await engine.preview_commit(tx)
    clock.advance(61)
    with pytest.raises(ReceiptRefused) as expired:
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER)
    assert expired.value.why == "expired"
    await engine.rollback(tx)
    with pytest.raises(agenttx.NotActive):
        await engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER)


async def test_the_reason_is_required_bounded_and_masked(engine: agenttx.Engine) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    for empty in ("", "   "):
        with pytest.raises(InvalidArgument, match="reason is required"):
            await engine.refuse_commit(tx, p.receipt_id, empty, principal="al", roles=APPROVER)
    with pytest.raises(InvalidArgument, match="4097 bytes, over the limit of 4096"):
        await engine.refuse_commit(
            tx, p.receipt_id, "é" * 2048 + "x", principal="al", roles=APPROVER
        )
    with pytest.raises(InvalidArgument, match="reason must be a string"):
        await engine.refuse_commit(tx, p.receipt_id, 5, principal="al", roles=APPROVER)  # type: ignore[arg-type]
    # Nothing of those refused calls decided the receipt.
    assert (await engine.get_transaction(tx)).receipts[0].status == "issued"
    token = "ghp_" + "a" * 36
    r = await engine.refuse_commit(
        tx, p.receipt_id, f"it leaks password=hunter2 and {token}", principal="al", roles=APPROVER
    )
    assert "hunter2" not in r.reason
    assert token not in r.reason
    view = (await engine.get_transaction(tx)).receipts[0]
    assert view.reason == r.reason
    audit = [rec for rec in await engine.audit_records(tx) if rec.kind == "approval.refused"]
    assert len(audit) == 1
    assert "hunter2" not in audit[0].body
    assert token not in audit[0].body


async def test_the_view_lists_receipts_and_their_decisions_across_a_restart(
    open_engine: Any,
) -> None:
    first = await open_engine()
    tx = await approval_tx(first)
    p1 = await first.preview_commit(tx)
    r = await first.refuse_commit(tx, p1.receipt_id, "too much", principal="al", roles=APPROVER)
    p2 = await first.preview_commit(tx)
    await first.close()

    second = await open_engine()
    receipts = (await second.get_transaction(tx)).receipts
    assert [x.receipt_id for x in receipts] == [p2.receipt_id, p1.receipt_id]  # newest first
    assert [x.status for x in receipts] == ["issued", "refused"]
    assert (receipts[1].decided_by, receipts[1].decided_at, receipts[1].reason) == (
        "al",
        r.refused_at,
        "too much",
    )
    assert (receipts[1].change_hash, receipts[1].revision) == (p1.change_hash, p1.revision)
    with pytest.raises(ReceiptRefused, match="too much"):  # the refusal is durable
        await second.commit(tx, receipt_id=p1.receipt_id)
    await second.approve_commit(tx, p2.receipt_id, principal="al", roles=APPROVER)
    receipts = (await second.get_transaction(tx)).receipts
    assert (receipts[0].status, receipts[0].decided_by, receipts[0].reason) == (
        "approved",
        "al",
        "",
    )
    assert (await second.commit(tx, receipt_id=p2.receipt_id)).committed
    with pytest.raises(ApprovalRequired):  # a fresh transaction: no receipt, no commit
        await second.commit(await approval_tx(second))


async def test_an_approval_and_a_refusal_at_once_exactly_one_wins(open_engine: Any) -> None:
    engine = await open_engine()
    tx = await approval_tx(engine)
    seen: set[str] = set()
    for round_ in range(4):  # fresh receipts each round, both orders of arrival
        p = await engine.preview_commit(tx)
        calls = [
            engine.approve_commit(tx, p.receipt_id, principal="alice", roles=APPROVER),
            engine.refuse_commit(tx, p.receipt_id, "no", principal="carol", roles=APPROVER),
        ]
        if round_ % 2:
            calls.reverse()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        won = [o for o in outcomes if isinstance(o, agenttx.Approval | agenttx.Refusal)]
        lost = [o for o in outcomes if isinstance(o, ApprovalRefused)]
        assert (len(won), len(lost)) == (1, 1), outcomes
        winner = "approval" if isinstance(won[0], agenttx.Approval) else "refusal"
        assert lost[0].why == ("already_approved" if winner == "approval" else "already_refused")
        seen.add(winner)
        status = (await engine.get_transaction(tx)).receipts[0].status
        assert status == ("approved" if winner == "approval" else "refused")
    assert seen == {"approval", "refusal"}  # each order was run, and each decision won once
    kinds = [rec.kind for rec in await engine.audit_records(tx)]
    assert kinds.count("approval") + kinds.count("approval.refused") == 4
    assert (await engine.verify_audit(tx)).ok


async def test_on_two_engines_sharing_a_store_one_decision_wins(open_engine: Any) -> None:
    one, two = await open_engine(), await open_engine()
    tx = await approval_tx(one)
    for _ in range(3):
        p = await one.preview_commit(tx)
        outcomes = await asyncio.gather(
            one.refuse_commit(tx, p.receipt_id, "no", principal="alice", roles=APPROVER),
            two.approve_commit(tx, p.receipt_id, principal="carol", roles=APPROVER),
            return_exceptions=True,
        )
        won = [o for o in outcomes if isinstance(o, agenttx.Approval | agenttx.Refusal)]
        lost = [o for o in outcomes if isinstance(o, ApprovalRefused)]
        assert (len(won), len(lost)) == (1, 1), outcomes
        if isinstance(won[0], agenttx.Refusal):
            with pytest.raises(ReceiptRefused):
                await two.commit(tx, receipt_id=p.receipt_id)
    assert (await one.verify_audit(tx)).ok


async def test_a_refusal_after_an_approval_is_refused_and_the_approval_stands(
    engine: agenttx.Engine,
) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=APPROVER)
    with pytest.raises(ApprovalRefused) as late:
        await engine.refuse_commit(tx, p.receipt_id, "wait", principal="carol", roles=APPROVER)
    assert late.value.why == "already_approved"
    assert "approved by 'alice'" in late.value.message
    assert "rolled back" in late.value.message
    assert (await engine.commit(tx, receipt_id=p.receipt_id)).committed


async def test_the_view_lists_the_newest_twenty_receipts_newest_first(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock)
    tx = await approval_tx(engine)
    made = []
    for _ in range(25):
        made.append((await engine.preview_commit(tx)).receipt_id)
        clock.advance(1)
    listed = [r.receipt_id for r in (await engine.get_transaction(tx)).receipts]
    assert listed == made[::-1][:20]
    assert (await engine.list_transactions())[0].receipts == []  # listings read no receipts
