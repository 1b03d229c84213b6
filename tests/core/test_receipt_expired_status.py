"""A receipt past its ``expires_at`` that no commit used shows as ``expired`` wherever its
status is shown — the engine's view, gRPC ``GetTransaction``, the clients, MCP
``get_transaction``, ``/v1``, ``agenttx tx show`` — computed at read time from the engine's
clock (nothing stored changes); approving or refusing it is refused naming the expiry and
saying to preview again, on every surface; and ``wait_for_approval`` ends as soon as the
server says ``expired``. The engine's clock is a fake one moved by hand, on every store."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from click.testing import CliRunner, Result
from mcp import Client

import agenttx
from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
from agenttx.api.http.v1 import ApiSettings
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.api.http.web import web_exception_handlers, web_routes
from agenttx.api.mcp import AgentTxMCP, embedded
from agenttx.cli import main
from agenttx.core.reads import commit_receipt
from agenttx.error_details import from_metadata
from agenttx.errors import ReceiptRefused
from agenttx.receipts import ReceiptStatus
from agenttx.wire import agenttx_pb2 as pb
from conftest import FakeClock
from http_harness import assert_error_shape, request
from mcp_harness import structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]

TTL = 60.0
APPROVER = ("approver",)
PROMPTLY = 15.0  # "at once" on a busy 2-core machine; the receipt's own lifetime is 60 s


async def approval_tx(engine: agenttx.Engine, key: str = "exp/k") -> str:
    tx = (await engine.begin(principal="bob", mode="approval_required")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": key, "value": 1})
    return tx


async def status_of(engine: agenttx.Engine, tx: str, receipt_id: str) -> str:
    info = await engine.get_transaction(tx)
    [view] = [r for r in info.receipts if r.receipt_id == receipt_id]
    return view.status


async def test_an_unused_receipt_reads_as_expired_from_its_expiry_on(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    assert await status_of(engine, tx, p.receipt_id) == "issued"
    clock.advance(TTL - 0.5)
    assert await status_of(engine, tx, p.receipt_id) == "issued"
    clock.advance(0.5)  # exactly expires_at: the instant the engine starts refusing it
    assert await status_of(engine, tx, p.receipt_id) == ReceiptStatus.EXPIRED == "expired"
    with pytest.raises(ReceiptRefused) as refused:
        await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    assert refused.value.why == "expired"
    # Nothing stored changed: the store still holds it as issued; only reads say expired.
    row = await engine.store.get_receipt(p.receipt_id)
    assert row is not None
    assert row.status == "issued"
    # A new preview gives a receipt that holds, listed first; the old one stays expired.
    again = await engine.preview_commit(tx)
    info = await engine.get_transaction(tx)
    assert [(r.receipt_id, r.status) for r in info.receipts] == [
        (again.receipt_id, "issued"),
        (p.receipt_id, "expired"),
    ]


async def test_an_approved_receipt_expires_too_and_still_names_its_approver(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    approval = await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    assert await status_of(engine, tx, p.receipt_id) == "approved"
    clock.advance(TTL)
    [view] = (await engine.get_transaction(tx)).receipts
    assert (view.status, view.decided_by, view.decided_at) == (
        "expired",
        "al",
        approval.approved_at,
    )
    with pytest.raises(ReceiptRefused) as committing:
        await engine.commit(tx, receipt_id=p.receipt_id)
    assert committing.value.why == "expired"


async def test_a_refused_receipt_stays_refused_past_its_expiry(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.refuse_commit(tx, p.receipt_id, "halve it", principal="al", roles=APPROVER)
    clock.advance(TTL * 10)
    [view] = (await engine.get_transaction(tx)).receipts
    assert (view.status, view.reason) == ("refused", "halve it")


async def test_the_receipt_a_commit_used_never_reads_as_expired_the_others_do(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    unused = await engine.preview_commit(tx)
    used = await engine.preview_commit(tx)
    await engine.approve_commit(tx, used.receipt_id, principal="al", roles=APPROVER)
    await engine.commit(tx, receipt_id=used.receipt_id, expected_revision=used.revision)
    clock.advance(TTL * 2)
    info = await engine.get_transaction(tx)
    assert {r.receipt_id: r.status for r in info.receipts} == {
        used.receipt_id: "approved",
        unused.receipt_id: "expired",
    }
    # A transaction committed without naming a receipt used none of its previews.
    plain = (await engine.begin()).transaction_id
    await engine.execute_step(plain, 1, "kv.put", {"key": "exp/plain", "value": 1})
    previewed = await engine.preview_commit(plain)
    await engine.commit(plain)
    assert await status_of(engine, plain, previewed.receipt_id) == "issued"
    clock.advance(TTL)
    assert await status_of(engine, plain, previewed.receipt_id) == "expired"


async def test_a_commit_from_before_the_commit_receipt_was_recorded_keeps_stored_statuses(
    open_engine: Any, clock: FakeClock
) -> None:
    # A transaction committed by an older version has no commit_receipt_id in its body: which
    # receipt the commit used is unknown, so none of them is shown expired.
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER)
    await engine.commit(tx, receipt_id=p.receipt_id)
    row = await engine.store.get_transaction(tx)
    assert row is not None
    assert row.body["commit_receipt_id"] == p.receipt_id
    assert commit_receipt(row) == p.receipt_id
    body = {k: v for k, v in row.body.items() if k != "commit_receipt_id"}
    assert commit_receipt(dataclasses.replace(row, body=body)) is None
    assert commit_receipt(dataclasses.replace(row, status="ACTIVE", body=body)) == ""


async def test_refusing_an_expired_receipt_names_the_expiry_and_says_to_preview_again(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    clock.advance(TTL + 5)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.expires_at))
    for decide in (
        engine.approve_commit(tx, p.receipt_id, principal="al", roles=APPROVER),
        engine.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER),
    ):
        with pytest.raises(ReceiptRefused) as refused:
            await decide
        message = refused.value.message
        assert refused.value.why == "expired"
        assert f"it expired at {at}, 5 s ago (receipts last 60 s)" in message
        assert "preview the transaction again for a current receipt" in message
    assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.ACTIVE


# -- the wire, the clients and the CLI ------------------------------------------------------


async def grpc_refusal(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str, dict[str, Any], str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    reason, fields = from_metadata(err.value.trailing_metadata())
    return err.value.code(), reason, fields, str(err.value.details())


async def cli(*args: str) -> Result:
    """The command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env={"COLUMNS": "240"})


async def test_grpc_and_the_clients_show_expired_and_refuse_its_approval(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(s.engine, "exp/grpc")
    p = await s.engine.preview_commit(tx)
    assert [r.status for r in (await s.get(tx)).receipts] == ["issued"]
    clock.advance(TTL + 1)
    got = await s.get(tx)
    [receipt] = got.receipts
    assert (receipt.receipt_id, receipt.status) == (p.receipt_id, "expired")
    info = await s.client.get_transaction(tx)
    assert [(r.receipt_id, r.status) for r in info.receipts] == [(p.receipt_id, "expired")]
    code, reason, fields, details = await grpc_refusal(
        s.stub.ApproveCommit(
            pb.ApproveCommitRequest(
                transaction_id=tx, receipt_id=p.receipt_id, principal="al", roles=APPROVER
            )
        )
    )
    assert (code, reason, fields["why"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RECEIPT_REFUSED",
        "expired",
    )
    assert "it expired at" in details
    assert "preview the transaction again" in details
    with pytest.raises(ReceiptRefused) as refusing:
        await s.client.refuse_commit(tx, p.receipt_id, "no", principal="al", roles=APPROVER)
    assert refusing.value.why == "expired"


async def test_tx_show_prints_expired_and_tx_approve_says_to_preview_again(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(s.engine, "exp/cli")
    lapsed = await s.engine.preview_commit(tx)
    await s.engine.approve_commit(tx, lapsed.receipt_id, principal="al", roles=APPROVER)
    clock.advance(TTL + 1)
    fresh = await s.engine.preview_commit(tx)
    shown = await cli("tx", "show", tx, "--server", s.target)
    assert shown.exit_code == 0, shown.output
    [old_line] = [line for line in shown.output.splitlines() if lapsed.receipt_id in line]
    assert "expired" in old_line
    assert "(approved by al" in old_line
    assert "preview again for a new receipt" in old_line
    [new_line] = [line for line in shown.output.splitlines() if fresh.receipt_id in line]
    assert f"{fresh.receipt_id} issued (expires " in new_line
    as_json = await cli("tx", "show", tx, "--json", "--server", s.target)
    statuses = {r["receipt_id"]: r["status"] for r in json.loads(as_json.output)["receipts"]}
    assert statuses == {lapsed.receipt_id: "expired", fresh.receipt_id: "issued"}

    for command in (
        ("tx", "approve", tx, lapsed.receipt_id, "--principal", "carol"),
        ("tx", "refuse", tx, lapsed.receipt_id, "--principal", "carol", "--reason", "no"),
    ):
        refused = await cli(*command, "--server", s.target)
        assert refused.exit_code == 1
        assert "RECEIPT_REFUSED" in refused.output or "FAILED_PRECONDITION" in refused.output
        assert "it expired at" in refused.output
        assert f"next: Receipt {lapsed.receipt_id} cannot be used (expired). Call agenttx tx " in (
            refused.output
        )
        assert f"agenttx tx preview {tx}" in refused.output.split("next: ")[1]
    # The fresh receipt holds: approving it works, and says how to commit with it.
    ok = await cli(
        "tx", "approve", tx, fresh.receipt_id, "--principal", "carol", "--server", s.target
    )
    assert ok.exit_code == 0, ok.output
    assert "Error" not in ok.output
    assert f"next: agenttx tx commit {tx} --receipt-id {fresh.receipt_id}" in ok.output


async def test_the_helpers_wait_ends_as_soon_as_the_server_says_expired(
    serve: Callable[..., Awaitable[Served]], clock: FakeClock
) -> None:
    # The server's clock passed the expiry; the client's own (real, monotonic) clock has
    # measured almost nothing of the 60 s lifetime. The server's word ends the wait.
    s = await serve(clock=clock, receipt_ttl_s=TTL)
    async with s.client.transaction(principal="bob", mode="approval_required") as tx:
        await tx.step("kv.put", {"key": "exp/wait", "value": 1})
        p = await tx.preview()
        await s.client.approve_commit(
            tx.transaction_id, p.receipt_id, principal="al", roles=APPROVER
        )
        clock.advance(TTL)
        started = time.monotonic()
        with pytest.raises(ReceiptRefused) as expired:
            await tx.wait_for_approval(max_wait=PROMPTLY, interval=0.05)
        assert time.monotonic() - started < PROMPTLY
        assert (expired.value.why, expired.value.receipt_id) == ("expired", p.receipt_id)
        assert "approved by 'al' but expired before a commit used it" in expired.value.message
        again = await tx.preview()  # what to do: a new receipt, which holds
        assert again.receipt_id != p.receipt_id
        info = await s.client.get_transaction(tx.transaction_id)
        assert [r.status for r in info.receipts] == ["issued", "expired"]
        await tx.rollback()


# -- MCP and /v1 ------------------------------------------------------------------------------


async def test_mcp_get_transaction_shows_expired_and_approve_commit_says_preview_again(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    tx = await approval_tx(engine, "exp/mcp")
    p = await engine.preview_commit(tx)
    clock.advance(TTL)
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        shown = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert not shown.is_error, text(shown)
        [receipt] = structured(shown)["receipts"]
        assert (receipt["receipt_id"], receipt["status"]) == (p.receipt_id, "expired")
        assert f"Receipt {p.receipt_id} expired unused" in text(shown)
        assert "preview_commit again" in text(shown)
        approving = await c.call_tool(
            "approve_commit",
            {
                "transaction_id": tx,
                "receipt_id": p.receipt_id,
                "principal": "al",
                "roles": list(APPROVER),
            },
        )
        assert approving.is_error
        got = structured(approving)
        assert got["error"]["code"] == "RECEIPT_REFUSED"
        assert "it expired at" in got["error"]["message"]
        assert (got["continuation"]["kind"], got["continuation"]["tool"]) == (
            "CallTool",
            "preview_commit",
        )


@pytest.fixture
async def http_engine(open_engine: Any, clock: FakeClock) -> AsyncIterator[tuple[Any, str]]:
    """The test's engine (fake clock) behind the real HTTP listener: /v1 and the dashboard."""
    engine = await open_engine(clock=clock, receipt_ttl_s=TTL)
    app = build_http_app(
        AgentTxMCP(embedded(engine), version="test"),
        HttpSettings(
            routes=web_routes(engine, "test", ApiSettings(extra_operations=SAFETY_OPERATIONS)),
            exception_handlers=web_exception_handlers(),
        ),
    )
    listener = HttpListener(app, bind("127.0.0.1", 0))
    await listener.start()
    try:
        yield engine, f"http://{listener.address}"
    finally:
        await listener.stop()


async def test_v1_shows_expired_and_refuses_approve_and_refuse_naming_the_expiry(
    http_engine: tuple[Any, str], clock: FakeClock
) -> None:
    engine, base = http_engine
    tx = await approval_tx(engine, "exp/http")
    p = await engine.preview_commit(tx)
    clock.advance(TTL)

    def calls() -> tuple[Any, Any, Any]:
        got = request(base, "GET", f"/v1/transactions/{tx}")
        approve = request(
            base,
            "POST",
            f"/v1/transactions/{tx}/approve",
            {"receipt_id": p.receipt_id, "principal": "al", "roles": ["approver"]},
        )
        refuse = request(
            base,
            "POST",
            f"/v1/transactions/{tx}/refuse",
            {"receipt_id": p.receipt_id, "principal": "al", "roles": ["approver"], "reason": "no"},
        )
        return got, approve, refuse

    got, approve, refuse = await asyncio.to_thread(calls)
    assert got.status == 200, got.raw
    assert [(r["receipt_id"], r["status"]) for r in got.json["receipts"]] == [
        (p.receipt_id, "expired")
    ]
    for reply in (approve, refuse):
        error = assert_error_shape(reply, 409, "RECEIPT_REFUSED")
        assert error["details"]["why"] == "expired"
        assert "it expired at" in error["message"]
        assert error["continuation"]["operation"] == f"POST /v1/transactions/{tx}/preview"
