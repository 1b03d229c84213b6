"""Dry run from every surface, and undo/redo in each surface's own terms: the gRPC dry-run
fields (both stores), the async and sync clients with their refusals rebuilt from the wire,
the ``Transaction`` helper, the CLI's words (``agenttx tx undo|redo``) and the MCP tools'
continuations over stdio, embedded and over ``--server``. The undo and redo outcomes every
surface shares are in the conformance table (``tests/surfaces/cases.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result

import agenttx
from agenttx import Fidelity, StepStatus
from agenttx.cli import main
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from mcp_harness import stdio_client, structured, text
from server_process import start_server
from undo_tools import CALLS, TOOLS

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


@pytest.fixture
async def u(serve: Callable[..., Awaitable[Served]]) -> Served:
    CALLS.clear()
    return await serve(tools=TOOLS)


async def test_grpc_dry_run_fields_and_nothing_journaled(u: Served) -> None:
    tx = await u.begin()
    await u.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    before = await u.get(tx)
    r = await u.step(tx, 2, "t.simulated", {"amount": 3}, dry_run=True)
    assert r.status == pb.STEP_STATUS_SUCCESS
    assert (r.dry_run, r.fidelity, r.policy_decision, r.next_step_id) == (
        True,
        "full_simulation",
        "allowed",
        2,
    )
    report = json.loads(r.dry_run_json)
    assert report["declared"] == "full_simulation"
    assert report["would_succeed"] is True
    assert report["changes"]["undo"] == ["t.simulated#undo"]
    assert json.loads(r.output_json) == {"charged": 3, "simulated": True}
    after = await u.get(tx)
    assert (after.revision, len(after.steps)) == (before.revision, len(before.steps))
    failed = await u.step(tx, 2, "t.validated", {"amount": -5}, dry_run=True)
    assert failed.status == pb.STEP_STATUS_FAILED
    assert failed.fidelity == "downstream_validation"
    assert failed.clean_hint.startswith("Hint: ")
    assert failed.next_step_id == 2
    assert failed.transaction_status == "ACTIVE"
    plain = await u.step(tx, 2, "kv.get", {"key": "a"})
    assert not plain.dry_run
    assert plain.fidelity == ""  # a real step says nothing of dry runs
    assert CALLS == []
    tools = {t.name: t for t in (await u.stub.ListTools(pb.ListToolsRequest())).tools}
    assert (tools["t.unvalidated"].dry_run, tools["t.unvalidated"].dry_run_reached) == (
        "downstream_validation",
        "policy_and_schema",
    )
    assert tools["kv.put"].dry_run_reached == "full_simulation"
    assert tools["kv.put"].undoable
    assert not tools["t.irreversible"].undoable


async def test_the_async_client_rebuilds_refusals_with_their_hint(u: Served) -> None:
    c = u.client
    tx = (await c.begin()).transaction_id
    with pytest.raises(agenttx.UndoRefused) as nothing:
        await c.undo_step(tx)
    assert (nothing.value.step_id, nothing.value.transaction_id) == (0, tx)
    assert "no live step" in nothing.value.hint
    await c.execute_step(tx, 1, "t.irreversible", {"to": "bob"})
    with pytest.raises(agenttx.UndoRefused) as irreversible:
        await c.undo_step(tx)
    assert irreversible.value.step_id == 1
    assert "irreversible" in irreversible.value.hint
    await c.execute_step(tx, 2, "kv.put", {"key": "k", "value": 1})
    undone = await c.undo_step(tx)
    assert (undone.step_id, undone.next_step_id, undone.can_redo) == (2, 2, True)
    await c.execute_step(tx, 2, "kv.put", {"key": "k", "value": 5})
    with pytest.raises(agenttx.RedoRefused) as moved:
        await c.redo_step(tx)
    assert moved.value.step_id == 2
    assert "send step 3 again" in moved.value.hint
    d = await c.execute_step(tx, 3, "kv.put", {"key": "k", "value": 6}, dry_run=True)
    assert d.dry_run is not None
    assert d.dry_run.fidelity is Fidelity.FULL_SIMULATION
    assert d.dry_run.changes["writes"] == [{"key": "kv/k", "before": 5, "after": 6}]
    info = await c.get_transaction(tx)
    assert (info.revision_count, info.can_undo, info.can_redo, info.can_commit) == (
        2,
        True,
        False,
        True,
    )


async def test_the_sync_transaction_helper_undoes_redoes_and_dry_runs(u: Served) -> None:
    def drive() -> tuple[Any, ...]:
        with AgentTxClient(u.target, retry=RetryPolicy(max_attempts=1), timeout=10) as c:
            with c.transaction() as t:
                t.step("kv.put", {"key": "x", "value": 1})
                t.step("kv.put", {"key": "y", "value": 2})
                preview = t.dry_run("kv.put", {"key": "z", "value": "${steps.2.value}"})
                undone = t.undo()
                after_undo = (t.next_step_id, dict(t.outputs))
                redone = t.redo()
                after_redo = (t.next_step_id, dict(t.outputs))
                tx = t.transaction_id
            committed = c.get_transaction(tx)
        return preview, undone, after_undo, redone, after_redo, committed

    preview, undone, after_undo, redone, after_redo, committed = await asyncio.to_thread(drive)
    assert preview.status is StepStatus.SUCCESS
    assert preview.next_step_id == 3
    assert preview.dry_run.changes["writes"] == [{"key": "kv/z", "before": None, "after": 2}]
    assert undone.step_id == 2
    assert after_undo == (2, {1: {"key": "x", "value": 1}})
    assert redone.next_step_id == 3
    assert after_redo == (3, {1: {"key": "x", "value": 1}, 2: {"key": "y", "value": 2}})
    assert committed.status.value == "COMMITTED"
    assert committed.revision_count == 2


async def test_cli_tx_undo_and_redo(u: Served) -> None:
    tx = await u.begin()
    await u.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    undone = await cli("tx", "undo", tx, "--server", u.target)
    assert undone.exit_code == 0, undone.output
    assert "undid step 1" in undone.output
    assert "next step 1" in undone.output
    assert "redo" in undone.output
    again = await cli("tx", "undo", tx, "--server", u.target)
    assert again.exit_code == 1
    assert "no live step" in again.output
    redone = await cli("tx", "redo", tx, "--server", u.target, "--json")
    assert redone.exit_code == 0, redone.output
    assert json.loads(redone.output)["next_step_id"] == 2
    refused = await cli("tx", "redo", tx, "--server", u.target)
    assert refused.exit_code == 1
    assert "no undone step" in refused.output
    shown = await cli("tx", "show", tx, "--server", u.target)
    assert shown.exit_code == 0, shown.output
    assert "1 of 100000 (99999 left); can undo, commit, rollback" in shown.output


@pytest.mark.stores("sqlite")
async def test_mcp_undo_redo_and_dry_run_with_continuations(tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "data", "auto") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        step = {"transaction_id": tx, "tool": "kv.put"}
        await c.call_tool("run_step", {**step, "step_id": 1, "arguments": {"key": "a", "value": 1}})
        dry = await c.call_tool(
            "run_step",
            {**step, "step_id": 2, "arguments": {"key": "a", "value": 2}, "dry_run": True},
        )
        d = structured(dry)
        assert not dry.is_error
        assert (d["ok"], d["dry_run"], d["fidelity"], d["next_step_id"]) == (
            True,
            True,
            "full_simulation",
            2,
        )
        assert d["report"]["changes"]["writes"] == [{"key": "kv/a", "before": 1, "after": 2}]
        assert "Nothing was run" in text(dry)
        would_fail = structured(
            await c.call_tool(
                "run_step", {**step, "step_id": 2, "arguments": {"key": 3}, "dry_run": "true"}
            )
        )
        assert (would_fail["ok"], would_fail["status"]) == (True, "FAILED")
        assert would_fail["report"]["would_succeed"] is False

        undone = await c.call_tool("undo_step", {"transaction_id": tx})
        assert structured(undone)["next_step_id"] == 1, text(undone)
        assert "redo_step" in text(undone)
        nothing = structured(await c.call_tool("undo_step", {"transaction_id": tx}))
        assert nothing["error"]["code"] == "UNDO_REFUSED"
        assert nothing["continuation"]["kind"] == "ChooseTool"
        assert "run_step" in nothing["continuation"]["tools"]
        redone = structured(await c.call_tool("redo_step", {"transaction_id": tx}))
        assert (redone["ok"], redone["next_step_id"]) == (True, 2)
        twice = structured(await c.call_tool("redo_step", {"transaction_id": tx}))
        assert twice["error"]["code"] == "REDO_REFUSED"
        assert twice["continuation"] == {
            "kind": "CallTool",
            "tool": "run_step",
            "instruction": twice["continuation"]["instruction"],
        }
        assert (
            "run_step" in twice["continuation"]["instruction"]
            or "execute_step" in (twice["continuation"]["instruction"])
        )
        info = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert (info["revision_count"], info["can_undo"], info["can_redo"]) == (1, True, False)


@pytest.mark.stores("sqlite")
async def test_mcp_dry_run_over_a_running_server(tmp_path: Path) -> None:
    # Undo and redo over `agenttx mcp --server` are the conformance table's (mcp-remote).
    server = start_server(tmp_path / "server")
    try:
        async with stdio_client(tmp_path / "unused", "legacy", "--server", server.address) as c:
            tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
            step = {"transaction_id": tx, "tool": "kv.put", "step_id": 1}
            await c.call_tool("run_step", {**step, "arguments": {"key": "r", "value": 1}})
            look = {**step, "tool": "kv.get", "step_id": 2, "arguments": {"key": "r"}}
            dry = structured(await c.call_tool("run_step", {**look, "dry_run": True}))
            assert (dry["dry_run"], dry["next_step_id"]) == (True, 2)
            assert dry["report"]["would_succeed"] is True
    finally:
        assert server.terminate() == 0


async def test_the_async_transaction_helper_undoes_redoes_and_dry_runs(u: Served) -> None:
    async with u.client.transaction() as t:
        await t.step("kv.put", {"key": "x", "value": 1})
        preview = await t.dry_run("kv.put", {"key": "x", "value": 2})
        assert preview.dry_run is not None
        assert preview.dry_run.changes["writes"] == [{"key": "kv/x", "before": 1, "after": 2}]
        assert t.next_step_id == 2
        undone = await t.undo()
        assert (undone.step_id, t.next_step_id, t.outputs) == (1, 1, {})
        await t.redo()
        assert (t.next_step_id, t.outputs) == (2, {1: {"key": "x", "value": 1}})
        await t.undo()
        await t.step("kv.put", {"key": "y", "value": 3})  # the redo is gone now
        with pytest.raises(agenttx.RedoRefused):
            await t.redo()
        tx = t.transaction_id
    info = await u.client.get_transaction(tx)
    assert info.status.value == "COMMITTED"
    assert [s.output for s in info.steps if s.live] == [{"key": "y", "value": 3}]
