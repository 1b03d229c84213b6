"""Request idempotency: a retried mutating call with the same request_id returns the stored
reply — in particular an ExecuteStep whose reply was lost."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import StepStatus


async def test_retried_step_returns_the_stored_reply(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    first = await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r1")
    again = await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r1")
    assert again == first
    info = await engine.get_transaction(tx)
    assert info.next_step_id == 2
    assert len(info.steps) == 1  # it ran once


async def test_same_request_id_with_another_payload_is_refused(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r1")
    with pytest.raises(agenttx.AlreadyExists, match="different execute_step request"):
        await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 2}, request_id="r1")
    with pytest.raises(agenttx.AlreadyExists):
        await engine.commit(tx, request_id="r1")


async def test_a_failed_step_replays_its_rollback_reply(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    first = await engine.execute_step(tx, 1, "kv.get", {"key": "nope"}, request_id="g")
    assert first.status is StepStatus.ROLLBACK_TRIGGERED
    again = await engine.execute_step(tx, 1, "kv.get", {"key": "nope"}, request_id="g")
    assert again == first
    assert len((await engine.get_transaction(tx)).steps) == 1


async def test_begin_commit_and_rollback_are_idempotent(engine: agenttx.Engine) -> None:
    b1 = await engine.begin(agent_id="x", request_id="b")
    b2 = await engine.begin(agent_id="x", request_id="b")
    assert b1 == b2
    tx = b1.transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    c1 = await engine.commit(tx, request_id="c")
    c2 = await engine.commit(tx, request_id="c")
    assert c1 == c2
    other = (await engine.begin()).transaction_id
    r1 = await engine.rollback(other, request_id="rb")
    r2 = await engine.rollback(other, request_id="rb")
    assert r1 == r2


async def test_a_protocol_error_is_replayed_too(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.WrongStep):
        await engine.execute_step(tx, 5, "kv.put", {"key": "a"}, request_id="w")
    with pytest.raises(agenttx.WrongStep, match="expects step 1"):
        await engine.execute_step(tx, 5, "kv.put", {"key": "a"}, request_id="w")


async def test_reply_lost_in_a_crash_is_rebuilt_from_the_step_row(open_engine: Any) -> None:
    engine = await open_engine()
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 7}, request_id="lost")
    # Simulate a crash after the step became durable but before its reply was stored.
    await engine.store.prune_requests(older_than=10**12)
    await engine.close()
    again = await (await open_engine()).execute_step(
        tx, 1, "kv.put", {"key": "a", "value": 7}, request_id="lost"
    )
    assert again.status is StepStatus.SUCCESS
    assert again.output == {"key": "a", "value": 7}
    assert again.next_step_id == 2


async def test_request_ids_are_size_checked(engine: agenttx.Engine) -> None:
    with pytest.raises(agenttx.InvalidArgument, match="request_id exceeds"):
        await engine.begin(request_id="x" * 300)
