"""A request id keeps a call's definite outcome, never a transient one: a refusal that says
nothing final (store full, unavailable, deadline, a revision conflict, a store failure or a
shutdown) or a cancellation is not stored, so the same call with the same ``request_id`` runs
again and its definite reply is then kept and replayed. (A genuinely full disk:
``test_faults.py``.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agenttx
from agenttx import errors
from agenttx.core.requests import Request
from agenttx.types import BeginResult, StepStatus, Strategy, TxStatus
from waiting import eventually

TRANSIENT = [
    errors.StoreFull("the store is full; free disk space and send the same call again"),
    errors.ServerUnavailable("no server answered", attempts=3),
    errors.DeadlineExceeded("transaction tx is busy with another call; retry later"),
    errors.RevisionConflict("another writer moved the transaction"),
    errors.InternalError("store is closed"),  # what a call meets while the server shuts down
]


def _begin_reply(rid: str) -> BeginResult:
    return BeginResult(f"tx-{rid}", 1, TxStatus.ACTIVE, 1)


@pytest.mark.parametrize("refusal", TRANSIENT, ids=lambda e: type(e).__name__)
async def test_a_transient_refusal_is_never_the_request_ids_reply(
    engine: agenttx.Engine, refusal: errors.AgentTxError
) -> None:
    assert refusal.transient
    calls: list[Request | None] = []

    async def refused(req: Request | None) -> BeginResult:
        calls.append(req)
        raise refusal

    async def succeeds(req: Request | None) -> BeginResult:
        calls.append(req)
        return _begin_reply("r")

    async def begin(call: Any) -> BeginResult:  # as begin runs: looked up before the call
        return await engine.requests.run(
            "r", "begin", {"a": 1}, BeginResult, call, lookup_first=True
        )

    with pytest.raises(type(refusal)):
        await begin(refused)
    assert await engine.store.get_request("default", "r") is None
    # The same call again runs (the refusal was not its outcome), and its reply is kept.
    assert await begin(succeeds) == _begin_reply("r")
    assert await begin(refused) == _begin_reply("r")
    assert len(calls) == 2  # the replay ran nothing


async def test_a_cancelled_call_is_never_the_request_ids_reply(engine: agenttx.Engine) -> None:
    async def cancelled(req: Request | None) -> BeginResult:
        raise asyncio.CancelledError

    async def succeeds(req: Request | None) -> BeginResult:
        return _begin_reply("c")

    with pytest.raises(asyncio.CancelledError):
        await engine.requests.run("c", "begin", {}, BeginResult, cancelled)
    assert await engine.store.get_request("default", "c") is None
    assert await engine.requests.run("c", "begin", {}, BeginResult, succeeds) == _begin_reply("c")


async def test_a_definite_refusal_is_still_kept_and_replayed(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.WrongStep):
        await engine.execute_step(tx, 4, "kv.put", {"key": "a"}, request_id="w")
    stored = await engine.store.get_request("default", "w")
    assert stored is not None
    assert "WrongStep" in stored.reply_json
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    with pytest.raises(agenttx.WrongStep, match="expects step 1"):  # replayed as it was said
        await engine.execute_step(tx, 4, "kv.put", {"key": "a"}, request_id="w")


@agenttx.tool(name="t.wait_once", effect="compensatable", timeout=30)
async def wait_once(ctx: agenttx.ToolContext, tag: str) -> dict[str, str]:
    """Waits (to be cancelled) the first time a tag is seen, answers at once after."""
    if tag not in SEEN:
        SEEN.add(tag)
        await asyncio.sleep(30)
    return {"tag": tag}


@wait_once.undo
async def unwait_once(ctx: Any, tag: str) -> None:
    return None


SEEN: set[str] = set()


async def test_a_step_its_caller_cancelled_runs_again_under_the_same_request_id(
    open_engine: Any,
) -> None:
    """The cancelled step was undone and its hint says "send the step again": sent again with
    the same request_id it runs (it was replayed as cancelled, for good)."""
    engine = await open_engine(tools=[wait_once])
    tx = (await engine.begin()).transaction_id
    args = {"tag": f"{tx}-a"}
    step = asyncio.ensure_future(engine.execute_step(tx, 1, "t.wait_once", args, request_id="s"))
    await eventually(lambda: engine.cancel_step(tx, 1), "the tool started", interval=0.01)
    first = await asyncio.wait_for(step, 10)
    assert first.status is StepStatus.ROLLBACK_TRIGGERED
    assert "cancelled by its caller" in first.clean_hint
    assert (first.strategy, first.next_step_id) == (Strategy.RETRY, 1)

    again = await engine.execute_step(tx, 1, "t.wait_once", args, request_id="s")
    assert again.status is StepStatus.SUCCESS, again.clean_hint
    assert again.output == args
    # Now the outcome is definite: kept and replayed.
    assert await engine.execute_step(tx, 1, "t.wait_once", args, request_id="s") == again
    assert (await engine.get_transaction(tx)).next_step_id == 2
