"""The transaction lifecycle as a user sees it: begin, steps in order, commit, history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, Strategy, TxStatus
from agenttx.core.states import TRANSITIONS, check_transition
from waiting import eventually


async def test_begin_step_commit_publishes_writes(engine: agenttx.Engine) -> None:
    b = await engine.begin(agent_id="agent-1", metadata={"task": "demo"})
    assert b.next_step_id == 1
    r = await engine.execute_step(b.transaction_id, 1, "kv.put", {"key": "a", "value": 1})
    assert r.status is StepStatus.SUCCESS
    assert r.output == {"key": "a", "value": 1}
    assert r.output_json == '{"key":"a","value":1}'
    assert r.next_step_id == 2
    c = await engine.commit(b.transaction_id)
    assert c.committed
    assert c.steps_committed == 1

    reader = await engine.begin()
    got = await engine.execute_step(reader.transaction_id, 1, "kv.get", {"key": "a"})
    assert got.output == {"key": "a", "value": 1}


async def test_arguments_may_be_a_json_string(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.put", '{"key": "s", "value": [1, 2]}')
    assert r.output == {"key": "s", "value": [1, 2]}


async def test_wrong_step_id_names_the_expected_one(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.WrongStep, match="expects step 1") as info:
        await engine.execute_step(tx, 2, "kv.put", {"key": "a"})
    assert info.value.expected == 1
    assert info.value.code == "FAILED_PRECONDITION"


async def test_committed_transaction_takes_no_more_steps(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await engine.commit(tx)
    with pytest.raises(agenttx.NotActive, match="COMMITTED"):
        await engine.execute_step(tx, 2, "kv.put", {"key": "b", "value": 1})
    with pytest.raises(agenttx.NotActive):
        await engine.commit(tx)
    with pytest.raises(agenttx.NotActive):
        await engine.rollback(tx)


async def test_unknown_transaction_is_not_found(engine: agenttx.Engine) -> None:
    with pytest.raises(agenttx.NotFound):
        await engine.execute_step("tx_nope", 1, "kv.put", {"key": "a"})
    with pytest.raises(agenttx.NotFound):
        await engine.get_transaction("tx_nope")
    with pytest.raises(agenttx.InvalidArgument, match="transaction_id is required"):
        await engine.commit("")


async def test_every_durable_change_bumps_the_revision(engine: agenttx.Engine) -> None:
    b = await engine.begin()
    revisions = [b.revision]
    for i in range(1, 4):
        r = await engine.execute_step(b.transaction_id, i, "kv.put", {"key": f"k{i}", "value": i})
        revisions.append(r.revision)
    c = await engine.commit(b.transaction_id)
    revisions.append(c.revision)
    assert revisions == list(range(revisions[0], revisions[0] + 5))


async def test_history_stays_readable_after_the_end(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(agent_id="hist")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, raw_context="why 1")
    await engine.execute_step(tx, 2, "kv.get", {"key": "missing"})  # fails, retried/rewound
    await engine.rollback(tx)
    info = await engine.get_transaction(tx)
    assert info.status is TxStatus.ROLLED_BACK
    assert info.agent_id == "hist"
    assert [s.status for s in info.steps] == ["SUCCESS", "FAILED"]
    assert not any(s.live for s in info.steps)
    listed = await engine.list_transactions(statuses=["ROLLED_BACK"])
    assert [t.transaction_id for t in listed] == [tx]


async def test_context_log_keeps_raw_context_of_live_steps(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, raw_context="first")
    await engine.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2}, raw_context="second")
    await engine.rollback(tx, to_step=2)
    info = await engine.get_transaction(tx)
    assert [(c.step_id, c.tool_name, c.raw_context) for c in info.context] == [
        (1, "kv.put", "first")
    ]
    assert info.next_step_id == 2


async def test_steps_of_one_transaction_run_one_at_a_time(open_engine: Any) -> None:
    order: list[str] = []
    gate = asyncio.Event()

    @agenttx.tool(name="slow.mark", effect="read")
    async def slow_mark(ctx: agenttx.ToolContext, label: str) -> dict[str, str]:
        order.append(f"start {label}")
        await gate.wait()
        order.append(f"end {label}")
        return {"label": label}

    engine = await open_engine(tools=[slow_mark])
    tx = (await engine.begin()).transaction_id
    first = asyncio.create_task(engine.execute_step(tx, 1, "slow.mark", {"label": "a"}))
    # Wait until step 1's tool runs (on a loaded machine PostgreSQL may take longer than a
    # fixed sleep, or 500 tries, to get it there), so the second call surely arrives while it
    # holds the lock.
    await eventually(lambda: order, "step 1's tool runs", interval=0.01)
    # The second call for the same transaction waits for the first, then sees step 2 expected.
    second = asyncio.create_task(engine.execute_step(tx, 2, "slow.mark", {"label": "b"}))
    await asyncio.sleep(0.01)
    assert order == ["start a"]
    gate.set()
    assert (await first).status is StepStatus.SUCCESS
    assert (await second).status is StepStatus.SUCCESS
    assert order == ["start a", "end a", "start b", "end b"]


async def test_other_transactions_run_concurrently(open_engine: Any) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @agenttx.tool(name="wait.here", effect="read")
    async def wait_here(ctx: agenttx.ToolContext) -> None:
        started.set()
        await release.wait()

    engine = await open_engine(tools=[wait_here])
    blocked = (await engine.begin()).transaction_id
    free = (await engine.begin()).transaction_id
    task = asyncio.create_task(engine.execute_step(blocked, 1, "wait.here", {}))
    await started.wait()
    r = await asyncio.wait_for(engine.execute_step(free, 1, "kv.put", {"key": "x"}), 5)
    assert r.status is StepStatus.SUCCESS
    release.set()
    await task


def test_transition_table_rejects_leaving_a_terminal_status() -> None:
    for terminal in (TxStatus.COMMITTED, TxStatus.ROLLED_BACK, TxStatus.FAILED):
        assert TRANSITIONS[terminal] == frozenset()
        with pytest.raises(agenttx.FailedPrecondition, match="illegal transaction state"):
            check_transition(terminal, TxStatus.ACTIVE)
    check_transition(TxStatus.ACTIVE, TxStatus.EXECUTING)


async def test_isolation_must_be_known(engine: agenttx.Engine) -> None:
    with pytest.raises(agenttx.InvalidArgument, match="unknown isolation"):
        await engine.begin(isolation="chaos")


async def test_rollback_strategy_fields_on_a_failure(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.get", {"key": "nope"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.clean_hint.startswith("Hint: ")
    assert r.strategy in (Strategy.LOCAL_BACKTRACK, Strategy.RETRY)
    assert r.next_step_id == 1
    assert r.constraints == [r.clean_hint]
