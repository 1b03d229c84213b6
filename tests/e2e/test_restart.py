"""Durability: an open transaction continues after the engine is closed and reopened, with its
graph, controller counters, constraints, write set and staged effects intact; the idle
reaper aborts forgotten transactions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agenttx
from agenttx import StepStatus, Strategy, TxStatus

FK_ARGS = {
    "table": "invoices",
    "id": "inv-1",
    "fields": {"customer_id": "${steps.2.value}"},
    "references": {"customer_id": "customers"},
}


async def test_open_transaction_resumes_after_reopen(open_engine: Any, tmp_path: Path) -> None:
    first = await open_engine()
    tx = (await first.begin(agent_id="resume")).transaction_id
    await first.execute_step(tx, 1, "record.insert", {"table": "customers", "id": "c-1"})
    await first.execute_step(tx, 2, "kv.put", {"key": "session/customer", "value": "c-404"})
    await first.execute_step(tx, 3, "effect.stage", {"channel": "email", "idempotency_key": "e"})
    before = await first.get_transaction(tx)
    await first.close()

    second = await open_engine()
    after = await second.get_transaction(tx)
    assert after.edges == before.edges  # the graph is rebuilt exactly
    assert after.next_step_id == 4
    # The root-cause search works on the rebuilt graph: a jump back to step 2.
    r = await second.execute_step(tx, 4, "record.insert", FK_ARGS)
    assert r.strategy is Strategy.DEPENDENCY_JUMP
    assert r.next_step_id == 2
    await second.close()

    third = await open_engine()
    info = await third.get_transaction(tx)
    assert info.constraints == [r.clean_hint]  # constraints survive
    await third.execute_step(tx, 2, "kv.put", {"key": "session/customer", "value": "c-1"})
    await third.execute_step(tx, 3, "effect.stage", {"channel": "email", "idempotency_key": "e"})
    assert (await third.execute_step(tx, 4, "record.insert", FK_ARGS)).status is StepStatus.SUCCESS
    c = await third.commit(tx)
    assert c.steps_committed == 4
    assert c.effects_dispatched == 1


async def test_controller_counters_are_durable(open_engine: Any) -> None:
    # With max_local_depth 1 and no resets, the second failure of step 2 aborts; the first
    # failure must be remembered across a restart for that to happen. (Its inputs are all its
    # own, so the first failure is retried in place of the local backtrack, and counted.)
    policy = {"max_local_depth": 1, "max_global_resets": 0}

    @agenttx.tool(name="always.fails", effect="read")
    async def always_fails(ctx: agenttx.ToolContext) -> None:
        raise RuntimeError("LedgerMismatchError: totals differ")

    first = await open_engine(tools=[always_fails])
    tx = (await first.begin(policy=policy)).transaction_id
    await first.execute_step(tx, 1, "kv.put", {"key": "a"})
    r = await first.execute_step(tx, 2, "always.fails", {})
    assert r.strategy is Strategy.RETRY
    assert r.next_step_id == 2
    await first.close()

    second = await open_engine(tools=[always_fails])
    r = await second.execute_step(tx, 2, "always.fails", {})
    assert r.status is StepStatus.FAILED
    assert "exhausted" in r.abort_reason


async def test_idle_reaper_aborts_forgotten_transactions(open_engine: Any, clock: Any) -> None:
    engine = await open_engine(clock=clock, tx_idle_timeout_s=60, background=False)
    idle = (await engine.begin()).transaction_id
    await engine.execute_step(idle, 1, "fs.write", {"path": "left.txt", "contents": "x"})
    busy = (await engine.begin()).transaction_id
    clock.advance(45)
    await engine.execute_step(busy, 1, "kv.put", {"key": "b"})
    clock.advance(30)
    assert await engine.reap_idle() == 1
    info = await engine.get_transaction(idle)
    assert info.status is TxStatus.ROLLED_BACK
    assert "idle" in info.abort_reason
    assert (await engine.get_transaction(busy)).status is TxStatus.ACTIVE


async def test_reaper_can_be_turned_off(open_engine: Any, clock: Any) -> None:
    engine = await open_engine(clock=clock, tx_idle_timeout_s=0, background=False)
    tx = (await engine.begin()).transaction_id
    clock.advance(10**6)
    assert await engine.reap_idle() == 0
    assert (await engine.get_transaction(tx)).status is TxStatus.ACTIVE


async def test_old_versions_are_pruned_but_open_snapshots_keep_theirs(open_engine: Any) -> None:
    engine = await open_engine(background=False)

    async def write(value: int) -> None:
        tx = (await engine.begin()).transaction_id
        await engine.execute_step(tx, 1, "kv.put", {"key": "p", "value": value})
        await engine.commit(tx)

    await write(1)
    reader = (await engine.begin()).transaction_id  # its snapshot sees value 1
    await write(2)
    await write(3)
    removed = await engine.prune_versions()
    assert removed == 0  # version 1 is what the open reader sees; 2 is newer than it
    r = await engine.execute_step(reader, 1, "kv.get", {"key": "p"})
    assert r.output == {"key": "p", "value": 1}
    await engine.commit(reader)
    assert await engine.prune_versions() == 2  # now only the newest version is needed
    fresh = (await engine.begin()).transaction_id
    assert (await engine.execute_step(fresh, 1, "kv.get", {"key": "p"})).output["value"] == 3


async def test_state_edges_of_the_graph_survive_a_restart(open_engine: Any) -> None:
    first = await open_engine()
    tx = (await first.begin()).transaction_id
    await first.execute_step(tx, 1, "kv.put", {"key": "shared", "value": "v"})
    await first.execute_step(tx, 2, "kv.get", {"key": "shared"})
    before = (await first.get_transaction(tx)).edges
    assert (1, 2, "kv/shared") in before
    await first.close()
    after = (await (await open_engine()).get_transaction(tx)).edges
    assert after == before
