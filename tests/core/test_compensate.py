"""Compensating a committed transaction (issue 13 point 8), on both stores: a new
compensating transaction runs the kept undos newest first, with its own audit chain; what it
cannot undo is reported; approval, a restart, the plan, and pruning at the window's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.errors import AlreadyExists, NotActive
from compensation_tools import TOOLS, undone
from waiting import eventually


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "undone.jsonl")


@pytest.fixture
async def eng(open_engine: Any, clock: Any) -> agenttx.Engine:
    return await open_engine(tools=TOOLS, clock=clock, background=False)  # type: ignore[no-any-return]


async def _committed(eng: agenttx.Engine, *tools: str, log: str, **begin: Any) -> str:
    tx = (await eng.begin(agent_id="a", **begin)).transaction_id
    for i, name in enumerate(tools, start=1):
        r = await eng.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    await eng.commit(tx)
    return tx


async def test_compensate_runs_the_kept_undos_newest_first_in_a_new_transaction(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _committed(eng, "comp.charge", "comp.best", "comp.charge", log=log)
    assert undone(log) == []  # the commit ran none of them
    k = await eng.compensate(tx, reason="refund")
    assert k.transaction_id != tx
    assert k.compensation_for == tx
    assert k.status == "compensated"
    assert not k.requires_human
    assert undone(log) == [("comp.charge", 3), ("comp.best", 2), ("comp.charge", 1)]
    assert [a.verdict for a in k.actions] == ["done", "done", "done"]
    info = await eng.get_transaction(k.transaction_id)
    assert info.status is agenttx.TxStatus.COMPENSATED
    assert info.compensation_for == tx
    # Its own chain, which verifies; the original's chain is untouched and verifies too.
    v = await eng.verify_audit(k.transaction_id)
    assert v.ok
    assert v.records >= 5
    kinds = [rec.kind for rec in await eng.audit_records(k.transaction_id)]
    assert kinds[0] == "begin"
    assert kinds.count("compensation") == 3
    assert kinds[-1] == "compensation.settled"
    assert (await eng.verify_audit(tx)).ok
    assert (await eng.get_transaction(tx)).status is agenttx.TxStatus.COMMITTED


async def test_a_step_past_its_window_or_not_supported_is_reported_not_skipped(
    eng: agenttx.Engine, clock: Any, log: str
) -> None:
    tx = await _committed(eng, "comp.charge", "comp.brief", "comp.launch", log=log)
    clock.advance(1)  # past comp.brief's window
    plan = await eng.compensation_plan(tx)
    assert [(a.step_id, a.verdict) for a in plan.actions] == [
        (3, "not_supported"),
        (2, "past_window"),
        (1, "run"),
    ]
    k = await eng.compensate(tx, reason="undo the order")
    assert undone(log) == [("comp.charge", 1)]
    assert k.status == "failed"
    assert k.requires_human
    assert {(e["step"], e["verdict"]) for e in k.evidence} == {
        (3, "not_supported"),
        (2, "past_window"),
    }
    info = await eng.get_transaction(k.transaction_id)
    assert info.status is agenttx.TxStatus.FAILED
    assert info.requires_human
    assert any("step 2 (comp.brief)" in e for e in info.compensation_errors)
    assert (await eng.verify_audit(k.transaction_id)).ok


async def test_a_failing_undo_settles_failed_with_its_error(eng: agenttx.Engine, log: str) -> None:
    tx = await _committed(eng, "comp.charge", "comp.flaky", log=log)
    k = await eng.compensate(tx, reason="r")
    assert k.status == "failed"
    assert k.requires_human
    assert undone(log) == [("comp.charge", 1)]  # the older one still ran
    flaky = next(a for a in k.actions if a.tool == "comp.flaky")
    assert flaky.verdict == "failed"
    assert "provider down" in flaky.reason


async def test_a_second_compensation_or_one_of_an_open_transaction_is_refused(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _committed(eng, "comp.charge", log=log)
    await eng.compensate(tx, reason="r")
    with pytest.raises(AlreadyExists, match="already compensated"):
        await eng.compensate(tx, reason="again")
    assert undone(log) == [("comp.charge", 1)]
    open_tx = (await eng.begin(agent_id="a")).transaction_id
    with pytest.raises(NotActive):
        await eng.compensate(open_tx, reason="r")
    with pytest.raises(agenttx.InvalidArgument, match="reason is 5000 bytes"):
        await eng.compensate(tx, reason="x" * 5000)


async def test_the_plan_before_the_commit_shows_what_a_compensation_would_run(
    eng: agenttx.Engine, log: str
) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await eng.execute_step(tx, 1, "comp.charge", {"n": 1, "log": log})
    await eng.execute_step(tx, 2, "comp.launch", {"n": 2, "log": log})
    before = await eng.compensation_plan(tx)
    await eng.commit(tx)
    after = await eng.compensation_plan(tx)
    assert [(a.step_id, a.verdict) for a in before.actions] == [
        (2, "not_supported"),
        (1, "run"),
    ]
    assert before.actions == after.actions


async def test_compensation_needing_approval_waits_and_survives_a_restart(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = await _committed(eng, "comp.charge", "comp.refund", log=log, metadata={"principal": "bob"})
    k = await eng.compensate(tx, reason="chargeback", principal="carol")
    assert k.status == "awaiting_approval"
    assert undone(log) == []
    assert (await eng.get_transaction(k.transaction_id)).compensation_approval_pending
    await eng.close()
    again = await open_engine(tools=TOOLS, clock=clock, background=False)
    await again.recover()  # waiting is not interrupted work
    assert undone(log) == []
    for own in ("bob", "carol"):  # the committed transaction's principal, the requester
        with pytest.raises(agenttx.errors.CompensationApprovalRefused, match="own principal"):
            await again.approve_compensation(k.transaction_id, own, roles=["approver"])
    assert undone(log) == []
    r = await again.approve_compensation(k.transaction_id, "alice", roles=["approver"])
    assert r.transaction_status is agenttx.TxStatus.COMPENSATED
    assert undone(log) == [("comp.refund", 2), ("comp.charge", 1)]
    done = await again.compensation(k.transaction_id)
    assert done.status == "compensated"
    assert (await again.verify_audit(k.transaction_id)).ok


async def test_an_interrupted_compensation_is_finished_at_the_next_start(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = await _committed(eng, "comp.charge", "comp.best", log=log)
    # A compensation whose process died after its first undo: the compensating transaction
    # is durable and COMPENSATING, one kept record done, one pending.
    calls = 0
    original = eng.rewinder.compensate

    async def die_after_one(rt: Any, rows: Any, **kw: Any) -> list[str]:
        nonlocal calls
        calls += 1
        await original(rt, rows[:1], **kw)
        raise SystemExit("crash")

    eng.rewinder.compensate = die_after_one  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await eng.compensate(tx, reason="r")
    assert undone(log) == [("comp.best", 2)]
    await eng.close()
    again = await open_engine(tools=TOOLS, clock=clock, background=False)
    cid = f"{tx}-compensation"
    assert (await again.get_transaction(cid)).status is agenttx.TxStatus.COMPENSATED
    assert undone(log) == [("comp.best", 2), ("comp.charge", 1)]  # each exactly once
    assert (await again.verify_audit(cid)).ok


async def test_kept_undo_records_are_pruned_when_their_window_ends(
    open_engine: Any, clock: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, clock=clock, background=False, compensation_keep_s=60)
    tx = await _committed(eng, "comp.charge", "comp.refund", log=log)
    assert len(await eng.store.load_undo(tx)) == 2
    clock.advance(61)  # past the default keep (comp.refund), inside comp.charge's hour
    assert await eng.prune_kept_undo() == 1
    assert [u.step_id for u in await eng.store.load_undo(tx)] == [1]
    plan = await eng.compensation_plan(tx)
    assert [(a.step_id, a.verdict) for a in plan.actions] == [(2, "past_window"), (1, "run")]
    clock.advance(3600)
    assert await eng.prune_kept_undo() == 1
    assert await eng.store.load_undo(tx) == []


async def test_a_commit_without_undoable_steps_keeps_nothing(eng: agenttx.Engine) -> None:
    tx = (await eng.begin(agent_id="a")).transaction_id
    await eng.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    await eng.commit(tx)
    assert (await eng.compensation_plan(tx)).actions == []
    assert await eng.store.load_undo(tx) == []
    with pytest.raises(agenttx.FailedPrecondition, match="nothing to compensate"):
        await eng.compensate(tx, reason="r")


async def test_a_live_engines_maintenance_pass_finishes_an_interrupted_compensation(
    open_engine: Any, log: str
) -> None:
    eng = await open_engine(tools=TOOLS, background=False)
    tx = await _committed(eng, "comp.charge", log=log)
    original = eng.rewinder.compensate

    async def crash(rt: Any, rows: Any, **kw: Any) -> list[str]:
        raise SystemExit("crash before the undo")

    eng.rewinder.compensate = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await eng.compensate(tx, reason="r")
    eng.rewinder.compensate = original  # type: ignore[method-assign]
    cid = f"{tx}-compensation"
    assert (await eng.get_transaction(cid)).status is agenttx.TxStatus.COMPENSATING
    eng.start_background()  # recovery runs every 5 s (RECOVER_EVERY_S)

    async def compensated() -> bool:
        return (await eng.get_transaction(cid)).status is agenttx.TxStatus.COMPENSATED

    await eventually(compensated, "a maintenance pass finished the compensation", interval=0.1)
    assert (await eng.get_transaction(cid)).status is agenttx.TxStatus.COMPENSATED
    assert undone(log) == [("comp.charge", 1)]


async def test_a_compensation_is_published_to_listeners_as_it_runs_and_ends(
    eng: agenttx.Engine, log: str
) -> None:
    # A served engine always has listeners (metrics, the event streams): a status the event
    # table lacked made the compensation's own status change raise, and the caller got
    # INTERNAL after the undo actions had run.
    seen: list[tuple[agenttx.TxStatus, str]] = []
    eng.events.add_listener(lambda e: seen.append((e.status, e.kind)))
    tx = await _committed(eng, "comp.charge", log=log)
    k = await eng.compensate(tx, reason="refund")
    assert k.status == "compensated"
    assert (agenttx.TxStatus.COMPENSATED, "compensate") in seen
