"""Compensation contracts enforced on rollback (issue 13 point 5), on both stores: each
contract, the compensation window (a fake clock), and the undo that waits for an approver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.errors import CompensationApprovalRefused, CompensationRefused
from compensation_tools import TOOLS, undone


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


async def test_rollback_not_supported_with_a_window_is_not_undone_later(
    eng: agenttx.Engine, clock: Any, log: str
) -> None:
    # On main this tool's undo still ran 100 ms later, past its 10 ms window.
    tx = (await eng.begin(agent_id="a")).transaction_id
    await _run(eng, tx, "comp.launch", log=log)
    clock.advance(0.1)
    r = await eng.rollback(tx)
    assert undone(log) == []
    assert r.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert r.compensations_run == 0
    assert any("step 1 (comp.launch)" in e and "rollback_not_supported" in e
               for e in r.compensation_errors)  # fmt: skip
    info = await eng.get_transaction(tx)
    assert info.requires_human
    assert (await eng.verify_audit(tx)).ok


async def test_supported_and_best_effort_are_undone_newest_first(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await _run(eng, tx, "comp.charge", "comp.best", "comp.charge", log=log)
    r = await eng.rollback(tx)
    assert undone(log) == [("comp.charge", 3), ("comp.best", 2), ("comp.charge", 1)]
    assert r.compensations_run == 3
    assert r.compensation_errors == []
    assert not (await eng.get_transaction(tx)).requires_human


async def test_partial_rollback_over_an_unsupported_step_is_refused_and_changes_nothing(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await _run(eng, tx, "comp.charge", "comp.launch", "comp.charge", log=log)
    before = await eng.get_transaction(tx)
    with pytest.raises(CompensationRefused) as exc:
        await eng.rollback(tx, to_step=2)
    assert exc.value.step_id == 2
    assert "roll back to step 3" in str(exc.value)
    after = await eng.get_transaction(tx)
    assert (after.revision, after.next_step_id) == (before.revision, before.next_step_id)
    assert undone(log) == []
    # A rollback that stays after the step is fine.
    r = await eng.rollback(tx, to_step=3)
    assert r.next_step_id == 3
    assert undone(log) == [("comp.charge", 3)]


async def test_past_the_window_the_undo_is_not_run_and_a_human_is_needed(
    eng: agenttx.Engine, clock: Any, log: str
) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await _run(eng, tx, "comp.charge", "comp.brief", log=log)
    clock.advance(0.5)  # past comp.brief's 10 ms window, well inside comp.charge's hour
    r = await eng.rollback(tx)
    assert undone(log) == [("comp.charge", 1)]
    assert r.compensations_run == 1
    info = await eng.get_transaction(tx)
    assert info.requires_human
    assert any("step 2 (comp.brief)" in e and "window ended" in e for e in info.compensation_errors)
    kinds = [
        (rec.kind, rec.content()["data"].get("outcome")) for rec in await eng.audit_records(tx)
    ]
    assert ("compensation", "skipped") in kinds
    assert ("compensation", "done") in kinds
    assert (await eng.verify_audit(tx)).ok


async def test_undo_needing_approval_waits_for_another_principal_with_the_role(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.charge", "comp.refund", log=log)
    r = await eng.rollback(tx, reason="customer cancelled")
    assert r.compensation_approval_pending
    assert not r.rolled_back
    assert r.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert undone(log) == []
    info = await eng.get_transaction(tx)
    assert info.compensation_approval_pending
    with pytest.raises(CompensationApprovalRefused, match="approver"):
        await eng.approve_compensation(tx, "carol", roles=("viewer",))
    with pytest.raises(CompensationApprovalRefused, match="own principal"):
        await eng.approve_compensation(tx, "bob", roles=("approver",))
    done = await eng.approve_compensation(tx, "alice", roles=("approver",))
    assert done.rolled_back
    assert done.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert undone(log) == [("comp.refund", 2), ("comp.charge", 1)]
    with pytest.raises(CompensationApprovalRefused, match="nothing waits"):
        await eng.approve_compensation(tx, "alice", roles=("approver",))
    records = await eng.audit_records(tx)
    approval = [rec for rec in records if rec.kind == "approval"]
    assert len(approval) == 1
    assert approval[0].content()["data"]["principal"] == "alice"
    assert (await eng.verify_audit(tx)).ok


async def test_a_waiting_rollback_survives_a_restart_and_recovery_leaves_it(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = (await eng.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await _run(eng, tx, "comp.refund", log=log)
    assert (await eng.rollback(tx)).compensation_approval_pending
    await eng.close()
    again = await open_engine(tools=TOOLS, clock=clock, background=False)
    await again.recover()
    assert undone(log) == []
    assert (await again.get_transaction(tx)).compensation_approval_pending
    r = await again.approve_compensation(tx, "alice", roles=["approver"])
    assert r.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert undone(log) == [("comp.refund", 1)]


async def test_approval_arguments_over_their_limits_are_refused(eng: agenttx.Engine) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    with pytest.raises(agenttx.InvalidArgument, match="principal is 300 bytes"):
        await eng.approve_compensation(tx, "p" * 300, roles=["approver"])
    with pytest.raises(agenttx.InvalidArgument, match="40 roles"):
        await eng.approve_compensation(tx, "alice", roles=["r"] * 40)


def test_a_tool_with_an_unknown_contract_or_a_bad_window_is_refused() -> None:
    with pytest.raises(agenttx.InvalidArgument, match="unknown compensation"):
        agenttx.tool(name="x.y", compensation="maybe")(lambda ctx: None)  # type: ignore[arg-type]
    with pytest.raises(agenttx.InvalidArgument, match="compensation_window_s"):
        agenttx.tool(name="x.y", compensation_window_s=-1)(lambda ctx: None)


async def test_not_required_steps_have_nothing_to_undo_beside_supported_ones(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await eng.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})  # not_required
    await _run(eng, tx, "comp.charge", log=log)
    r = await eng.rollback(tx, to_step=1)
    assert r.compensations_run == 1
    assert r.compensation_errors == []
    assert undone(log) == [("comp.charge", 2)]
    assert not (await eng.get_transaction(tx)).requires_human
