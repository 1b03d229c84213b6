"""The lifecycle and the approval of a commit (``cases.LIFECYCLE``) on every surface: the same
calls with the same inputs give the outcome the table says — the reason code of a refusal, the
reply's status, revision and snapshot fields — and the one the embedded engine gives. Then
what only one surface shows of a refused receipt, on the same surfaces: the CLI's text, MCP's
tool declaration, /v1's document, the time a gRPC reply and its receipt carry, and the
refusal our client rebuilds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agenttx
from agenttx.wire import agenttx_pb2 as pb
from http_harness import assert_error_shape, request
from surfaces.cases import ALICE, LIFECYCLE, MCP_SURFACES, PREVIEWED
from surfaces.drivers import Driver
from surfaces.runner import conformance_test, prepared

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


async def test_mcp_declares_who_refuses_a_receipt_and_why(drivers: dict[str, Driver]) -> None:
    for surface in MCP_SURFACES:
        session = drivers[surface].session  # type: ignore[attr-defined]
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "approver" in (tools["refuse_commit"].description or ""), surface
        assert "reason" in tools["refuse_commit"].input_schema["required"], surface


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


async def test_our_client_rebuilds_the_refusal(drivers: dict[str, Driver], tmp_path: Path) -> None:
    bound = await prepared(PREVIEWED, drivers["client"], tmp_path / "s")
    client = drivers["client"].service  # type: ignore[attr-defined]
    tx, rid = bound["tx"], bound["receipt"]
    r = await client.refuse_commit(tx, rid, "lower it", principal="carol", roles=["approver"])
    assert r == agenttx.Refusal(tx, rid, 2, "carol", r.refused_at, "lower it")
    [receipt] = (await client.get_transaction(tx)).receipts
    assert receipt.decided_at == r.refused_at
