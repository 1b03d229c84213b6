"""Refusing a compensation approval in each surface's own terms, on every store: the
RefuseCompensation RPC's limits, the async client's rebuilt errors, ``agenttx tx
refuse-compensation``'s words, the MCP ``refuse_compensation`` tool's schema and continuations
(over ``agenttx mcp --server`` and embedded over stdio) and ``POST
/v1/transactions/{id}/refuse-compensation``'s error shapes. The outcomes every surface shares
are in the conformance table (``tests/surfaces/cases.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
from agenttx.api.http.v1 import ApiSettings
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.api.http.web import web_exception_handlers, web_routes
from agenttx.api.mcp import AgentTxMCP, embedded
from agenttx.cli import main
from agenttx.wire import agenttx_pb2 as pb
from compensation_tools import TOOLS, undone
from http_harness import assert_error_shape, request
from mcp_harness import stdio_client, structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]

WHY = "refunded by hand already"
REFUSED = "not undone: compensation refused by alice: " + WHY


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "undone.jsonl")


@pytest.fixture
async def cs(serve: Callable[..., Awaitable[Served]]) -> Served:
    return await serve(tools=TOOLS)


async def _steps(engine: agenttx.Engine, *tools: str, log: str) -> str:
    tx = (await engine.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    for i, name in enumerate(tools, start=1):
        r = await engine.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    return tx


async def _waiting_rollback(engine: agenttx.Engine, log: str) -> str:
    tx = await _steps(engine, "comp.charge", "comp.refund", log=log)
    assert (await engine.rollback(tx, reason="cancel")).compensation_approval_pending
    return tx


async def _waiting_compensation(engine: agenttx.Engine, log: str) -> str:
    tx = await _steps(engine, "comp.charge", "comp.refund", log=log)
    await engine.commit(tx)
    k = await engine.compensate(tx, reason="chargeback")
    assert k.status == "awaiting_approval"
    return k.transaction_id


async def test_refuse_compensation_over_grpc_with_its_limits(cs: Served, log: str) -> None:
    tx = await _waiting_rollback(cs.engine, log)

    async def refuse(**fields: Any) -> Any:
        return await cs.stub.RefuseCompensation(
            pb.RefuseCompensationRequest(
                **{"transaction_id": tx, "principal": "alice", "roles": ["approver"], **fields}
            )
        )

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await refuse(reason="")
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "reason is required" in (exc.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await refuse(reason="x" * 5000)
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "over the limit of 4096" in (exc.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await refuse(reason=WHY, principal="bob")
    assert exc.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "own principal" in (exc.value.details() or "")
    assert undone(log) == []
    r = await refuse(reason=WHY)
    assert r.finished
    assert r.transaction_status == "ROLLED_BACK"
    assert r.compensations_run == 1
    assert [e.endswith(REFUSED) for e in r.compensation_errors] == [True]
    assert r.snapshot.revision == r.revision
    assert undone(log) == [("comp.charge", 1)]
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await refuse(reason=WHY)
    assert exc.value.code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_the_async_client_refuses_a_compensating_transaction(cs: Served, log: str) -> None:
    cid = await _waiting_compensation(cs.engine, log)
    with pytest.raises(agenttx.CompensationApprovalRefused, match="own principal"):
        await cs.client.refuse_compensation(cid, WHY, "bob", ["approver"])
    with pytest.raises(agenttx.InvalidArgument, match="reason is required"):
        await cs.client.refuse_compensation(cid, " ", "alice", ["approver"])
    r = await cs.client.refuse_compensation(cid, WHY, principal="alice", roles=["approver"])
    assert r.rolled_back
    assert r.transaction_status is agenttx.TxStatus.FAILED
    assert r.compensation_errors == [f"step 2 (comp.refund) {REFUSED}"]
    assert undone(log) == [("comp.charge", 1)]
    info = await cs.client.get_transaction(cid)
    assert info.requires_human
    with pytest.raises(agenttx.CompensationApprovalRefused, match="refused already"):
        await cs.client.approve_compensation(cid, "alice", ["approver"])


async def test_cli_refuse_compensation(cs: Served, log: str) -> None:
    cid = await _waiting_compensation(cs.engine, log)
    own = await cli(
        "tx", "refuse-compensation", cid, "--reason", WHY, "--principal", "bob",
        "--role", "approver", "--server", cs.target,
    )  # fmt: skip
    assert own.exit_code != 0
    assert "own principal" in " ".join(own.output.split())
    missing = await cli(
        "tx", "refuse-compensation", cid, "--principal", "alice", "--server", cs.target
    )
    assert missing.exit_code == 2  # click: --reason is required
    assert undone(log) == []
    ok = await cli(
        "tx", "refuse-compensation", cid, "--reason", WHY, "--principal", "alice",
        "--role", "approver", "--server", cs.target,
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    said = " ".join(ok.output.split())  # rich wraps at the terminal's width
    assert "refused" in said
    assert "FAILED" in said
    assert REFUSED in said
    assert undone(log) == [("comp.charge", 1)]
    again = await cli(
        "tx", "refuse-compensation", cid, "--reason", WHY, "--principal", "alice",
        "--role", "approver", "--server", cs.target, "--json",
    )  # fmt: skip
    assert again.exit_code != 0
    assert "refused already" in " ".join(again.output.split())


async def test_mcp_refuse_compensation_over_a_server(cs: Served, log: str, tmp_path: Path) -> None:
    cid = await _waiting_compensation(cs.engine, log)
    async with stdio_client(tmp_path / "unused", "auto", "--server", cs.target) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        refuse_tool = tools["refuse_compensation"]
        assert set(refuse_tool.input_schema["required"]) == {
            "transaction_id",
            "principal",
            "reason",
        }
        assert "approver" in (refuse_tool.description or "")
        args = {"transaction_id": cid, "principal": "bob", "roles": ["approver"], "reason": WHY}
        own = structured(await c.call_tool("refuse_compensation", args))
        assert own["error"]["code"] == "COMPENSATION_APPROVAL_REFUSED"
        assert own["continuation"]["kind"] == "ResolveExternally"
        assert "refuse_compensation" in own["continuation"]["instruction"]
        done = await c.call_tool("refuse_compensation", dict(args, principal="alice"))
        got = structured(done)
        assert got["ok"]
        assert got["transaction_status"] == "FAILED"
        assert got["finished"]
        assert [e.endswith(REFUSED) for e in got["compensation_errors"]] == [True]
        assert "a person must settle" in text(done)
        again = structured(
            await c.call_tool(
                "approve_compensation",
                {"transaction_id": cid, "principal": "alice", "roles": ["approver"]},
            )
        )
        assert again["error"]["code"] == "COMPENSATION_APPROVAL_REFUSED"
        assert "refused already" in again["error"]["message"]
    assert undone(log) == [("comp.charge", 1)]


async def test_mcp_embedded_refuses_the_abort_a_failed_step_waits_in(
    tmp_path: Path, log: str
) -> None:
    async with stdio_client(tmp_path / "data", "legacy", "--tools", "compensation_tools") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        step = {"transaction_id": tx, "step_id": 1, "tool": "comp.refund"}
        r = await c.call_tool("run_step", {**step, "arguments": {"n": 1, "log": log}})
        assert structured(r)["status"] == "SUCCESS", text(r)
        failed = structured(
            await c.call_tool(
                "run_step", {"transaction_id": tx, "step_id": 2, "tool": "comp.fatal"}
            )
        )
        assert failed["error"]["code"] == "TRANSACTION_ABORTED"
        assert "refuse_compensation" in failed["continuation"]["instruction"]
        no_reason = structured(
            await c.call_tool(
                "refuse_compensation",
                {"transaction_id": tx, "principal": "alice", "roles": ["approver"]},
            )
        )
        assert not no_reason["ok"]
        assert "reason" in json.dumps(no_reason)
        done = structured(
            await c.call_tool(
                "refuse_compensation",
                {
                    "transaction_id": tx,
                    "principal": "alice",
                    "roles": ["approver"],
                    "reason": WHY,
                },
            )
        )
        assert done["ok"]
        assert done["transaction_status"] == "FAILED"
        got = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert got["requires_human"]
    assert undone(log) == []


@pytest.fixture
async def http_engine(open_engine: Any) -> AsyncIterator[tuple[agenttx.Engine, str]]:
    """An engine with the compensation tools behind the real HTTP listener (``/v1``)."""
    engine = await open_engine(tools=TOOLS, background=False)
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


async def test_http_refuse_compensation(http_engine: tuple[agenttx.Engine, str], log: str) -> None:
    engine, base = http_engine
    tx = await _waiting_rollback(engine, log)
    path = f"/v1/transactions/{tx}/refuse-compensation"

    def post(body: dict[str, Any]) -> Any:
        return request(base, "POST", path, body)

    doc = (await asyncio.to_thread(request, base, "GET", "/openapi.json")).json
    op = doc["paths"]["/v1/transactions/{transaction_id}/refuse-compensation"]["post"]
    assert op["operationId"] == "RefuseCompensation"
    no_reason = await asyncio.to_thread(post, {"principal": "alice"})
    assert_error_shape(no_reason, 400)
    too_long = await asyncio.to_thread(post, {"principal": "alice", "reason": "é" * 4000})
    assert_error_shape(too_long, 400, "INVALID_ARGUMENT")
    assert "over the limit of 4096" in too_long.json["error"]["message"]
    own = await asyncio.to_thread(post, {"principal": "bob", "reason": WHY})
    assert_error_shape(own, 409, "COMPENSATION_APPROVAL_REFUSED")
    assert undone(log) == []
    ok = await asyncio.to_thread(post, {"principal": "alice", "reason": WHY})
    assert ok.status == 200, ok.raw
    assert ok.json["transaction_status"] == "ROLLED_BACK"
    assert ok.json["finished"]
    assert [e.endswith(REFUSED) for e in ok.json["compensation_errors"]] == [True]
    assert undone(log) == [("comp.charge", 1)]
    again = await asyncio.to_thread(post, {"principal": "alice", "reason": WHY})
    assert_error_shape(again, 409, "COMPENSATION_APPROVAL_REFUSED")
