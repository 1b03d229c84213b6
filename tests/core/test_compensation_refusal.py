"""Refusing a compensation approval (``Engine.refuse_compensation``), on both stores: a waiting
rollback (full, partial, a failed step's abort) and a waiting compensating transaction go on
without the refused undo, which never runs, and end needing a human with the evidence; who may
refuse, the reason's limits, one decision only; a crash after the recorded refusal is finished
by recovery without ever running the refused undo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.errors import CompensationApprovalRefused
from compensation_tools import TOOLS, undone

APPROVER = ("approver",)
WHY = "the customer was refunded by hand already"
REFUSED_2 = f"step 2 (comp.refund) not undone: compensation refused by alice: {WHY}"


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "undone.jsonl")


@pytest.fixture
async def eng(open_engine: Any, clock: Any) -> agenttx.Engine:
    return await open_engine(tools=TOOLS, clock=clock, background=False)  # type: ignore[no-any-return]


async def _run(eng: agenttx.Engine, tx: str, *tools: str, log: str) -> None:
    info = await eng.get_transaction(tx)
    for i, name in enumerate(tools, start=info.next_step_id):
        r = await eng.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint


async def _waiting_rollback(eng: agenttx.Engine, log: str, to_step: int | None = None) -> str:
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.charge", "comp.refund", "comp.best", log=log)
    r = await eng.rollback(tx, to_step, reason="customer cancelled")
    assert r.compensation_approval_pending
    assert undone(log) == []
    return tx


async def _waiting_compensation(eng: agenttx.Engine, log: str) -> str:
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.charge", "comp.refund", "comp.best", log=log)
    await eng.commit(tx)
    k = await eng.compensate(tx, reason="chargeback", principal="carol")
    assert k.status == "awaiting_approval"
    return k.transaction_id


def _data(records: list[Any], kind: str) -> list[dict[str, Any]]:
    return [rec.content()["data"] for rec in records if rec.kind == kind]


async def test_a_refused_rollback_goes_on_without_the_refused_undo(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _waiting_rollback(eng, log)
    r = await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    assert r.rolled_back
    assert not r.compensation_approval_pending
    assert r.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert r.compensations_run == 2
    assert r.compensation_errors == [REFUSED_2]
    # The refused undo never ran; every other one did, newest first.
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]
    info = await eng.get_transaction(tx)
    assert info.requires_human
    assert info.compensation_errors == [REFUSED_2]
    assert not info.compensation_approval_pending
    row = await eng.store.get_transaction(tx)
    assert row is not None
    assert row.body["compensation_evidence"] == [
        {
            "step": 2,
            "tool": "comp.refund",
            "contract": "supported",
            "undo_id": row.body["compensation_evidence"][0]["undo_id"],
            "verdict": "refused",
            "reason": f"compensation refused by alice: {WHY}",
        }
    ]
    undo = {u.step_id: u for u in await eng.store.load_undo(tx)}
    if 2 in undo:  # a store may drop an ended transaction's records; skipped, never done
        assert undo[2].status == "skipped"
    records = await eng.audit_records(tx)
    [refusal] = _data(records, "approval.refused")
    assert refusal == {
        "of": "compensation",
        "principal": "alice",
        "roles": ["approver"],
        "reason": WHY,
        "steps": [2],
    }
    outcomes = [(d["step"], d["outcome"]) for d in _data(records, "compensation")]
    assert sorted(outcomes) == [(1, "done"), (2, "skipped"), (3, "done")]
    kinds = [rec.kind for rec in records]
    assert kinds.index("approval.refused") < kinds.index("compensation")  # decided first
    assert kinds[-1] == "rollback"
    assert (await eng.verify_audit(tx)).ok


async def test_a_refused_partial_rollback_goes_back_to_active_at_its_target(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _waiting_rollback(eng, log, to_step=2)
    r = await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    assert r.transaction_status is agenttx.TxStatus.ACTIVE
    assert r.next_step_id == 2
    assert r.compensation_errors == [REFUSED_2]
    assert undone(log) == [("comp.best", 3)]  # step 1 is before the target: kept
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ACTIVE
    assert info.next_step_id == 2
    assert info.requires_human
    # The transaction goes on from its target, as after any partial rollback.
    await _run(eng, tx, "comp.charge", log=log)
    assert (await eng.verify_audit(tx)).ok


async def test_a_refused_abort_of_a_failed_step_ends_failed_needing_a_human(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.charge", "comp.refund", log=log)
    failed = await eng.execute_step(tx, 3, "comp.fatal", {})
    assert failed.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert (await eng.get_transaction(tx)).compensation_approval_pending
    r = await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    assert r.transaction_status is agenttx.TxStatus.FAILED
    assert r.compensation_errors == [REFUSED_2]
    assert undone(log) == [("comp.charge", 1)]
    assert (await eng.get_transaction(tx)).requires_human
    assert (await eng.verify_audit(tx)).ok


async def test_a_refused_compensation_runs_the_rest_and_ends_failed_with_the_evidence(
    eng: agenttx.Engine, log: str
) -> None:
    cid = await _waiting_compensation(eng, log)
    assert undone(log) == []
    r = await eng.refuse_compensation(cid, WHY, "alice", APPROVER)
    assert r.rolled_back  # finished: nothing waits any more
    assert not r.compensation_approval_pending
    assert r.transaction_status is agenttx.TxStatus.FAILED
    assert r.compensations_run == 2
    assert r.compensation_errors == [REFUSED_2]
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]
    k = await eng.compensation(cid)
    assert k.status == "failed"
    assert k.requires_human
    assert [(a.step_id, a.verdict) for a in k.actions] == [
        (3, "done"),
        (2, "refused"),
        (1, "done"),
    ]
    assert [(e["step"], e["verdict"], e["reason"]) for e in k.evidence] == [
        (2, "refused", f"compensation refused by alice: {WHY}")
    ]
    info = await eng.get_transaction(cid)
    assert info.status is agenttx.TxStatus.FAILED
    assert info.requires_human
    assert info.compensation_errors == [REFUSED_2]
    records = await eng.audit_records(cid)
    [refusal] = _data(records, "approval.refused")
    assert (refusal["of"], refusal["principal"], refusal["reason"]) == (
        "compensation",
        "alice",
        WHY,
    )
    [settled] = _data(records, "compensation.settled")
    assert settled["outcome"] == "failed"
    assert settled["ran"] == 2
    assert [(e["step"], e["verdict"]) for e in settled["not_undone"]] == [(2, "refused")]
    assert records[-1].kind == "compensation.settled"
    assert (await eng.verify_audit(cid)).ok


async def test_who_may_refuse_and_the_reasons_limits(eng: agenttx.Engine, log: str) -> None:
    tx = await _waiting_rollback(eng, log)
    with pytest.raises(CompensationApprovalRefused, match="own principal"):
        await eng.refuse_compensation(tx, WHY, "bob", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="'approver' role"):
        await eng.refuse_compensation(tx, WHY, "carol", ("viewer",))
    with pytest.raises(CompensationApprovalRefused, match="name the refusing principal"):
        await eng.refuse_compensation(tx, WHY, "", APPROVER)
    for empty in ("", "   "):
        with pytest.raises(agenttx.InvalidArgument, match="reason is required"):
            await eng.refuse_compensation(tx, empty, "alice", APPROVER)
    with pytest.raises(agenttx.InvalidArgument, match="5000 bytes, over the limit of 4096"):
        await eng.refuse_compensation(tx, "x" * 5000, "alice", APPROVER)
    with pytest.raises(agenttx.InvalidArgument, match="principal is 300 bytes"):
        await eng.refuse_compensation(tx, WHY, "p" * 300, APPROVER)
    # None of these decided anything: it still waits, and nothing ran.
    assert (await eng.get_transaction(tx)).compensation_approval_pending
    assert undone(log) == []
    # The reason's limit is bytes: 4096 of them is fine.
    r = await eng.refuse_compensation(tx, "é" * 2048, "alice", APPROVER)
    assert r.transaction_status is agenttx.TxStatus.ROLLED_BACK


async def test_a_refusal_when_nothing_waits_is_refused(eng: agenttx.Engine, log: str) -> None:
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.charge", log=log)
    with pytest.raises(CompensationApprovalRefused, match="nothing waits"):
        await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    with pytest.raises(agenttx.NotFound):
        await eng.refuse_compensation("tx-nope", WHY, "alice", APPROVER)
    assert (await eng.get_transaction(tx)).status is agenttx.TxStatus.ACTIVE


async def test_a_rollback_is_decided_once(eng: agenttx.Engine, log: str) -> None:
    refused = await _waiting_rollback(eng, log)
    await eng.refuse_compensation(refused, WHY, "alice", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="nothing waits"):
        await eng.approve_compensation(refused, "alice", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="nothing waits"):
        await eng.refuse_compensation(refused, "again", "dave", APPROVER)
    other = log + ".approved"  # the second transaction's undos, apart
    approved = await _waiting_rollback(eng, other)
    await eng.approve_compensation(approved, "alice", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="compensation refusal refused"):
        await eng.refuse_compensation(approved, WHY, "dave", APPROVER)
    # The refused one's refund never ran; the approved one's did.
    assert ("comp.refund", 2) not in undone(log)
    assert undone(other) == [("comp.best", 3), ("comp.refund", 2), ("comp.charge", 1)]
    assert len(_data(await eng.audit_records(refused), "approval.refused")) == 1
    assert _data(await eng.audit_records(approved), "approval.refused") == []


async def test_a_compensation_is_decided_once(eng: agenttx.Engine, log: str) -> None:
    refused = await _waiting_compensation(eng, log)
    await eng.refuse_compensation(refused, WHY, "alice", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="refused already by alice"):
        await eng.approve_compensation(refused, "dave", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="refused already by alice"):
        await eng.refuse_compensation(refused, "again", "dave", APPROVER)
    assert ("comp.refund", 2) not in undone(log)
    approved = await _waiting_compensation(eng, log + ".approved")
    await eng.approve_compensation(approved, "alice", APPROVER)
    with pytest.raises(CompensationApprovalRefused, match="approved already by alice"):
        await eng.refuse_compensation(approved, WHY, "dave", APPROVER)
    assert (await eng.compensation(approved)).status == "compensated"
    assert (await eng.compensation(refused)).status == "failed"


async def test_the_compensating_transactions_requester_may_not_refuse_either(
    eng: agenttx.Engine, log: str
) -> None:
    cid = await _waiting_compensation(eng, log)
    for own in ("bob", "carol"):  # the committed transaction's principal, the requester
        with pytest.raises(CompensationApprovalRefused, match="own principal"):
            await eng.refuse_compensation(cid, WHY, own, APPROVER)
    assert (await eng.compensation(cid)).status == "awaiting_approval"


async def test_a_secret_in_the_reason_is_masked(eng: agenttx.Engine, log: str) -> None:
    tx = await _waiting_rollback(eng, log)
    token = "ghp_" + "a" * 36
    r = await eng.refuse_compensation(
        tx, f"it leaks password=hunter2 and {token}", "alice", APPROVER
    )
    said = " ".join(r.compensation_errors)
    assert "hunter2" not in said
    assert token not in said
    [refusal] = [rec for rec in await eng.audit_records(tx) if rec.kind == "approval.refused"]
    assert "hunter2" not in refusal.body
    assert token not in refusal.body
    assert "it leaks" in said  # the reason is kept, only its secrets masked
    assert "it leaks" in refusal.body


async def test_a_crash_after_the_recorded_refusal_of_a_rollback_is_finished_by_recovery(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = await _waiting_rollback(eng, log)

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("crash after the refusal was written, before the rollback went on")

    eng.rewinder.rewind = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    assert undone(log) == []
    # The decision is durable before anything ran: still ROLLING_BACK, no longer waiting.
    row = await eng.store.get_transaction(tx)
    assert row is not None
    assert row.status == agenttx.TxStatus.ROLLING_BACK.value
    assert row.body["rewind"]["refused_by"] == "alice"
    assert "awaiting_approval" not in row.body["rewind"]
    await eng.close()
    # Opening the store recovers (``Engine.open``): the decided plan is finished.
    again = await open_engine(tools=TOOLS, clock=clock, background=False)
    await again.recover()  # and a second pass finds nothing more to do
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]
    info = await again.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert info.requires_human
    assert info.compensation_errors == [REFUSED_2]
    with pytest.raises(CompensationApprovalRefused):
        await again.approve_compensation(tx, "alice", APPROVER)
    assert ("comp.refund", 2) not in undone(log)
    assert (await again.verify_audit(tx)).ok


async def test_a_crash_while_a_refused_rollback_runs_its_other_undos_never_runs_the_refused(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = await _waiting_rollback(eng, log)
    original = eng.rewinder.compensate

    async def die_after_one(rt: Any, rows: Any, **kw: Any) -> list[str]:
        await original(rt, sorted(rows, key=lambda u: u.id)[-1:], **kw)  # the newest runs first
        raise SystemExit("crash")

    eng.rewinder.compensate = die_after_one  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await eng.refuse_compensation(tx, WHY, "alice", APPROVER)
    assert undone(log) == [("comp.best", 3)]
    await eng.close()
    again = await open_engine(tools=TOOLS, clock=clock, background=False)
    await again.recover()
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]  # each once; refund never
    info = await again.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert info.compensation_errors == [REFUSED_2]
    assert (await again.verify_audit(tx)).ok


async def test_a_crash_after_the_recorded_refusal_of_a_compensation_is_finished_by_recovery(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    cid = await _waiting_compensation(eng, log)

    async def crash(cid: str) -> Any:
        raise SystemExit("crash after the refusal was written, before the compensation ran")

    eng.compensation_approvals.resume_compensation = crash
    with pytest.raises(SystemExit):
        await eng.refuse_compensation(cid, WHY, "alice", APPROVER)
    row = await eng.store.get_transaction(cid)
    assert row is not None
    assert row.status == agenttx.TxStatus.COMPENSATING.value
    assert row.body["compensation"]["refused_by"] == "alice"
    assert undone(log) == []
    await eng.close()
    again = await open_engine(tools=TOOLS, clock=clock, background=False)  # recovers
    await again.recover()
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]
    k = await again.compensation(cid)
    assert k.status == "failed"
    assert [(e["step"], e["verdict"]) for e in k.evidence] == [(2, "refused")]
    assert (await again.verify_audit(cid)).ok
