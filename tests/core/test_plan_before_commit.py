"""A tool that requires a plan before commit (seed 002, ``requires_plan_before_commit``): a
transaction with a step of it commits only with the receipt of a current preview; no approver
is needed, and a transaction without such a step commits as always. On every store."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx.errors import PlanRequired, SnapshotMismatch


@agenttx.tool(name="plan.migrate", effect="state", requires_plan_before_commit=True)
async def migrate(ctx: agenttx.ToolContext, table: str) -> dict[str, str]:
    """Migrate a table (a change someone should see before it lands)."""
    await ctx.state.put(f"migrated/{table}", True)
    return {"migrated": table}


async def migrating(engine: agenttx.Engine) -> str:
    tx = (await engine.begin(agent_id="dba")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "note", "value": "before"})
    r = await engine.execute_step(tx, 2, "plan.migrate", {"table": "users"})
    assert r.status.value == "SUCCESS", r
    return tx


async def test_a_commit_without_a_preview_is_refused_naming_the_tool(open_engine: Any) -> None:
    engine = await open_engine(tools=[migrate])
    tx = await migrating(engine)
    with pytest.raises(PlanRequired, match=r"plan\.migrate require a plan before commit") as e:
        await engine.commit(tx)
    assert e.value.tools == "plan.migrate"
    info = await engine.get_transaction(tx)
    assert info.status.value == "ACTIVE"  # refused, not ended: preview and commit again


async def test_the_previews_receipt_commits_it_with_no_approver(open_engine: Any) -> None:
    engine = await open_engine(tools=[migrate])
    tx = await migrating(engine)
    p = await engine.preview_commit(tx)
    assert "migrated/users" in [c.key for c in p.changes.state]
    done = await engine.commit(tx, receipt_id=p.receipt_id)
    assert done.committed
    info = await engine.get_transaction(tx)
    assert info.receipts[0].receipt_id == p.receipt_id


async def test_a_step_after_the_preview_makes_its_receipt_stale(open_engine: Any) -> None:
    engine = await open_engine(tools=[migrate])
    tx = await migrating(engine)
    p = await engine.preview_commit(tx)
    await engine.execute_step(tx, 3, "kv.put", {"key": "note", "value": "after"})
    with pytest.raises(SnapshotMismatch, match="a later change voided it"):
        await engine.commit(tx, receipt_id=p.receipt_id)
    again = await engine.preview_commit(tx)
    assert (await engine.commit(tx, receipt_id=again.receipt_id)).committed


async def test_a_transaction_without_such_a_step_commits_as_always(open_engine: Any) -> None:
    engine = await open_engine(tools=[migrate])
    tx = (await engine.begin(agent_id="dba")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "note", "value": "plain"})
    assert (await engine.commit(tx)).committed


async def test_the_tool_listing_says_it_requires_a_plan(open_engine: Any) -> None:
    engine = await open_engine(tools=[migrate])
    listed = {t["name"]: t for t in engine.list_tools()}
    assert listed["plan.migrate"]["requires_plan_before_commit"] is True
    assert listed["kv.put"]["requires_plan_before_commit"] is False
