"""undo_step / redo_step and the revision counters, on both stores: an undo restores the state
before the step and moves next_step_id back; a redo re-applies exactly what was undone, only
while nothing else changed; refusals carry a hint; all of it survives a restart."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, TxStatus
from undo_tools import CALLS, TOOLS, trace


@pytest.fixture
async def undo_engine(open_engine: Any) -> agenttx.Engine:
    CALLS.clear()
    return await open_engine(tools=TOOLS)  # type: ignore[no-any-return]


async def _state(engine: agenttx.Engine, tx: str) -> dict[str, str | None]:
    rt = await engine.images.get(tx)
    return rt.final_writes()


async def _put(engine: agenttx.Engine, tx: str, n: int, key: str, value: Any) -> None:
    r = await engine.execute_step(tx, n, "kv.put", {"key": key, "value": value})
    assert r.status is StepStatus.SUCCESS, r.clean_hint


async def test_undo_then_redo_gives_the_same_state(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    await _put(undo_engine, tx, 2, "a", 2)
    await _put(undo_engine, tx, 3, "b", "${steps.2.value}")
    done = await _state(undo_engine, tx)
    info = await undo_engine.get_transaction(tx)
    live_before = [(s.step_id, s.arguments, s.output) for s in info.steps if s.live]

    u = await undo_engine.undo_step(tx)
    assert (u.step_id, u.next_step_id, u.can_redo, u.can_undo) == (3, 3, True, True)
    u = await undo_engine.undo_step(tx)
    assert (u.step_id, u.next_step_id) == (2, 2)
    assert await _state(undo_engine, tx) == {"kv/a": "1"}
    got = await undo_engine.execute_step(tx, 2, "kv.get", {"key": "a"}, dry_run=True)
    assert got.output == {"key": "a", "value": 1}  # a dry run sees the undone state

    d = await undo_engine.redo_step(tx)
    assert (d.step_id, d.next_step_id, d.can_redo) == (2, 3, True)
    d = await undo_engine.redo_step(tx)
    assert (d.step_id, d.next_step_id, d.can_redo) == (3, 4, False)
    assert await _state(undo_engine, tx) == done
    info = await undo_engine.get_transaction(tx)
    assert [(s.step_id, s.arguments, s.output) for s in info.steps if s.live] == live_before
    # The redone outputs are what later references see.
    r = await undo_engine.execute_step(tx, 4, "kv.put", {"key": "c", "value": "${steps.3.value}"})
    assert r.output == {"key": "c", "value": 2}
    await undo_engine.commit(tx)
    reader = (await undo_engine.begin()).transaction_id
    for key, value in (("a", 2), ("b", 2), ("c", 2)):
        seen = await undo_engine.execute_step(reader, 1, "kv.get", {"key": key}, dry_run=True)
        assert seen.output == {"key": key, "value": value}
    verified = await undo_engine.verify_audit(tx)
    assert verified.ok, verified.reason
    kinds = [r.kind for r in await undo_engine.audit_records(tx)]
    assert kinds.count("step.undone") == 2
    assert kinds.count("step.redone") == 2


async def test_redo_is_refused_after_another_step(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    await _put(undo_engine, tx, 2, "a", 2)
    await undo_engine.undo_step(tx)
    await _put(undo_engine, tx, 2, "z", 9)
    before = await trace(undo_engine, tx)
    with pytest.raises(agenttx.RedoRefused) as refused:
        await undo_engine.redo_step(tx)
    assert refused.value.step_id == 2
    assert "send step 3 again" in refused.value.hint
    assert "changed since" in refused.value.hint
    assert refused.value.code == "FAILED_PRECONDITION"
    assert await trace(undo_engine, tx) == before  # a refusal changes nothing
    assert not (await undo_engine.get_transaction(tx)).can_redo


async def test_redo_is_refused_after_a_rollback_or_a_failed_step(
    undo_engine: agenttx.Engine,
) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    await _put(undo_engine, tx, 2, "a", 2)
    await _put(undo_engine, tx, 3, "a", 3)
    await undo_engine.undo_step(tx)
    await undo_engine.rollback(tx, to_step=2)
    with pytest.raises(agenttx.RedoRefused):
        await undo_engine.redo_step(tx)
    await undo_engine.undo_step(tx)  # step 1
    failed = await undo_engine.execute_step(tx, 1, "kv.put", {"key": 5})
    assert failed.status is not StepStatus.SUCCESS
    with pytest.raises(agenttx.RedoRefused, match="changed since"):
        await undo_engine.redo_step(tx)


async def test_undo_of_the_only_step(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    u = await undo_engine.undo_step(tx)
    assert (u.step_id, u.next_step_id, u.transaction_status) == (1, 1, TxStatus.ACTIVE)
    assert await _state(undo_engine, tx) == {}
    info = await undo_engine.get_transaction(tx)
    assert (info.revision_count, info.can_undo, info.can_redo) == (0, False, True)
    with pytest.raises(agenttx.UndoRefused, match="no live step") as nothing:
        await undo_engine.undo_step(tx)
    assert nothing.value.step_id == 0
    await undo_engine.redo_step(tx)
    with pytest.raises(agenttx.RedoRefused, match="no undone step"):
        await undo_engine.redo_step(tx)
    assert (await undo_engine.commit(tx)).steps_committed == 1


async def test_undo_and_redo_across_a_restart(open_engine: Any) -> None:
    first = await open_engine(tools=TOOLS)
    tx = (await first.begin()).transaction_id
    await _put(first, tx, 1, "a", 1)
    await _put(first, tx, 2, "b", 2)
    await first.close()

    second = await open_engine(tools=TOOLS)
    u = await second.undo_step(tx)
    assert (u.step_id, u.next_step_id) == (2, 2)
    await second.close()

    third = await open_engine(tools=TOOLS)
    info = await third.get_transaction(tx)
    assert (info.next_step_id, info.can_redo, info.revision_count) == (2, True, 1)
    d = await third.redo_step(tx)
    assert d.next_step_id == 3
    assert await _state(third, tx) == {"kv/a": "1", "kv/b": "2"}
    assert (await third.commit(tx)).steps_committed == 2


async def test_undo_of_an_outside_step_runs_its_compensation(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    r = await undo_engine.execute_step(tx, 2, "t.validated", {"amount": 4})
    assert r.status is StepStatus.SUCCESS
    u = await undo_engine.undo_step(tx)
    assert (u.compensations_run, u.compensation_errors, u.next_step_id) == (1, [], 2)
    assert CALLS == [("t.validated", 4), ("t.validated#undo", 4)]
    assert not u.can_redo  # an outside effect is not re-applied from a record
    with pytest.raises(agenttx.RedoRefused):
        await undo_engine.redo_step(tx)


async def test_undo_of_a_staged_effect_drops_it(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    staged = await undo_engine.execute_step(
        tx, 1, "effect.stage", {"channel": "email", "payload": {"to": "a@example.com"}}
    )
    assert staged.status is StepStatus.SUCCESS
    u = await undo_engine.undo_step(tx)
    assert u.effects_dropped == 1
    assert not u.can_redo
    await _put(undo_engine, tx, 1, "a", 1)
    c = await undo_engine.commit(tx)
    assert c.effects_queued == 0
    assert await undo_engine.store.list_outbox(tx_id=tx) == []


async def test_undo_of_an_irreversible_step_is_refused(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await undo_engine.execute_step(tx, 1, "t.irreversible", {"to": "bob"})
    before = await trace(undo_engine, tx)
    assert not (await undo_engine.get_transaction(tx)).can_undo
    with pytest.raises(agenttx.UndoRefused, match="irreversible") as refused:
        await undo_engine.undo_step(tx)
    assert refused.value.step_id == 1
    assert "step 2" in refused.value.hint
    assert await trace(undo_engine, tx) == before
    await undo_engine.execute_step(tx, 2, "t.no_rollback", {"n": 1})
    with pytest.raises(agenttx.UndoRefused, match="rollback_not_supported"):
        await undo_engine.undo_step(tx)


async def test_the_revision_counters(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS, max_steps=3)
    tx = (await engine.begin()).transaction_id
    info = await engine.get_transaction(tx)
    assert (info.revision_count, info.max_revisions, info.remaining_revisions) == (0, 3, 3)
    assert (info.can_undo, info.can_redo, info.can_commit, info.can_rollback) == (
        False,
        False,
        True,
        True,
    )
    for n in (1, 2, 3):
        await _put(engine, tx, n, f"k{n}", n)
    info = await engine.get_transaction(tx, history=False)
    assert (info.revision_count, info.remaining_revisions, info.can_undo) == (3, 0, True)
    with pytest.raises(agenttx.StepLimitReached) as full:
        await engine.execute_step(tx, 4, "kv.put", {"key": "x", "value": 1})
    assert full.value.limit == 3
    assert "--max-steps" in str(full.value)
    with pytest.raises(agenttx.StepLimitReached):
        await engine.execute_step(tx, 4, "kv.put", {"key": "x", "value": 1}, dry_run=True)
    await engine.undo_step(tx)
    info = await engine.get_transaction(tx)
    assert (info.revision_count, info.remaining_revisions, info.can_redo) == (2, 1, True)
    listed = (await engine.list_transactions_page()).transactions[0]
    assert (listed.revision_count, listed.can_redo, listed.can_commit) == (2, True, True)
    await engine.commit(tx)
    info = await engine.get_transaction(tx)
    assert (info.remaining_revisions, info.can_undo, info.can_redo) == (0, False, False)
    assert (info.can_commit, info.can_rollback) == (False, False)
    with pytest.raises(agenttx.NotActive):
        await engine.undo_step(tx)
    with pytest.raises(agenttx.NotActive):
        await engine.redo_step(tx)


async def test_undo_and_redo_replay_under_a_request_id(undo_engine: agenttx.Engine) -> None:
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    await _put(undo_engine, tx, 2, "a", 2)
    first = await undo_engine.undo_step(tx, request_id="u-1")
    again = await undo_engine.undo_step(tx, request_id="u-1")  # a retry: not a second undo
    assert again == first
    assert (await undo_engine.get_transaction(tx)).next_step_id == 2
    d = await undo_engine.redo_step(tx, request_id="r-1")
    assert await undo_engine.redo_step(tx, request_id="r-1") == d
    with pytest.raises(agenttx.AlreadyExists):
        await undo_engine.redo_step(tx, request_id="u-1")


async def test_undo_is_refused_while_an_outcome_is_unknown(undo_engine: agenttx.Engine) -> None:
    @agenttx.tool(name="t.unsure", effect="compensatable")
    async def unsure(ctx: agenttx.ToolContext) -> None:
        raise agenttx.UncertainOutcome("the provider timed out")

    undo_engine.registry.register(unsure)
    tx = (await undo_engine.begin()).transaction_id
    await _put(undo_engine, tx, 1, "a", 1)
    r = await undo_engine.execute_step(tx, 2, "t.unsure", {})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    with pytest.raises(agenttx.OutcomeUnknownPending) as refused:
        await undo_engine.undo_step(tx)
    assert refused.value.step_id == 2
    info = await undo_engine.get_transaction(tx)
    assert not info.can_undo
    assert not info.can_commit
    assert info.can_rollback


class _Crash(Exception):
    """The process dying between an undo's two durable phases."""


async def test_an_undo_interrupted_by_a_crash_is_finished_on_restart(open_engine: Any) -> None:
    CALLS.clear()
    first = await open_engine(tools=TOOLS, background=False)
    tx = (await first.begin()).transaction_id
    await _put(first, tx, 1, "a", 1)
    await first.execute_step(tx, 2, "t.validated", {"amount": 4})

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise _Crash

    # The plan (ROLLING_BACK) is durable; the process dies before compensating.
    first.rewinder.compensate = crash  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        await first.undo_step(tx)
    restarted = await open_engine(tools=TOOLS, background=False)
    info = await restarted.get_transaction(tx)
    assert (info.status, info.next_step_id, info.revision_count) == (TxStatus.ACTIVE, 2, 1)
    assert CALLS == [("t.validated", 4), ("t.validated#undo", 4)]
    kinds = [r.kind for r in await restarted.audit_records(tx)]
    assert kinds[-3:] == ["compensation", "rollback", "step.undone"]
    verified = await restarted.verify_audit(tx)
    assert verified.ok, verified.reason


async def test_undo_on_one_engine_and_redo_on_another(open_engine: Any) -> None:
    """Any replica takes any call: the redo stack is in the row, so an undo made by one
    engine is redone by another, and the first catches up before its next call."""
    a = await open_engine(tools=TOOLS)
    b = await open_engine(tools=TOOLS, background=False)
    tx = (await a.begin()).transaction_id
    await _put(a, tx, 1, "a", 1)
    await _put(a, tx, 2, "b", 2)
    await a.undo_step(tx)
    d = await b.redo_step(tx)
    assert d.next_step_id == 3
    r = await a.execute_step(tx, 3, "kv.put", {"key": "c", "value": "${steps.2.value}"})
    assert r.status is StepStatus.SUCCESS, r.clean_hint
    assert r.output == {"key": "c", "value": 2}
    assert (await a.commit(tx)).steps_committed == 3
