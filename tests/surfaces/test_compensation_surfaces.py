"""Compensation from every surface, on every store: the CompensateTransaction and
ApproveCompensation RPCs, the async and sync clients, ``agenttx tx compensate`` and
``tx approve-compensation``, and the MCP tools (over ``agenttx mcp --server``, which reaches
the served engine through the client, and embedded over stdio)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx.cli import main
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from compensation_tools import TOOLS, undone
from mcp_harness import stdio_client, structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "undone.jsonl")


@pytest.fixture
async def cs(serve: Callable[..., Awaitable[Served]]) -> Served:
    return await serve(tools=TOOLS)


async def _committed(s: Served, *tools: str, log: str, principal: str = "") -> str:
    meta = {"principal": principal} if principal else None
    tx = (await s.engine.begin(agent_id="a", metadata=meta)).transaction_id
    for i, name in enumerate(tools, start=1):
        r = await s.engine.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    await s.engine.commit(tx)
    return tx


async def test_compensate_over_grpc_and_the_async_client(cs: Served, log: str) -> None:
    # The plan (compensation_plan) on every surface is the conformance table's.
    tx = await _committed(cs, "comp.charge", "comp.launch", "comp.best", log=log)
    k = await cs.client.compensate(tx, reason="customer refund")
    assert k.compensation_for == tx
    assert k.status == "failed"  # step 2 cannot be undone: reported, not skipped
    assert [(e["step"], e["verdict"]) for e in k.evidence] == [(2, "not_supported")]
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]
    assert k == await cs.engine.compensation(k.transaction_id)
    info = await cs.client.get_transaction(k.transaction_id)
    assert info.compensation_for == tx
    assert info.status is agenttx.TxStatus.FAILED
    assert (await cs.client.verify_audit(k.transaction_id)).ok
    listed = await cs.client.list_transactions(statuses=["FAILED"])
    assert [(t.transaction_id, t.compensation_for) for t in listed.transactions] == [
        (k.transaction_id, tx)
    ]
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await cs.stub.CompensateTransaction(pb.CompensateTransactionRequest(transaction_id=tx))
    assert exc.value.code() is grpc.StatusCode.ALREADY_EXISTS


async def test_approval_over_grpc_refuses_the_wrong_principal(cs: Served, log: str) -> None:
    tx = await _committed(cs, "comp.refund", log=log, principal="bob")
    k = await cs.client.compensate(tx, reason="chargeback", principal="bob")
    assert k.status == "awaiting_approval"
    assert (await cs.client.get_transaction(k.transaction_id)).compensation_approval_pending
    with pytest.raises(agenttx.CompensationApprovalRefused, match="own principal"):
        await cs.client.approve_compensation(k.transaction_id, "bob", ["approver"])
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await cs.stub.ApproveCompensation(
            pb.ApproveCompensationRequest(
                transaction_id=k.transaction_id, principal="carol", roles=["viewer"]
            )
        )
    assert exc.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    r = await cs.client.approve_compensation(k.transaction_id, "alice", ["approver"])
    assert r.rolled_back
    assert r.transaction_status is agenttx.TxStatus.COMPENSATED
    assert undone(log) == [("comp.refund", 1)]


async def test_a_waiting_rollback_over_grpc_and_the_sync_client(cs: Served, log: str) -> None:
    tx = (await cs.engine.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await cs.engine.execute_step(tx, 1, "comp.refund", {"n": 1, "log": log})

    def drive() -> tuple[Any, Any, Any]:
        with AgentTxClient(cs.target, retry=RetryPolicy(max_attempts=1), timeout=10) as c:
            waiting = c.rollback(tx, reason="cancel")
            info = c.get_transaction(tx)
            return waiting, info, c.approve_compensation(tx, "alice", ["approver"])

    waiting, info, done = await asyncio.to_thread(drive)
    assert waiting.compensation_approval_pending
    assert waiting.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert info.compensation_approval_pending
    assert done.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert undone(log) == [("comp.refund", 1)]
    tools = await cs.client.list_tools()
    refund = next(t for t in tools if t.name == "comp.refund")
    assert refund.compensation_approval
    assert next(t for t in tools if t.name == "comp.brief").compensation_window_s == 0.01


async def test_cli_compensate_preview_and_approve(cs: Served, log: str) -> None:
    tx = await _committed(cs, "comp.charge", "comp.refund", log=log, principal="bob")
    preview = await cli("tx", "compensate", tx, "--preview", "--server", cs.target)
    assert preview.exit_code == 0, preview.output
    said = " ".join(preview.output.split())  # rich wraps at the terminal's width
    assert "step 2 comp.refund" in said
    assert "awaiting_approval" in said
    assert undone(log) == []
    started = await cli(
        "tx", "compensate", tx, "--reason", "refund", "--server", cs.target, "--json"
    )
    assert started.exit_code == 0, started.output
    k = json.loads(started.output)
    assert k["status"] == "awaiting_approval"
    refused = await cli(
        "tx", "approve-compensation", k["transaction_id"], "--principal", "bob",
        "--role", "approver", "--server", cs.target,
    )  # fmt: skip
    assert refused.exit_code != 0
    assert "own principal" in " ".join(refused.output.split())
    ok = await cli(
        "tx", "approve-compensation", k["transaction_id"], "--principal", "alice",
        "--role", "approver", "--server", cs.target,
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "COMPENSATED" in ok.output
    assert undone(log) == [("comp.refund", 2), ("comp.charge", 1)]


async def test_cli_compensate_exits_non_zero_when_a_step_is_not_undone(
    cs: Served, log: str
) -> None:
    tx = await _committed(cs, "comp.launch", log=log)
    r = await cli("tx", "compensate", tx, "--reason", "r", "--server", cs.target)
    assert r.exit_code == 1, r.output
    said = " ".join(r.output.split())
    assert "not undone" in said
    assert "rollback_not_supported" in said


async def test_mcp_tools_over_a_server_with_continuations(
    cs: Served, log: str, tmp_path: Path
) -> None:
    tx = await _committed(cs, "comp.charge", "comp.refund", log=log, principal="bob")
    open_tx = (await cs.engine.begin(agent_id="a")).transaction_id
    async with stdio_client(tmp_path / "unused", "auto", "--server", cs.target) as c:
        listed = {t.name for t in (await c.list_tools()).tools}
        assert {"compensate_transaction", "approve_compensation"} <= listed
        preview = structured(
            await c.call_tool("compensate_transaction", {"transaction_id": tx, "preview": True})
        )
        assert preview["ok"]
        assert [a["verdict"] for a in preview["actions"]] == ["awaiting_approval", "run"]
        not_committed = structured(
            await c.call_tool("compensate_transaction", {"transaction_id": open_tx})
        )
        assert not not_committed["ok"]
        assert not_committed["continuation"]["kind"] == "ChooseTool"
        assert "rollback_transaction" in not_committed["continuation"]["tools"]
        started = await c.call_tool(
            "compensate_transaction", {"transaction_id": tx, "reason": "refund", "principal": "bob"}
        )
        k = structured(started)
        assert k["status"] == "awaiting_approval"
        assert "approve_compensation" in text(started)
        own = structured(
            await c.call_tool(
                "approve_compensation",
                {"transaction_id": k["transaction_id"], "principal": "bob", "roles": ["approver"]},
            )
        )
        assert own["error"]["code"] == "COMPENSATION_APPROVAL_REFUSED"
        assert own["continuation"]["kind"] == "ResolveExternally"
        done = structured(
            await c.call_tool(
                "approve_compensation",
                {
                    "transaction_id": k["transaction_id"],
                    "principal": "alice",
                    "roles": ["approver"],
                },
            )
        )
        assert done["ok"]
        assert done["transaction_status"] == "COMPENSATED"
        again = structured(await c.call_tool("compensate_transaction", {"transaction_id": tx}))
        assert again["continuation"]["tool"] == "get_transaction"
    assert undone(log) == [("comp.refund", 2), ("comp.charge", 1)]


async def test_mcp_embedded_refuses_a_partial_rollback_over_an_unsupported_step(
    tmp_path: Path, log: str
) -> None:
    async with stdio_client(tmp_path / "data", "legacy", "--tools", "compensation_tools") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        for i, tool in enumerate(("comp.charge", "comp.launch"), start=1):
            r = await c.call_tool(
                "run_step",
                {"transaction_id": tx, "step_id": i, "tool": tool,
                 "arguments": {"n": i, "log": log}},
            )  # fmt: skip
            assert structured(r)["status"] == "SUCCESS", text(r)
        refused = structured(
            await c.call_tool("rollback_transaction", {"transaction_id": tx, "to_step": 1})
        )
        assert refused["error"]["code"] == "COMPENSATION_REFUSED"
        assert refused["continuation"]["kind"] == "ReviseRequest"
        assert "to_step 3" in refused["continuation"]["instruction"]
        assert structured(await c.call_tool("commit_transaction", {"transaction_id": tx}))["ok"]
        k = structured(await c.call_tool("compensate_transaction", {"transaction_id": tx}))
        assert k["status"] == "failed"
        assert k["requires_human"]
    assert undone(log) == [("comp.charge", 1)]


async def test_mcp_a_step_on_a_rollback_waiting_for_approval_points_to_get_transaction(
    tmp_path: Path, log: str
) -> None:
    async with stdio_client(tmp_path / "data", "legacy", "--tools", "compensation_tools") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        step = {"transaction_id": tx, "step_id": 1, "tool": "comp.refund"}
        r = await c.call_tool("run_step", {**step, "arguments": {"n": 1, "log": log}})
        assert structured(r)["status"] == "SUCCESS", text(r)
        waiting = await c.call_tool("rollback_transaction", {"transaction_id": tx})
        assert structured(waiting)["compensation_approval_pending"]
        assert "approve_compensation" in text(waiting)
        blocked = structured(
            await c.call_tool("run_step", {**step, "step_id": 2, "arguments": {"n": 2, "log": log}})
        )
        assert blocked["error"]["code"] == "NOT_ACTIVE"
        assert blocked["continuation"]["tool"] == "get_transaction"
        assert "approve_compensation" in blocked["continuation"]["instruction"]
    assert undone(log) == []


async def test_cli_rollback_says_it_waits_for_an_approver(cs: Served, log: str) -> None:
    tx = (await cs.engine.begin(agent_id="a", metadata={"principal": "bob"})).transaction_id
    await cs.engine.execute_step(tx, 1, "comp.refund", {"n": 1, "log": log})
    r = await cli("tx", "rollback", tx, "--server", cs.target)
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())  # rich wraps at the terminal's width
    assert "waits for an approver" in said
    assert "approve-compensation" in said
    assert undone(log) == []


async def test_mcp_a_step_whose_abort_waits_for_an_approver_says_so(
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
        assert "waits for an approver" in failed["error"]["message"]
        assert failed["continuation"]["kind"] == "ResolveExternally"
        assert "approve_compensation" in failed["continuation"]["instruction"]
        assert undone(log) == []
        done = structured(
            await c.call_tool(
                "approve_compensation",
                {"transaction_id": tx, "principal": "alice", "roles": ["approver"]},
            )
        )
        assert done["transaction_status"] == "FAILED"
    assert undone(log) == [("comp.refund", 1)]
