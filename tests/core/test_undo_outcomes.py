"""An undo whose outcome is unknown (issue 30 points 13 and 14), on both stores: an undo
handler runs under its tool's ``undo_timeout``, so a real hang ends in bounded time; one that
timed out or raised ``UncertainOutcome`` is called exactly once, checkpointed
``outcome_unknown``, and the rollback (or compensation) waits — never sending it again —
until its ``undo_reconcile`` handler or an operator says whether it took effect."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.errors import InvalidArgument
from undo_outcome_tools import TOOLS, calls


@pytest.fixture
def log(tmp_path: Path) -> str:
    path = tmp_path / "provider-log"
    path.mkdir()
    return str(path)


@pytest.fixture
async def eng(open_engine: Any) -> agenttx.Engine:
    return await open_engine(tools=TOOLS, background=False)  # type: ignore[no-any-return]


async def _begun(eng: agenttx.Engine, log: str, *tools: str) -> str:
    tx = (await eng.begin(agent_id="a")).transaction_id
    for i, name in enumerate(tools, start=1):
        r = await eng.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    return tx


async def _kinds(eng: agenttx.Engine, tx: str, kind: str) -> list[dict[str, Any]]:
    return [json.loads(r.body)["data"] for r in await eng.audit_records(tx) if r.kind == kind]


def test_undo_timeout_defaults_to_the_tools_timeout_and_is_bounded() -> None:
    async def act(ctx: agenttx.ToolContext) -> None: ...

    assert agenttx.tool(name="t.a", timeout=7)(act).undo_timeout == 7
    assert agenttx.tool(name="t.b", timeout=7, undo_timeout=2)(act).undo_timeout == 2
    for bad in (0, -1, 86_401):
        with pytest.raises(InvalidArgument, match="undo_timeout must be in"):
            agenttx.tool(name="t.c", undo_timeout=bad)(act)


@pytest.mark.serial
async def test_a_hanging_undo_ends_in_bounded_time_as_an_unknown_outcome(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _begun(eng, log, "pay.slow", "pay.hang")
    started = time.monotonic()
    # Before undo_timeout this never returned: the handler awaits an event nobody sets.
    r = await asyncio.wait_for(eng.rollback(tx), timeout=20)
    assert time.monotonic() - started < 5
    assert not r.rolled_back
    assert r.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert calls(log, "pay.hang") == 1  # a timeout is not retried
    assert calls(log, "pay.slow") == 1  # the other undo ran
    [line] = r.compensation_errors
    assert "timed out after 300 ms" in line
    assert "never run again" in line
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLING_BACK
    assert info.requires_human
    assert (info.outcome_unknown_step, info.reconcile_state) == (2, "undo_outcome_unknown")
    assert any("agenttx tx resolve" in e for e in info.compensation_errors)
    with pytest.raises(agenttx.NoReconcileHandler, match="undo_reconcile"):
        await eng.reconcile_step(tx, 2)
    # Recovery leaves it waiting and does not run it again.
    await eng.recover()
    assert calls(log, "pay.hang") == 1
    settled = await eng.resolve_step(tx, 2, "happened", reason="refund seen at the bank")
    assert settled.outcome == "happened"
    assert settled.transaction_status is agenttx.TxStatus.ROLLED_BACK
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert not info.requires_human
    assert info.compensation_errors == []
    assert info.outcome_unknown_step == 0
    assert info.reconcile_state == ""
    assert calls(log, "pay.hang") == 1
    [resolved] = await _kinds(eng, tx, "step.resolved")
    assert resolved["of"] == "undo"
    assert resolved["outcome"] == "happened"
    assert resolved["reason"] == "refund seen at the bank"


async def test_an_uncertain_undo_is_called_once_then_reconciled_by_its_handler(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _begun(eng, log, "pay.uncertain")
    r = await eng.rollback(tx)
    assert r.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert calls(log, "pay.uncertain") == 1  # before: three blind tries
    info = await eng.get_transaction(tx)
    assert info.requires_human
    assert (info.operation_provider, info.operation_id) == ("psp", "rf-1")
    [checkpoint] = await _kinds(eng, tx, "compensation")
    assert checkpoint["outcome"] == "outcome_unknown"
    assert checkpoint["attempts"] == 1
    # Nothing else sends it again: a second abort, recovery, a step, a commit.
    again = await eng.rollback(tx)
    assert again.transaction_status is agenttx.TxStatus.ROLLING_BACK
    await eng.recover()
    with pytest.raises(agenttx.NotActive):
        await eng.execute_step(tx, 1, "pay.uncertain", {"n": 1, "log": log})
    with pytest.raises(agenttx.NotActive):
        await eng.commit(tx)
    assert calls(log, "pay.uncertain") == 1
    # The provider does not know yet: still waiting.
    Path(log, "provider").write_text("unknown")
    still = await eng.reconcile_step(tx, 1)
    assert still.outcome == "unknown"
    assert still.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert "reconcile_step again" in still.clean_hint
    Path(log, "provider").write_text("happened")
    done = await eng.reconcile_step(tx, 1)
    assert (done.outcome, done.operation_id) == ("happened", "rf-1")
    assert done.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert calls(log, "pay.uncertain") == 1
    assert calls(log, "pay.uncertain.reconcile") == 2
    seen = json.loads(Path(log, "reconcile.ctx").read_text())
    assert seen["undo_id"] > 0
    assert (seen["provider"], seen["operation_id"], seen["attempt"]) == ("psp", "rf-1", 2)
    assert seen["idempotency_key"].startswith(tx)
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert not info.requires_human
    answers = await _kinds(eng, tx, "reconcile")
    assert [(a["of"], a["outcome"], a["tries"]) for a in answers] == [
        ("undo", "unknown", 1),
        ("undo", "happened", 2),
    ]
    with pytest.raises(agenttx.NotActive, match="cannot reconcile"):
        await eng.reconcile_step(tx, 1)
    assert (await eng.verify_audit(tx)).ok


async def test_an_undo_without_a_handler_waits_for_an_operators_word(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _begun(eng, log, "pay.unasked")
    await eng.rollback(tx, reason="customer cancelled")
    assert calls(log, "pay.unasked") == 1
    with pytest.raises(agenttx.NoReconcileHandler, match="agenttx tx resolve"):
        await eng.reconcile_step(tx, 1)
    with pytest.raises(InvalidArgument, match="without an output"):
        await eng.resolve_step(tx, 1, "happened", output={"x": 1})
    r = await eng.resolve_step(tx, 1, "not-happened", reason="no refund at the bank")
    assert r.outcome == "not_happened"
    assert r.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert "needs a human" in r.clean_hint
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert info.requires_human  # the charge stays: someone must refund it by hand
    [line] = info.compensation_errors
    assert "did not take effect" in line
    assert "no refund at the bank" in line
    assert calls(log, "pay.unasked") == 1


async def test_an_undo_step_waits_and_goes_back_to_the_step_once_resolved(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _begun(eng, log, "pay.slow", "pay.uncertain")
    u = await eng.undo_step(tx)
    assert u.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert calls(log, "pay.uncertain") == 1
    assert calls(log, "pay.slow") == 0
    await eng.resolve_step(tx, 2, "happened")
    info = await eng.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ACTIVE
    assert info.next_step_id == 2
    assert not info.requires_human
    assert [u["step"] for u in await _kinds(eng, tx, "step.undone")] == [2]
    r = await eng.execute_step(tx, 2, "pay.slow", {"n": 2, "log": log})
    assert r.status is agenttx.StepStatus.SUCCESS


async def test_a_compensation_waits_on_an_unknown_undo_then_settles(
    eng: agenttx.Engine, log: str
) -> None:
    tx = await _begun(eng, log, "pay.slow", "pay.uncertain")
    await eng.commit(tx)
    k = await eng.compensate(tx, reason="refund")
    assert k.status == "outcome_unknown"
    assert k.requires_human
    assert [a.verdict for a in k.actions] == ["outcome_unknown", "done"]
    assert [e["verdict"] for e in k.evidence] == ["outcome_unknown"]
    info = await eng.get_transaction(k.transaction_id)
    assert info.status is agenttx.TxStatus.COMPENSATING
    assert info.requires_human
    assert info.outcome_unknown_step == 2
    await eng.recover()  # the maintenance pass does not run it again
    assert calls(log, "pay.uncertain") == 1
    Path(log, "provider").write_text("happened")
    r = await eng.reconcile_step(k.transaction_id, 2)
    assert r.transaction_status is agenttx.TxStatus.COMPENSATED
    k = await eng.compensator.result(k.transaction_id)
    assert k.status == "compensated"
    assert not k.requires_human
    assert calls(log, "pay.uncertain") == 1
