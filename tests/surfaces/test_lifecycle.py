"""The lifecycle and the approval of a commit (``cases.LIFECYCLE``) on every surface: the same
calls with the same inputs give the outcome the table says — the reason code of a refusal, the
reply's status, revision and snapshot fields — and the one the embedded engine gives. Then
what only one surface shows of a receipt, on the same surfaces: the CLI's text, MCP's tool
declarations and its lenient numbers, /v1's document, the time a gRPC reply and its receipt
carry, a gRPC listing's snapshot, and the approval and refusal our client rebuilds."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

import agenttx
from agenttx.wire import agenttx_pb2 as pb
from http_harness import assert_error_shape, request
from surfaces.cases import ALICE, APPROVAL, APPROVED, LIFECYCLE, MCP_SURFACES, PREVIEWED, call
from surfaces.drivers import Driver
from surfaces.runner import conformance_test, made_one, prepared

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(LIFECYCLE)


async def test_the_cli_refuses_a_receipt_in_words(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    bound = await prepared(PREVIEWED, cli, tmp_path / "s")
    tx, rid = bound["tx"], bound["receipt"]
    refuse = ("tx", "refuse", tx, rid, "--principal", "al")
    missing = await cli.as_a_person_runs_it(*refuse)  # type: ignore[attr-defined]
    assert missing.exit_code == 2  # --reason is required
    assert "--reason" in missing.output
    ok = await cli.as_a_person_runs_it(*refuse, "--reason", "halve it")  # type: ignore[attr-defined]
    assert ok.exit_code == 0, ok.output
    assert f"refused {rid} of {tx} as al: halve it" in ok.output
    shown = await cli.as_a_person_runs_it("tx", "show", tx)  # type: ignore[attr-defined]
    assert f"{rid} refused by al" in shown.output
    assert "halve it" in shown.output


async def test_the_cli_previews_and_approves_in_words(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    cli = drivers["cli"]
    begun = call("begin", principal="bob", mode="approval_required")
    put = call(
        "execute_step",
        transaction_id="$tx",
        step_id=1,
        tool_name="kv.put",
        arguments={"key": "cli/k", "value": "new"},
    )
    tx = (await prepared((begun, put), cli, tmp_path / "s"))["tx"]
    show = await cli.as_a_person_runs_it("tx", "show", tx)  # type: ignore[attr-defined]
    assert "approval_required / bob" in show.output
    shown = await cli.as_a_person_runs_it("tx", "preview", tx)  # type: ignore[attr-defined]
    assert shown.exit_code == 0, shown.output
    assert "approval required" in shown.output
    assert 'kv/cli/k: (absent) → "new"' in shown.output
    rid = (await made_one(call("preview_commit", transaction_id=tx), cli, {})).reply["receipt_id"]
    ok = await cli.as_a_person_runs_it("tx", "approve", tx, rid, "--principal", "alice")  # type: ignore[attr-defined]
    assert ok.exit_code == 0, ok.output
    assert f"approved {rid}" in ok.output


async def test_mcp_declares_who_approves_or_refuses_a_receipt_and_why(
    drivers: dict[str, Driver],
) -> None:
    for surface in MCP_SURFACES:
        session = drivers[surface].session  # type: ignore[attr-defined]
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "approver" in (tools["refuse_commit"].description or ""), surface
        assert "reason" in tools["refuse_commit"].input_schema["required"], surface
        assert "approver" in (tools["approve_commit"].description or ""), surface
        assert tools["preview_commit"].annotations.read_only_hint is True, surface


async def test_mcp_reads_a_revision_sent_as_text(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    # Models send numbers as text; a stale one is refused as stale, not as a bad argument.
    for surface in MCP_SURFACES:
        bound = await prepared(APPROVED, drivers[surface], tmp_path / surface)
        session = drivers[surface].session  # type: ignore[attr-defined]
        stale = await session.call_tool(
            "commit_transaction",
            {
                "transaction_id": bound["tx"],
                "receipt_id": bound["receipt"],
                "expected_revision": "1",
            },
        )
        reply = stale.structured_content
        assert reply["error"]["code"] == "SNAPSHOT_MISMATCH", (surface, reply)
        assert reply["continuation"]["tool"] == "preview_commit", surface


async def test_v1_documents_refuse_commit_and_refuses_one_without_a_reason(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    base = drivers["http"].base  # type: ignore[attr-defined]
    doc = (await asyncio.to_thread(request, base, "GET", "/openapi.json")).json
    ids = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert "RefuseCommit" in ids
    # The table sends a blank reason (the CLI's --reason needs a value); none at all is
    # refused by the document.
    bound = await prepared(PREVIEWED, drivers["http"], tmp_path / "s")
    body = {"receipt_id": bound["receipt"], "principal": "alice"}
    path = f"/v1/transactions/{bound['tx']}/refuse"
    reply = await asyncio.to_thread(request, base, "POST", path, body)
    assert_error_shape(reply, 400, "INVALID_ARGUMENT")


async def test_a_refusal_is_dated_once_over_grpc(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    bound = await prepared(PREVIEWED, drivers["grpc"], tmp_path / "s")
    stub = drivers["grpc"].stub  # type: ignore[attr-defined]
    r = await stub.RefuseCommit(
        pb.RefuseCommitRequest(
            transaction_id=bound["tx"], receipt_id=bound["receipt"], reason="no", **ALICE
        )
    )
    assert r.refused_at > 0
    got = await stub.GetTransaction(pb.GetTransactionRequest(transaction_id=bound["tx"]))
    [receipt] = got.receipts
    assert receipt.decided_at == r.refused_at


async def test_a_grpc_listing_carries_each_transactions_snapshot(
    drivers: dict[str, Driver],
) -> None:
    stub = drivers["grpc"].stub  # type: ignore[attr-defined]
    agent = uuid.uuid4().hex  # this test's transactions alone, on a server every case shares
    begun = await stub.BeginTransaction(pb.BeginTransactionRequest(agent_id=agent, principal="bob"))
    step = await stub.ExecuteStep(
        pb.ExecuteStepRequest(
            transaction_id=begun.transaction_id,
            step_id=1,
            tool_name="kv.put",
            arguments_json='{"key": "k", "value": 1}',
        )
    )
    listed = await stub.ListTransactions(pb.ListTransactionsRequest(agent_id=agent))
    assert [t.snapshot.revision for t in listed.transactions] == [step.revision]
    assert [t.snapshot.transaction_id for t in listed.transactions] == [begun.transaction_id]


async def test_a_change_is_hashed_over_grpc_as_the_engine_hashes_it(
    drivers: dict[str, Driver], tmp_path: Path
) -> None:
    # One new key, so what it held before is the same on both engines (nothing).
    key = uuid.uuid4().hex
    begun = call("begin", principal="bob", mode="approval_required")
    put = call(
        "execute_step",
        transaction_id="$tx",
        step_id=1,
        tool_name="kv.put",
        arguments={"key": key, "value": {"v": 1}},
    )
    hashes = []
    for surface in ("embedded", "grpc"):
        bound = await prepared((begun, put, call("preview_commit", transaction_id="$tx")),
                               drivers[surface], tmp_path / surface)  # fmt: skip
        hashes.append(bound["change"])
    assert hashes[0] == hashes[1]
    stub = drivers["grpc"].stub  # type: ignore[attr-defined]
    p = await stub.PreviewCommit(pb.PreviewCommitRequest(transaction_id=bound["tx"]))
    [change] = p.changes.state
    assert (change.key, change.before_json, json.loads(change.after_json)) == (
        f"kv/{key}",
        "",
        {"v": 1},
    )


async def test_our_client_rebuilds_the_approval(drivers: dict[str, Driver], tmp_path: Path) -> None:
    tx = (await prepared(APPROVAL, drivers["client"], tmp_path / "s"))["tx"]
    client = drivers["client"].service  # type: ignore[attr-defined]
    p = await client.preview_commit(tx)
    a = await client.approve_commit(tx, p.receipt_id, principal="carol", roles=["approver"])
    assert a == agenttx.Approval(
        tx, p.receipt_id, p.change_hash, p.revision, "carol", a.approved_at, p.expires_at
    )


async def test_our_client_rebuilds_the_refusal(drivers: dict[str, Driver], tmp_path: Path) -> None:
    bound = await prepared(PREVIEWED, drivers["client"], tmp_path / "s")
    client = drivers["client"].service  # type: ignore[attr-defined]
    tx, rid = bound["tx"], bound["receipt"]
    r = await client.refuse_commit(tx, rid, "lower it", principal="carol", roles=["approver"])
    assert r == agenttx.Refusal(tx, rid, 2, "carol", r.refused_at, "lower it")
    [receipt] = (await client.get_transaction(tx)).receipts
    assert receipt.decided_at == r.refused_at
