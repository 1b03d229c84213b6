"""Listings newest first and within a time window (ListTransactionsRequest fields 8-10, the
HTTP API's ``newest_first``, ``created_after``, ``created_before``), paged without repeats or
gaps, on both stores; and what the controller decided for each failed attempt (the
GetTransaction fields the dashboard draws: edge kinds and decisions)."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.errors import InvalidArgument


async def _ids(engine: Any, **kwargs: Any) -> list[str]:
    found: list[str] = []
    token = ""
    while True:
        page = await engine.list_transactions_page(page_size=2, page_token=token, **kwargs)
        found += [t.transaction_id for t in page.transactions]
        token = page.next_page_token
        if not token:
            return found


async def test_newest_first_pages_through_every_transaction_in_reverse(
    open_engine: Any, clock: Any
) -> None:
    engine = await open_engine(clock=clock)
    made = []
    for _ in range(5):
        made.append((await engine.begin(agent_id="order")).transaction_id)
        clock.advance(1)
    assert await _ids(engine, agent_id="order") == made
    assert await _ids(engine, agent_id="order", newest_first=True) == made[::-1]


async def test_a_time_window_keeps_the_transactions_created_in_it(
    open_engine: Any, clock: Any
) -> None:
    engine = await open_engine(clock=clock)
    start = clock()
    made = []
    for _ in range(4):
        made.append((await engine.begin(agent_id="window")).transaction_id)
        clock.advance(10)
    window = {"created_after": start + 10, "created_before": start + 30}
    assert await _ids(engine, agent_id="window", **window) == made[1:3]
    assert await _ids(engine, agent_id="window", newest_first=True, **window) == made[2:0:-1]
    with pytest.raises(InvalidArgument, match="finite"):
        await engine.list_transactions_page(created_after=float("nan"))


async def test_each_failed_attempt_records_the_controllers_decision(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "copy", "value": "${steps.1.value}"})
    failed = await engine.execute_step(
        tx, 3, "record.get", {"table": "users", "id": "${steps.1.value.id}"}
    )
    assert failed.rollback_to_step == 1
    info = await engine.get_transaction(tx)
    [bad] = [s for s in info.steps if s.status == "FAILED"]
    assert (bad.strategy, bad.rollback_to_step, bad.root_cause_step, bad.hint_key) == (
        "DEPENDENCY_JUMP",
        1,
        1,
        "id",
    )
    assert all(s.strategy == "" for s in info.steps if s.status == "SUCCESS")
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "copy", "value": "${steps.1.value}"})
    info = await engine.get_transaction(tx)
    assert info.edges == [(1, 2, "value")]
    assert info.edge_kinds == ["explicit"]
