"""Every reply that shows a transaction's state carries the snapshot to echo (issue 13 point
1): undo, redo, reconcile/resolve and a compensation approval too, embedded and over gRPC,
on both stores — and the snapshot is the one ``commit(expected_revision=…)`` accepts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import agenttx
from agenttx.wire import agenttx_pb2 as pb

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


@agenttx.tool(name="snap.charge", effect="compensatable")
async def charge(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    """An outside call whose answer was lost."""
    await ctx.register_undo({"n": n})
    raise agenttx.UncertainOutcome("the provider did not answer", operation_id=f"op-{n}")


@charge.undo
async def refund(ctx: agenttx.ToolContext, n: int) -> None:
    pass


@agenttx.tool(name="snap.refund", effect="compensatable", compensation_approval=True)
async def approved_refund(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    """An outside call whose undo needs an approver."""
    await ctx.register_undo({"n": n})
    return {"n": n}


@approved_refund.undo
async def approved_refund_undo(ctx: agenttx.ToolContext, n: int) -> None:
    pass


TOOLS = [charge, approved_refund]


async def test_embedded_undo_redo_and_resolve_replies_carry_the_snapshot(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=TOOLS, background=False)
    tx = (await engine.begin(agent_id="a")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    undone = await engine.undo_step(tx)
    assert undone.snapshot == agenttx.Snapshot(tx, undone.revision)
    assert undone.snapshot == (await engine.get_transaction(tx)).snapshot
    redone = await engine.redo_step(tx)
    assert redone.snapshot == (await engine.get_transaction(tx)).snapshot
    unknown = await engine.execute_step(tx, 2, "snap.charge", {"n": 2})
    assert unknown.status is agenttx.StepStatus.OUTCOME_UNKNOWN
    settled = await engine.resolve_step(tx, 2, "happened", output={"n": 2}, reason="checked")
    assert settled.snapshot == (await engine.get_transaction(tx)).snapshot
    done = await engine.commit(tx, expected_revision=settled.snapshot.revision)
    assert done.committed


async def test_grpc_replies_carry_the_snapshot(serve: Any) -> None:
    s: Served = await serve(tools=TOOLS, background=False)
    tx = await s.begin(agent_id="a", principal="bob")
    await s.step(tx, 1, "kv.put", {"key": "k", "value": 1})

    def pair(reply: Any) -> tuple[str, int]:
        return reply.snapshot.transaction_id, reply.snapshot.revision

    undone = await s.stub.UndoStep(pb.UndoStepRequest(transaction_id=tx))
    assert pair(undone) == (tx, undone.revision)
    assert undone.revision == (await s.get(tx)).revision
    redone = await s.stub.RedoStep(pb.RedoStepRequest(transaction_id=tx))
    assert pair(redone) == (tx, (await s.get(tx)).revision)
    await s.step(tx, 2, "snap.charge", {"n": 2})
    settled = await s.stub.ResolveStep(
        pb.ResolveStepRequest(transaction_id=tx, step_id=2, outcome="happened", reason="seen")
    )
    assert pair(settled) == (tx, (await s.get(tx)).revision)
    await s.step(tx, 3, "snap.refund", {"n": 3})
    waiting = await s.stub.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id=tx))
    assert waiting.compensation_approval_pending
    approved = await s.stub.ApproveCompensation(
        pb.ApproveCompensationRequest(transaction_id=tx, principal="alice", roles=["approver"])
    )
    assert pair(approved) == (tx, approved.revision)
    assert approved.revision == (await s.get(tx)).revision
