"""The client helper never commits lost work, and drives the resume loop for an agent.

A rollback the server triggers rewinds steps that had succeeded. Leaving ``with
client.transaction() as tx:`` before they are redone would commit without them; the helper
rolls back instead and raises ``StepsNotRedone`` naming them. An explicit ``tx.commit()`` still
commits what stands. ``tx.run(agent)`` asks the agent for each call, feeding it the hint, the
constraints and ``next_step_id`` after a rollback. Against a real gRPC server, both stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import AgentTurn, StepCall, StepsNotRedone, TxStatus
from agenttx.client import (
    AgentTxClient,
    AsyncAgentTxClient,
    AsyncTransaction,
    RetryPolicy,
    RollbackTriggered,
    Transaction,
)
from server_process import ServerThread

FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path, url=store_url).start()
    yield s
    s.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[AgentTxClient]:
    with AgentTxClient(server.target, retry=FAST_RETRY, timeout=10) as c:
        yield c


def plan(step: int, learned: bool) -> StepCall | None:
    """Step 4 needs the customer id step 2 stored: with c-404 the server jumps back to step 2,
    rewinding steps 2 and 3 (the dependency graph ties the failure to step 2)."""
    calls = {
        1: StepCall("record.insert", {"table": "customers", "id": "c-1"}),
        2: StepCall("kv.put", {"key": "session/customer", "value": "c-1" if learned else "c-404"}),
        3: StepCall("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": "{}"}),
        4: StepCall(
            "record.insert",
            {
                "table": "invoices",
                "id": "i-1",
                "fields": {"customer": "${steps.2.value}"},
                "references": {"customer": "customers"},
            },
        ),
    }
    return calls.get(step)


def _until_the_rollback(tx: Any) -> RollbackTriggered:
    for step in range(1, 5):
        call = plan(step, learned=False)
        assert call is not None
        try:
            tx.step(call.tool, call.arguments)
        except RollbackTriggered as rb:
            return rb
    raise AssertionError("step 4 should have rolled back")


def test_leaving_the_block_with_rewound_steps_not_redone_rolls_back_and_names_them(
    client: AgentTxClient,
) -> None:
    seen: list[tuple[int, dict[int, str]]] = []

    def forget(tx: Transaction) -> None:
        with tx:
            rb = _until_the_rollback(tx)
            seen.append((rb.next_step_id, tx.to_redo))

    tx = client.transaction(agent_id="forgetful")
    with pytest.raises(StepsNotRedone) as caught:
        forget(tx)
    assert seen == [(2, {2: "kv.put", 3: "fs.write"})]
    error = caught.value
    assert error.steps == {2: "kv.put", 3: "fs.write"}
    assert "2 (kv.put), 3 (fs.write)" in str(error)
    assert "tx.commit()" in str(error)
    assert error.code == "FAILED_PRECONDITION"
    assert tx.status is TxStatus.ROLLED_BACK
    assert client.get_transaction(tx.transaction_id).status is TxStatus.ROLLED_BACK


def test_redoing_the_rewound_steps_commits_all_of_them(client: AgentTxClient) -> None:
    with client.transaction() as tx:
        _until_the_rollback(tx)
        while (call := plan(tx.next_step_id, learned=True)) is not None:
            tx.step(call.tool, call.arguments)
        assert tx.to_redo == {}
    assert tx.status is TxStatus.COMMITTED
    with client.transaction() as reader:  # what was committed, as another agent sees it
        assert reader.step("kv.get", {"key": "session/customer"})["value"] == "c-1"
        assert reader.step("record.get", {"table": "invoices", "id": "i-1"})["id"] == "i-1"


def test_an_explicit_commit_still_commits_what_stands(client: AgentTxClient) -> None:
    with client.transaction() as tx:
        _until_the_rollback(tx)
        done = tx.commit()
    assert done.committed
    assert done.steps_committed == 1
    assert tx.status is TxStatus.COMMITTED


def test_a_rollback_the_caller_asks_for_is_not_owed(client: AgentTxClient) -> None:
    with client.transaction() as tx:
        for i in (1, 2, 3):
            tx.step("kv.put", {"key": f"k{i}", "value": i})
        tx.rollback(to_step=2, reason="re-plan")
        assert tx.to_redo == {}
        assert tx.outputs == {1: {"key": "k1", "value": 1}}
    assert tx.status is TxStatus.COMMITTED


def test_run_drives_the_resume_loop_with_the_hint_and_where_to_resume(
    client: AgentTxClient,
) -> None:
    turns: list[AgentTurn] = []

    def agent(turn: AgentTurn) -> StepCall | None:
        turns.append(turn)
        learned = any("c-404" in c for c in turn.constraints)
        return plan(turn.next_step_id, learned)

    with client.transaction(agent_id="driven") as tx:
        outputs = tx.run(agent)
    assert tx.status is TxStatus.COMMITTED
    assert sorted(outputs) == [1, 2, 3, 4]
    assert outputs[2] == {"key": "session/customer", "value": "c-1"}
    assert outputs[3] == {"path": "drafts/c-1.json", "bytes": 2}
    [after] = [t for t in turns if t.error is not None]
    assert after.next_step_id == 2
    assert "c-404" in after.clean_hint
    assert after.constraints == (after.clean_hint,)
    assert after.to_redo == {2: "kv.put", 3: "fs.write"}
    assert sorted(after.outputs) == [1]
    assert after.calls == 4
    assert [t.next_step_id for t in turns] == [1, 2, 3, 4, 2, 3, 4, 5]


def test_run_accepts_tuples_and_stops_a_looping_agent(client: AgentTxClient) -> None:
    with client.transaction() as tx:
        assert tx.run(lambda turn: ("kv.put", {"key": "a"}) if turn.calls < 2 else None) == {
            1: {"key": "a", "value": None},
            2: {"key": "a", "value": None},
        }
    assert tx.status is TxStatus.COMMITTED
    with (
        pytest.raises(agenttx.FailedPrecondition, match="made 3 calls"),
        client.transaction() as t2,
    ):
        t2.run(lambda turn: ("kv.put", {"key": "b"}), max_calls=3)
    assert t2.status is TxStatus.ROLLED_BACK
    with (
        pytest.raises(agenttx.InvalidArgument, match="return StepCall"),
        client.transaction() as t3,
    ):
        t3.run(lambda turn: "kv.put")  # type: ignore[arg-type, return-value]
    assert t3.status is TxStatus.ROLLED_BACK


async def test_the_async_helper_refuses_lost_work_and_runs_async_agents(
    server: ServerThread,
) -> None:
    async with AsyncAgentTxClient(server.target, retry=FAST_RETRY) as c:

        async def forget(tx: AsyncTransaction) -> None:
            async with tx:
                for step in range(1, 5):
                    call = plan(step, learned=False)
                    assert call is not None
                    try:
                        await tx.step(call.tool, call.arguments)
                    except RollbackTriggered:
                        return

        tx = c.transaction()
        with pytest.raises(StepsNotRedone) as caught:
            await forget(tx)
        assert caught.value.steps == {2: "kv.put", 3: "fs.write"}
        assert tx.status is TxStatus.ROLLED_BACK

        async def agent(turn: AgentTurn) -> StepCall | None:
            return plan(turn.next_step_id, any("c-404" in c for c in turn.constraints))

        async with c.transaction() as driven:
            outputs = await driven.run(agent)
        assert driven.status is TxStatus.COMMITTED
        assert outputs[2] == {"key": "session/customer", "value": "c-1"}
