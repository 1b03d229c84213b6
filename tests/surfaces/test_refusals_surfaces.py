"""A refusal in each surface's own terms, on every store: the RefuseCommit RPC's limits and
fields as any gRPC client sees them, the async client's rebuilt errors, ``agenttx tx refuse``,
``POST /v1/transactions/{id}/refuse`` (its error shape) and MCP's ``refuse_commit`` (with the
continuation a refused receipt's commit carries). The outcomes every surface shares are in the
conformance table (``tests/surfaces/cases.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.cli import main
from agenttx.error_details import from_metadata
from agenttx.errors import ApprovalRefused, InvalidArgument, ReceiptRefused
from agenttx.wire import agenttx_pb2 as pb
from http_harness import assert_error_shape, http_base, request, start_http_server
from mcp_harness import stdio_client, structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


async def approval_tx(s: Served) -> tuple[str, agenttx.Preview]:
    tx = (await s.engine.begin(principal="bob", mode="approval_required")).transaction_id
    await s.engine.execute_step(tx, 1, "kv.put", {"key": "refuse/k", "value": 900})
    return tx, await s.engine.preview_commit(tx)


async def test_refuse_commit_over_grpc(s: Served) -> None:
    tx, p = await approval_tx(s)
    bad = pb.RefuseCommitRequest(
        transaction_id=tx, receipt_id=p.receipt_id, principal="alice", roles=["approver"]
    )
    with pytest.raises(grpc.aio.AioRpcError) as no_reason:
        await s.stub.RefuseCommit(bad)
    assert no_reason.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reason is required" in (no_reason.value.details() or "")
    long = pb.RefuseCommitRequest(
        transaction_id=tx,
        receipt_id=p.receipt_id,
        principal="alice",
        roles=["approver"],
        reason="x" * 4097,
    )
    with pytest.raises(grpc.aio.AioRpcError) as too_long:
        await s.stub.RefuseCommit(long)
    assert too_long.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "over the limit of 4096" in (too_long.value.details() or "")

    r = await s.stub.RefuseCommit(
        pb.RefuseCommitRequest(
            transaction_id=tx,
            receipt_id=p.receipt_id,
            principal="alice",
            roles=["approver"],
            reason="900 is over the limit",
        )
    )
    assert (r.transaction_id, r.receipt_id, r.refused_by, r.reason) == (
        tx,
        p.receipt_id,
        "alice",
        "900 is over the limit",
    )
    assert (r.snapshot.transaction_id, r.snapshot.revision) == (tx, p.revision)
    assert r.refused_at > 0

    with pytest.raises(grpc.aio.AioRpcError) as commit:
        await s.stub.CommitTransaction(
            pb.CommitTransactionRequest(transaction_id=tx, receipt_id=p.receipt_id)
        )
    reason, fields = from_metadata(commit.value.trailing_metadata())
    assert (commit.value.code(), reason, fields["why"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RECEIPT_REFUSED",
        "refused",
    )
    assert "900 is over the limit" in (commit.value.details() or "")

    got = await s.get(tx)
    assert got.status == "ACTIVE"
    [receipt] = got.receipts
    assert (receipt.receipt_id, receipt.status, receipt.decided_by, receipt.reason) == (
        p.receipt_id,
        "refused",
        "alice",
        "900 is over the limit",
    )
    assert receipt.decided_at == r.refused_at


async def test_the_async_client_refuses_and_rebuilds_the_errors(s: Served) -> None:
    c = s.client
    tx, p = await approval_tx(s)
    with pytest.raises(ApprovalRefused) as own:
        await c.refuse_commit(tx, p.receipt_id, "no", principal="bob", roles=["approver"])
    assert own.value.why == "same_principal"
    with pytest.raises(InvalidArgument):
        await c.refuse_commit(tx, p.receipt_id, "", principal="carol", roles=["approver"])
    r = await c.refuse_commit(tx, p.receipt_id, "lower it", principal="carol", roles=["approver"])
    assert r == agenttx.Refusal(tx, p.receipt_id, p.revision, "carol", r.refused_at, "lower it")
    with pytest.raises(ReceiptRefused) as refused:
        await c.commit(tx, receipt_id=p.receipt_id)
    assert refused.value.why == "refused"
    assert "'carol'" in refused.value.message
    with pytest.raises(ApprovalRefused) as late:
        await c.approve_commit(tx, p.receipt_id, principal="dave", roles=["approver"])
    assert late.value.why == "already_refused"
    info = await c.get_transaction(tx)
    assert [(x.status, x.decided_by, x.reason) for x in info.receipts] == [
        ("refused", "carol", "lower it")
    ]
    assert info.receipts == (await s.engine.get_transaction(tx)).receipts


async def test_cli_refuse_and_show(s: Served) -> None:
    tx, p = await approval_tx(s)
    missing = await cli("tx", "refuse", tx, p.receipt_id, "--principal", "al", "--server", s.target)
    assert missing.exit_code == 2  # --reason is required
    assert "--reason" in missing.output
    same = await cli(
        "tx", "refuse", tx, p.receipt_id, "--principal", "bob", "--reason", "no",
        "--server", s.target,
    )  # fmt: skip
    assert same.exit_code == 1
    assert "APPROVAL_REFUSED" in same.output or "FAILED_PRECONDITION" in same.output
    assert "began the transaction" in same.output  # refused as its own principal, no other way
    ok = await cli(
        "tx", "refuse", tx, p.receipt_id, "--principal", "al", "--reason", "halve it",
        "--server", s.target,
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert f"refused {p.receipt_id} of {tx} as al: halve it" in ok.output
    shown = await cli("tx", "show", tx, "--server", s.target)
    assert f"{p.receipt_id} refused by al" in shown.output
    assert "halve it" in shown.output
    as_json = await cli("tx", "show", tx, "--server", s.target, "--json")
    assert json.loads(as_json.output)["receipts"][0]["reason"] == "halve it"


def test_refuse_over_http(tmp_path: Path) -> None:
    server = start_http_server(tmp_path / "data")
    with server.killed_on_error():
        base = http_base(server)
        doc = request(base, "GET", "/openapi.json").json
        assert "RefuseCommit" in {
            op["operationId"] for item in doc["paths"].values() for op in item.values()
        }
        begun = request(
            base,
            "POST",
            "/v1/transactions",
            {"agent_id": "h", "principal": "alice", "mode": "approval_required"},
        )
        tx = begun.json["transaction_id"]
        step = {"step_id": 1, "tool_name": "kv.put", "arguments": {"key": "h", "value": 1}}
        assert request(base, "POST", f"/v1/transactions/{tx}/steps", step).status == 200
        receipt = request(base, "POST", f"/v1/transactions/{tx}/preview", {}).json["receipt_id"]
        path = f"/v1/transactions/{tx}/refuse"
        no_reason = request(base, "POST", path, {"receipt_id": receipt, "principal": "bob"})
        assert_error_shape(no_reason, 400, "INVALID_ARGUMENT")
        blank = request(
            base, "POST", path, {"receipt_id": receipt, "principal": "bob", "reason": "  "}
        )
        assert_error_shape(blank, 400, "INVALID_ARGUMENT")
        same = request(
            base, "POST", path, {"receipt_id": receipt, "principal": "alice", "reason": "no"}
        )
        assert_error_shape(same, 409, "APPROVAL_REFUSED")
        refused = request(
            base, "POST", path, {"receipt_id": receipt, "principal": "bob", "reason": "too big"}
        )
        assert refused.status == 200, refused.raw
        assert (refused.json["refused_by"], refused.json["reason"]) == ("bob", "too big")
        commit = request(base, "POST", f"/v1/transactions/{tx}/commit", {"receipt_id": receipt})
        assert_error_shape(commit, 409, "RECEIPT_REFUSED")
        got = request(base, "GET", f"/v1/transactions/{tx}").json
        assert got["status"] == "ACTIVE"
        assert [(r["status"], r["decided_by"], r["reason"]) for r in got["receipts"]] == [
            ("refused", "bob", "too big")
        ]
    assert server.terminate() == 0


async def test_refuse_over_mcp(store_url: str, tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "data", "auto", "--store", store_url) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "approver" in (tools["refuse_commit"].description or "")
        assert "reason" in tools["refuse_commit"].input_schema["required"]
        tx = structured(
            await c.call_tool(
                "begin_transaction", {"principal": "bob", "mode": "approval_required"}
            )
        )["transaction_id"]
        await c.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 1,
                "tool": "kv.put",
                "arguments": {"key": "m/k", "value": 70},
            },
        )
        p = structured(await c.call_tool("preview_commit", {"transaction_id": tx}))
        refuse = {
            "transaction_id": tx,
            "receipt_id": p["receipt_id"],
            "principal": "alice",
            "roles": ["approver"],
            "reason": "at most 50",
        }
        refused = await c.call_tool("refuse_commit", refuse)
        assert not refused.is_error, text(refused)
        assert structured(refused)["refused_by"] == "alice"
        assert structured(refused)["snapshot"] == {"transaction_id": tx, "revision": 2}
        assert "at most 50" in text(refused)

        commit = await c.call_tool(
            "commit_transaction", {"transaction_id": tx, "receipt_id": p["receipt_id"]}
        )
        assert commit.is_error
        body = structured(commit)
        assert body["error"]["code"] == "RECEIPT_REFUSED"
        assert "'alice'" in body["error"]["message"]
        assert "at most 50" in body["error"]["message"]
        assert (body["continuation"]["kind"], body["continuation"]["tool"]) == (
            "CallTool",
            "preview_commit",
        )
        assert "rollback_transaction" in body["continuation"]["instruction"]

        again = await c.call_tool("refuse_commit", refuse)
        assert structured(again)["error"]["code"] == "APPROVAL_REFUSED"
        assert structured(again)["continuation"]["kind"] == "ResolveExternally"
        approve = {k: v for k, v in refuse.items() if k != "reason"}
        late = await c.call_tool("approve_commit", approve)
        assert structured(late)["error"]["code"] == "APPROVAL_REFUSED"
        assert "refused" in structured(late)["continuation"]["instruction"]

        shown = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert f"refused receipt {p['receipt_id']}: at most 50" in text(shown)

        # The agent changes the transaction as asked; a new receipt is approved and commits.
        await c.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 2,
                "tool": "kv.put",
                "arguments": {"key": "m/k", "value": 50},
            },
        )
        p2 = structured(await c.call_tool("preview_commit", {"transaction_id": tx}))
        ok = await c.call_tool("approve_commit", dict(approve, receipt_id=p2["receipt_id"]))
        assert not ok.is_error, text(ok)
        done = await c.call_tool(
            "commit_transaction", {"transaction_id": tx, "receipt_id": p2["receipt_id"]}
        )
        assert structured(done)["committed"] is True
        view = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert [r["status"] for r in view["receipts"]] == ["approved", "refused"]

        # A refusal after an approval: decided once, and the continuation says what stops it.
        tx2 = structured(
            await c.call_tool(
                "begin_transaction", {"principal": "bob", "mode": "approval_required"}
            )
        )["transaction_id"]
        await c.call_tool(
            "run_step",
            {"transaction_id": tx2, "step_id": 1, "tool": "kv.put", "arguments": {"key": "z"}},
        )
        p3 = structured(await c.call_tool("preview_commit", {"transaction_id": tx2}))
        both = dict(approve, transaction_id=tx2, receipt_id=p3["receipt_id"])
        assert not (await c.call_tool("approve_commit", both)).is_error
        after = await c.call_tool("refuse_commit", dict(both, reason="wait"))
        assert structured(after)["error"]["code"] == "APPROVAL_REFUSED"
        assert structured(after)["continuation"]["kind"] == "ResolveExternally"
        assert "rolled back" in structured(after)["continuation"]["instruction"]
