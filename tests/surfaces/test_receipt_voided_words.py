"""A ``voided`` receipt in the words a person or an agent reads — ``agenttx tx show``'s lines,
MCP ``get_transaction``'s text — and as its expiry changes it (gRPC and both clients), and
``wait_for_approval`` ending with the voided reason. On every store; the engine's clock is a
fake one moved by hand, which a subprocess server cannot share. What every surface shows of a
voided receipt (its status and revision in ``/v1`` JSON, what the dashboard's approve screen
reads, and the SNAPSHOT_MISMATCH its approval or refusal gets, with the next call) is the
conformance table's (``cases.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result
from mcp import Client

import agenttx
from agenttx.api.mcp import AgentTxMCP, embedded
from agenttx.cli import main
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.client._approval_wait import ApprovalWait
from agenttx.errors import NotActive, ReceiptRefused, SnapshotMismatch
from agenttx.types import TxStatus
from conftest import FakeClock
from mcp_harness import structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]

TTL = 60.0
APPROVER = ("approver",)
PROMPTLY = 15.0  # "at once" on a busy 2-core machine


async def approval_tx(engine: agenttx.Engine, key: str) -> str:
    tx = (await engine.begin(principal="bob", mode="approval_required")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": key, "value": 1})
    return tx


async def voided_receipt(
    engine: agenttx.Engine, key: str, *, approve: bool = True
) -> tuple[str, str, int, int]:
    """A transaction whose receipt (approved by al, if ``approve``) a later step voided: (tx,
    receipt, the receipt's revision, the transaction's now)."""
    tx = await approval_tx(engine, key)
    p = await engine.preview_commit(tx)
    if approve:
        await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    await engine.execute_step(tx, 2, "kv.put", {"key": key + "/2", "value": 2})
    return tx, p.receipt_id, p.revision, (await engine.get_transaction(tx)).revision


async def cli(*args: str) -> Result:
    """The command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env={"COLUMNS": "240"})


async def test_grpc_and_both_clients_show_voided(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    tx, rid, made, now = await voided_receipt(s.engine, "void/grpc")
    [receipt] = (await s.get(tx)).receipts
    assert (receipt.receipt_id, receipt.status, receipt.revision) == (rid, "voided", made)
    assert receipt.decided_by == "al"
    info = await s.client.get_transaction(tx)
    assert [(r.receipt_id, r.status) for r in info.receipts] == [(rid, "voided")]
    assert info.revision == now

    def sync_read() -> list[tuple[str, str]]:
        with AgentTxClient(s.target, retry=RetryPolicy(max_attempts=1), timeout=10) as c:
            return [(r.receipt_id, r.status) for r in c.get_transaction(tx).receipts]

    assert await asyncio.to_thread(sync_read) == [(rid, "voided")]
    # Past its expiry it reads expired on the wire too: the reason a decision gives first.
    clock.advance(TTL)
    assert [r.status for r in (await s.get(tx)).receipts] == ["expired"]


async def test_tx_show_says_why_a_receipt_is_voided_and_to_preview_again(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(s.engine, "void/cli")
    undecided = (await s.engine.preview_commit(tx)).receipt_id
    clock.advance(1)
    p = await s.engine.preview_commit(tx)
    rid, made = p.receipt_id, p.revision
    await s.engine.approve_commit(tx, rid, principal="al", roles=APPROVER)
    await s.engine.execute_step(tx, 2, "kv.put", {"key": "void/cli2", "value": 2})
    now = (await s.engine.get_transaction(tx)).revision
    clock.advance(1)
    fresh = await s.engine.preview_commit(tx)
    shown = await cli("tx", "show", tx, "--server", s.target)
    assert shown.exit_code == 0, shown.output
    [old_line] = [line for line in shown.output.splitlines() if rid in line]
    assert f"{rid} voided: revision {made} moved to {now}; preview again" in old_line
    assert "(approved by al" in old_line
    [new_line] = [line for line in shown.output.splitlines() if fresh.receipt_id in line]
    assert f"{fresh.receipt_id} issued (expires " in new_line
    as_json = await cli("tx", "show", tx, "--json", "--server", s.target)
    got = {r["receipt_id"]: r["status"] for r in json.loads(as_json.output)["receipts"]}
    assert got == {rid: "voided", undecided: "voided", fresh.receipt_id: "issued"}
    # Approving a voided receipt is refused, and says what to run next.
    refused = await cli(
        "tx", "approve", tx, undecided, "--principal", "carol", "--server", s.target
    )
    assert refused.exit_code == 1
    assert "SNAPSHOT_MISMATCH" in refused.output or "ABORTED" in refused.output
    assert f"Call agenttx tx preview {tx}, review" in refused.output.split("next: ")[1]
    # Once the transaction ended without them, the lines say so (and no "preview again").
    await s.engine.rollback(tx, reason="operator")
    ended = await cli("tx", "show", tx, "--server", s.target)
    assert ended.exit_code == 0, ended.output
    for receipt_id in (rid, fresh.receipt_id):
        [line] = [x for x in ended.output.splitlines() if receipt_id in x]
        assert f"{receipt_id} voided: the transaction ended ROLLED_BACK without using it" in line
        assert "preview again" not in line


async def test_mcp_get_transaction_says_the_newest_receipt_was_voided(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx, rid, made, now = await voided_receipt(engine, "void/mcp")
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        shown = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert not shown.is_error, text(shown)
        [receipt] = structured(shown)["receipts"]
        assert (receipt["receipt_id"], receipt["status"]) == (rid, "voided")
        words = text(shown)
        assert f"Receipt {rid} was voided unused (revision {made} moved to {now})" in words
        assert "Call preview_commit again for a new receipt" in words
        assert "expired unused" not in words
        clock.advance(TTL)  # expired now: the expiry's words, not the voided ones
        words = text(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert f"Receipt {rid} expired unused" in words
        assert "voided unused" not in words


async def test_wait_for_approval_ends_with_the_voided_reason(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    async with s.client.transaction(principal="bob", mode="approval_required") as tx:
        await tx.step("kv.put", {"key": "void/wait", "value": 1})
        p = await tx.preview()
        step = tx.next_step_id

        async def move() -> None:
            await asyncio.sleep(0.3)
            await s.engine.execute_step(tx.transaction_id, step, "kv.put", {"key": "x", "value": 2})

        mover = asyncio.create_task(move())
        started = asyncio.get_running_loop().time()
        with pytest.raises(SnapshotMismatch) as voided:
            await tx.wait_for_approval(max_wait=PROMPTLY * 4, interval=0.05)
        await mover
        assert asyncio.get_running_loop().time() - started < PROMPTLY
        info = await s.client.get_transaction(tx.transaction_id)
        [view] = [r for r in info.receipts if r.receipt_id == p.receipt_id]
        assert view.status == "voided"  # what the read said is what ended the wait
        message = voided.value.message
        assert f"receipt {p.receipt_id} was made at revision {p.revision}" in message
        assert f"(revision {p.revision} moved to {info.revision})" in message
        assert "call tx.preview() again" in message
        await tx.rollback()


async def test_each_read_of_the_wait_weighs_voided_and_expired_as_the_server_does(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    # The decision each read makes, on a real transaction's view, with a fake client clock.
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    engine = s.engine
    tx = await approval_tx(engine, "void/poll")
    p = await engine.preview_commit(tx)
    current = await s.client.get_transaction(tx)
    waiting = FakeClock(start=10.0)
    wait = ApprovalWait(tx, p, 10.0, 10 * TTL, 1.0, waiting)
    assert wait.poll(current) == 1.0
    [view] = current.receipts
    # A read that says voided at the same revision (the server's word): ends as voided.
    said = dataclasses.replace(current, receipts=[dataclasses.replace(view, status="voided")])
    with pytest.raises(SnapshotMismatch, match="a later change voided it"):
        wait.poll(said)
    await engine.execute_step(tx, 2, "kv.put", {"key": "void/poll2", "value": 2})
    moved = await s.client.get_transaction(tx)
    assert [r.status for r in moved.receipts] == ["voided"]
    with pytest.raises(SnapshotMismatch, match=rf"revision {p.revision} moved to"):
        wait.poll(moved)
    # Voided and expired (by the server's clock, and by the wait's): expired, as the read shows.
    clock.advance(TTL)
    stale = await s.client.get_transaction(tx)
    assert [r.status for r in stale.receipts] == ["expired"]
    with pytest.raises(ReceiptRefused) as expired:
        wait.poll(stale)
    assert expired.value.why == "expired"
    waiting.advance(TTL)
    with pytest.raises(ReceiptRefused, match="expired"):
        wait.poll(moved)  # the wait's own clock says expired: before the revision
    await engine.rollback(tx, reason="done")
    ended = await s.client.get_transaction(tx)
    assert ended.status is TxStatus.ROLLED_BACK
    with pytest.raises(NotActive):  # an ended transaction comes first
        wait.poll(ended)
