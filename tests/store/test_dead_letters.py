"""Dead letters you can act on, from every surface, on every store: ListEffects and
RetryEffect over gRPC, the sync and async clients, ``agenttx effects list|retry``, and the
outbox gauges — driven by a real HTTP receiver that refuses (400) and then accepts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.api.metrics import Metrics
from agenttx.cli import main
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from http_receiver import Receiver, http_receiver

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with http_receiver() as r:
        yield r


async def cli(*args: str) -> Result:
    """The command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


async def _committed_webhook(engine: agenttx.Engine, url: str, key: str) -> str:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(
        tx, 1, "webhook.post", {"url": url, "json": {"k": key}, "idempotency_key": key}
    )
    assert r.status.value == "SUCCESS", r.clean_hint
    await engine.commit(tx)
    return tx


async def test_a_dead_letter_is_listed_everywhere_and_retried_to_delivery(
    serve: Callable[..., Awaitable[Served]], hooks: Receiver
) -> None:
    hooks.script["/bad"] = [400]
    s = await serve(webhook_allow=[hooks.allow])
    ok_tx = await _committed_webhook(s.engine, hooks.url("/ok"), "fine")
    dead_tx = await _committed_webhook(s.engine, hooks.url("/bad"), "refused")

    page = await s.engine.list_effects(statuses=["dead"])
    (dead,) = page.effects
    assert (dead.transaction_id, dead.status, dead.attempts) == (dead_tx, "dead", 1)
    assert dead.last_error == f"HTTP 400 from {hooks.url('/bad')}: status 400"
    assert json.loads(dead.payload_json)["url"] == hooks.url("/bad")
    assert page.next_after_id == 0

    # The same through the wire: the async client, the sync client, the raw stub.
    assert (await s.client.list_effects(statuses=["dead"])).effects == [dead]
    everything = [e async for e in s.client.iter_effects()]
    assert [(e.transaction_id, e.status) for e in everything] == [
        (ok_tx, "delivered"),
        (dead_tx, "dead"),
    ]

    def sync_list() -> list[Any]:
        with AgentTxClient(s.target, retry=RetryPolicy(max_attempts=1), timeout=10) as c:
            return list(c.iter_effects(transaction_id=dead_tx))

    assert await asyncio.to_thread(sync_list) == [dead]
    first = await s.stub.ListEffects(pb.ListEffectsRequest(page_size=1))
    assert [e.transaction_id for e in first.effects] == [ok_tx]
    assert first.next_after_id == first.effects[0].effect_id

    listed = await cli("effects", "list", "--dead", "--server", s.target)
    assert listed.exit_code == 0, listed.output
    assert dead_tx in listed.output
    assert "HTTP 400" in listed.output
    assert ok_tx not in listed.output
    as_json = await cli("effects", "list", "--tx", dead_tx, "--json", "--server", s.target)
    (row,) = json.loads(as_json.output)
    assert (row["effect_id"], row["status"], row["payload"]["json"]) == (
        dead.effect_id,
        "dead",
        {"k": "refused"},
    )

    # Refused again: still dead, with the new error, and exit status 1.
    again = await cli("effects", "retry", str(dead.effect_id), "--server", s.target)
    assert again.exit_code == 1, again.output
    assert "dead" in again.output
    assert "HTTP 400" in again.output
    # The receiver is fixed: the retry delivers, with the same idempotency key.
    hooks.script["/bad"] = [200]
    fixed = await cli("effects", "retry", str(dead.effect_id), "--server", s.target)
    assert fixed.exit_code == 0, fixed.output
    assert "delivered" in fixed.output
    keys = [r.headers["idempotency-key"] for r in hooks.requests("/bad")]
    assert keys == ["refused"] * 3
    assert (await s.engine.list_effects(statuses=["dead"])).effects == []
    # Every attempt is in the transaction's audit chain.
    outcomes = [
        json.loads(r.body)["data"]["outcome"]
        for r in await s.engine.audit_records(dead_tx)
        if r.kind == "delivery"
    ]
    assert outcomes == ["dead", "dead", "delivered"]


async def test_retry_refuses_what_is_not_a_dead_letter(
    serve: Callable[..., Awaitable[Served]], hooks: Receiver
) -> None:
    s = await serve(webhook_allow=[hooks.allow])
    await _committed_webhook(s.engine, hooks.url("/ok"), "fine")
    (delivered,) = (await s.engine.list_effects()).effects
    with pytest.raises(agenttx.FailedPrecondition, match="is delivered, not dead"):
        await s.client.retry_effect(delivered.effect_id)
    with pytest.raises(agenttx.NotFound, match="no effect 999"):
        await s.client.retry_effect(999)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await s.stub.RetryEffect(pb.RetryEffectRequest(effect_id=0))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(agenttx.InvalidArgument, match="unknown effect status 'lost'"):
        await s.client.list_effects(statuses=["lost"])
    with pytest.raises(agenttx.InvalidArgument, match="over the limit of 1000"):
        await s.client.list_effects(page_size=5000)
    missing = await cli("effects", "retry", "999", "--server", s.target)
    assert missing.exit_code == 1
    assert "NOT_FOUND" in missing.output


async def test_the_outbox_gauges_count_pending_dead_and_delivered(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/bad"] = [400]
    hooks.script["/later"] = [503]
    engine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    for path in ("/ok", "/ok", "/bad", "/later"):
        await _committed_webhook(engine, hooks.url(path), path + str(clock()))
        clock.advance(1)
    metrics = Metrics("test")
    await metrics.refresh_outbox(engine.store)
    text = metrics.exposition().decode()
    assert 'agenttx_outbox_effects{status="delivered"} 2.0' in text
    assert 'agenttx_outbox_effects{status="dead"} 1.0' in text
    assert 'agenttx_outbox_effects{status="pending"} 1.0' in text
    assert 'agenttx_outbox_effects{status="delivering"} 0.0' in text


async def test_each_tenant_sees_and_retries_only_its_own_effects(
    open_engine: Any, hooks: Receiver, clock: Any
) -> None:
    hooks.script["/bad"] = [400]
    mine = await open_engine(webhook_allow=[hooks.allow], clock=clock, background=False)
    theirs = await open_engine(
        webhook_allow=[hooks.allow], clock=clock, background=False, tenant="acme"
    )
    await _committed_webhook(mine, hooks.url("/bad"), "mine")
    await _committed_webhook(theirs, hooks.url("/bad"), "theirs")
    (own,) = (await mine.list_effects()).effects
    (other,) = (await theirs.list_effects(statuses=["dead"])).effects
    assert (own.idempotency_key, other.idempotency_key) == ("mine", "theirs")
    with pytest.raises(agenttx.NotFound):  # another tenant's effect does not exist here
        await mine.retry_effect(other.effect_id)
    assert (await theirs.retry_effect(other.effect_id)).status == "dead"
