"""Preview, snapshot echo and approval in each surface's own terms, on every store: what the
gRPC refusals carry beside their status, the async client's rebuilt errors, ``agenttx tx
preview|approve`` and ``--policy`` on the command line. The outcomes every surface shares
(preview, approve, commit with a receipt, a stale snapshot) are in the conformance table
(``tests/surfaces/cases.py``); MCP's words are in ``test_receipts_mcp.py``."""

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
from agenttx.error_details import from_metadata
from agenttx.errors import ApprovalRefused, ApprovalRequired, SnapshotMismatch
from agenttx.wire import agenttx_pb2 as pb

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: the in-process server needs the loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


async def refusal(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str, dict[str, Any]]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    reason, fields = from_metadata(err.value.trailing_metadata())
    return err.value.code(), reason, fields


async def test_grpc_refusals_carry_their_fields_and_listings_the_snapshot(s: Served) -> None:
    # The outcomes (preview, approve, commit, their reasons) are the conformance table's; here
    # what the wire adds: each refusal's ErrorInfo fields, a listing's snapshot, a change's text.
    begun = await s.stub.BeginTransaction(
        pb.BeginTransactionRequest(agent_id="a", principal="bob", mode="approval_required")
    )
    tx = begun.transaction_id
    step = await s.step(tx, 1, "kv.put", {"key": "g/k", "value": {"v": 1}})
    listed = await s.stub.ListTransactions(pb.ListTransactionsRequest())
    assert [t.snapshot.revision for t in listed.transactions] == [step.revision]

    code, reason, fields = await refusal(
        s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    )
    assert (code, reason, fields["transaction_id"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "APPROVAL_REQUIRED",
        tx,
    )
    p = await s.stub.PreviewCommit(pb.PreviewCommitRequest(transaction_id=tx))
    [change] = p.changes.state
    assert (change.key, change.before_json, json.loads(change.after_json)) == (
        "kv/g/k",
        "",
        {"v": 1},
    )
    assert (await s.engine.preview_commit(tx)).change_hash == p.change_hash
    code, reason, fields = await refusal(
        s.stub.ApproveCommit(
            pb.ApproveCommitRequest(
                transaction_id=tx, receipt_id=p.receipt_id, principal="bob", roles=["approver"]
            )
        )
    )
    assert (code, reason, fields["why"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "APPROVAL_REFUSED",
        "same_principal",
    )
    a = await s.stub.ApproveCommit(
        pb.ApproveCommitRequest(
            transaction_id=tx, receipt_id=p.receipt_id, principal="alice", roles=["approver"]
        )
    )
    assert (a.change_hash, a.revision) == (p.change_hash, p.revision)
    stale = pb.CommitTransactionRequest(
        transaction_id=tx, receipt_id=p.receipt_id, expected_revision=p.revision - 1
    )
    code, reason, fields = await refusal(s.stub.CommitTransaction(stale))
    assert (code, reason) == (grpc.StatusCode.ABORTED, "SNAPSHOT_MISMATCH")
    assert (fields["expected_revision"], fields["revision"]) == (p.revision - 1, p.revision)


async def test_the_async_client_previews_approves_and_rebuilds_the_errors(s: Served) -> None:
    c = s.client
    b = await c.begin(agent_id="a", principal="bob", mode="approval_required")
    tx = b.transaction_id
    assert b.snapshot == agenttx.Snapshot(tx, b.revision)
    await c.execute_step(tx, 1, "fs.write", {"path": "r.txt", "contents": "one\n"})
    await c.execute_step(tx, 2, "effect.stage", {"channel": "email", "payload": {"to": "z"}})
    p = await c.preview_commit(tx)
    assert p.changes == (await s.engine.preview_commit(tx)).changes
    assert p.changes.files[0].path == "r.txt"
    assert "+one" in p.changes.files[0].diff
    with pytest.raises(ApprovalRequired):
        await c.commit(tx, receipt_id=p.receipt_id)
    with pytest.raises(ApprovalRefused) as refused:
        await c.approve_commit(tx, p.receipt_id, principal="carol", roles=["agent"])
    assert refused.value.why == "not_approver"
    a = await c.approve_commit(tx, p.receipt_id, principal="carol", roles=["approver"])
    assert a == agenttx.Approval(
        tx, p.receipt_id, p.change_hash, p.revision, "carol", a.approved_at, p.expires_at
    )
    with pytest.raises(SnapshotMismatch) as moved:
        await c.commit(tx, receipt_id=p.receipt_id, expected_revision=1)
    assert (moved.value.expected_revision, moved.value.revision) == (1, p.revision)
    info = await c.get_transaction(tx)
    assert (info.mode, info.principal, info.snapshot.revision) == (
        "approval_required",
        "bob",
        p.revision,
    )
    done = await c.commit(tx, receipt_id=p.receipt_id, expected_revision=info.snapshot.revision)
    assert done.committed


async def test_cli_preview_and_approve(s: Served) -> None:
    tx = (await s.engine.begin(principal="bob", mode="approval_required")).transaction_id
    await s.engine.execute_step(tx, 1, "kv.put", {"key": "cli/k", "value": "new"})
    show = await cli("tx", "show", tx, "--server", s.target)
    assert "approval_required / bob" in show.output
    shown = await cli("tx", "preview", tx, "--server", s.target)
    assert shown.exit_code == 0, shown.output
    assert "approval required" in shown.output
    assert 'kv/cli/k: (absent) → "new"' in shown.output
    as_json = await cli("tx", "preview", tx, "--server", s.target, "--json")
    p = json.loads(as_json.output)
    assert p["changes"]["state"][0]["key"] == "kv/cli/k"
    same = await cli(
        "tx", "approve", tx, p["receipt_id"], "--principal", "bob", "--server", s.target
    )
    assert same.exit_code == 1
    assert "APPROVAL_REFUSED" in same.output or "FAILED_PRECONDITION" in same.output
    assert "began the transaction" in same.output  # refused as its own principal, no other way
    ok = await cli(
        "tx", "approve", tx, p["receipt_id"], "--principal", "alice", "--server", s.target
    )
    assert ok.exit_code == 0, ok.output
    assert f"approved {p['receipt_id']}" in ok.output
    done = await s.engine.commit(tx, receipt_id=p["receipt_id"])
    assert done.committed


def test_serve_and_mcp_refuse_a_bad_policy_file_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[limits]\nmax_steps = -1\n")
    for command, more in (
        ("serve", ["--listen-addr", "127.0.0.1:0", "--metrics-addr", "off"]),
        ("mcp", []),
    ):
        r = CliRunner().invoke(
            main, [command, "--policy", str(bad), "--data-dir", str(tmp_path / command), *more]
        )
        assert r.exit_code == 1, r.output
        assert f"{bad}:2: [limits] max_steps: must be 1..1000000" in r.output


async def test_a_served_policy_holds_over_grpc(
    serve: Callable[..., Awaitable[Served]], tmp_path: Path
) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("[limits]\nmax_steps = 1\n")
    s = await serve(safety_policy=policy)
    tx = await s.begin()
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    code, reason, fields = await refusal(s.step(tx, 2, "kv.put", {"key": "b", "value": 2}))
    assert (code, reason, fields) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "POLICY_VIOLATION",
        {"rule": "max_steps"},
    )


@agenttx.tool(name="rcpt.wide", effect="state")
async def wide(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    for i in range(n):
        await ctx.state.put(f"{i:06d}/" + "k" * 900, i)
    return {"written": n}


@pytest.mark.stores("sqlite")
async def test_a_preview_over_the_message_limit_is_refused_over_grpc_with_what_to_do(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    s = await serve(tools=[wide])
    tx = await s.begin()
    await s.step(tx, 1, "rcpt.wide", {"n": 5000})
    code, _, _ = await refusal(s.stub.PreviewCommit(pb.PreviewCommitRequest(transaction_id=tx)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(agenttx.FailedPrecondition, match="message limit; split the work"):
        await s.client.preview_commit(tx)
    p = await s.engine.preview_commit(tx)  # the embedded API has no message to fit
    assert len(p.changes.state) == 5000
