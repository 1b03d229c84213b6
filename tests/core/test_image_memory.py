"""The cached image of an open transaction holds each fact once (``core/runtime.py``): the
values every new body holds alike are shared, and the write set is the step rows' writes.
These tests show that what the image answers is what a fresh load from the store answers, and
that no engine path edits a shared value in place (which would change every transaction)."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, TxStatus
from agenttx.core.controller import ControllerState
from agenttx.core.runtime import FRESH_CONTROLLER, NO_FIELDS, NO_ITEMS, TxRuntime, policy_body
from agenttx.types import RollbackPolicy

pytestmark = pytest.mark.stores("sqlite")


@agenttx.tool(name="test.flaky", effect="state")
async def flaky(ctx: agenttx.ToolContext, key: str) -> str:
    """Writes ``key``, then fails as a transient outage would (the controller retries it)."""
    await ctx.state.put(key, "half")
    raise ConnectionError("connection refused by the ledger service")


def write_set(rt: TxRuntime) -> dict[str, Any]:
    return {
        "stacks": rt.stacks,
        "base": {key: rt.base_version(key) for key in rt.stacks},
        "steps": sorted(rt.steps),
        "writes": rt.final_writes(),
    }


async def test_a_rewind_leaves_the_write_set_a_fresh_load_would_have(
    engine: agenttx.Engine,
) -> None:
    seed = (await engine.begin()).transaction_id
    await engine.execute_step(seed, 1, "kv.put", {"key": "a", "value": 0})
    await engine.commit(seed)  # "a" has a committed version now, "b" none
    tx = (await engine.begin(isolation="read_committed")).transaction_id
    for step, (key, value) in enumerate([("a", 1), ("b", 2), ("a", 3), ("b", 4)], start=1):
        r = await engine.execute_step(tx, step, "kv.put", {"key": key, "value": value})
        assert r.status is StepStatus.SUCCESS
    await engine.rollback(tx, to_step=3)  # steps 3 and 4 undone: a = 1, b = 2
    cached = write_set(engine.images.cache[tx])
    fresh = write_set(await engine.images.load(tx))
    assert cached == fresh
    assert cached["writes"] == {"kv/a": "1", "kv/b": "2"}
    assert cached["base"] == {"kv/a": 1, "kv/b": 0}  # the version each had when first written
    await engine.rollback(tx, to_step=1)  # everything undone: no key left
    assert write_set(engine.images.cache[tx])["stacks"] == {}
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 5})
    assert (await engine.commit(tx)).transaction_status is TxStatus.COMMITTED
    check = (await engine.begin()).transaction_id
    read = await engine.execute_step(check, 1, "kv.get", {"key": "a"})
    assert read.output["value"] == 5


async def test_no_engine_path_edits_the_values_new_bodies_share(engine: agenttx.Engine) -> None:
    first = (await engine.begin()).transaction_id
    second = (await engine.begin(labels=["nightly"])).transaction_id
    a, b = engine.images.cache[first].body, engine.images.cache[second].body
    assert a["controller"] is b["controller"] is FRESH_CONTROLLER
    assert a["policy"] is b["policy"]
    assert b["labels"] == ["nightly"]
    assert a["labels"] is NO_ITEMS

    # Every kind of change a body goes through: steps, a retried failure (controller counters,
    # attempts, constraints), a rewind, an undo, a commit, a whole rollback.
    await engine.execute_step(first, 1, "kv.put", {"key": "k", "value": 1})
    failed = await engine.execute_step(first, 2, "test.flaky", {"key": "half"})
    assert failed.status is StepStatus.ROLLBACK_TRIGGERED
    await engine.execute_step(first, 2, "kv.put", {"key": "j", "value": 2})
    await engine.undo_step(first)
    await engine.rollback(first, to_step=1)
    await engine.execute_step(first, 1, "kv.put", {"key": "k", "value": 3})
    await engine.commit(first)
    await engine.execute_step(second, 1, "test.flaky", {"key": "x"})
    await engine.rollback(second, reason="the test is done with it")

    assert ControllerState().to_dict() == FRESH_CONTROLLER
    assert NO_ITEMS == []
    assert NO_FIELDS == {}
    policy = RollbackPolicy()
    assert policy_body(policy) == policy.to_dict()
