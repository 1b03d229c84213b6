"""The engine side of MCP's progress and cancellation, on both stores: a tool's
``report_progress`` reaches the step's caller's sink, and ``Engine.cancel_step`` turns a
running tool into a failed step (hint, the same step next, its undo run) — while any other
cancellation still propagates."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.types import StepStatus, Strategy
from waiting import eventually

UNDONE: list[str] = []


@agenttx.tool(name="t.report", timeout=10)
async def report(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, "x" * 5000 if i == n else f"{i}/{n}")
    return {"n": n}


@agenttx.tool(name="t.bad_progress", timeout=10)
async def bad_progress(ctx: agenttx.ToolContext) -> dict[str, int]:
    await ctx.report_progress(math.nan)
    return {}


@agenttx.tool(name="t.block", effect="compensatable", timeout=30)
async def block(ctx: agenttx.ToolContext, tag: str) -> dict[str, str]:
    await ctx.register_undo({"tag": tag})
    await asyncio.sleep(30)
    return {"tag": tag}


@block.undo
async def unblock(ctx: Any, tag: str) -> None:
    UNDONE.append(tag)


@agenttx.tool(name="t.sync_report", timeout=10)
def sync_report(ctx: agenttx.SyncToolContext) -> dict[str, bool]:
    ctx.report_progress(1, 1)
    return {"ok": True}


TOOLS = [report, bad_progress, block, sync_report]


async def test_progress_reaches_the_sink_and_a_long_message_is_cut(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    seen: list[tuple[float, float | None, str | None]] = []

    async def sink(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "t.report", {"n": 3}, progress=sink)
    assert r.status is StepStatus.SUCCESS
    assert seen[:2] == [(1.0, 3.0, "1/3"), (2.0, 3.0, "2/3")]
    assert seen[2][2] == "x" * 1024
    r = await engine.execute_step(tx, 2, "t.sync_report", {}, progress=sink)
    assert r.status is StepStatus.SUCCESS
    assert seen[3] == (1.0, 1.0, None)
    # Without a sink, progress is dropped and the tool runs the same.
    r = await engine.execute_step(tx, 3, "t.report", {"n": 2})
    assert r.status is StepStatus.SUCCESS


async def test_progress_that_is_not_a_finite_number_fails_the_step(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "t.bad_progress", {})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "finite" in r.clean_hint, r.clean_hint


async def test_a_cancelled_tool_fails_its_step_which_is_undone(
    open_engine: Any, tmp_path: Path
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    step = asyncio.ensure_future(engine.execute_step(tx, 1, "t.block", {"tag": "a"}))
    # Cancel as soon as the tool runs (a deadline, not 200 tries: on PostgreSQL on a busy
    # machine the step takes longer than 2 s to get there).
    await eventually(lambda: engine.cancel_step(tx, 1), "the tool started", interval=0.01)
    r = await asyncio.wait_for(step, 10)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "cancelled by its caller" in r.clean_hint
    assert (r.strategy, r.next_step_id) == (Strategy.RETRY, 1)
    assert "a" in UNDONE
    assert engine.cancel_step(tx, 1) is False  # nothing runs now
    info = await engine.get_transaction(tx)
    assert info.status.value == "ACTIVE"


async def test_another_cancellation_still_propagates(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    step = asyncio.ensure_future(engine.execute_step(tx, 1, "t.block", {"tag": "b"}))
    await asyncio.sleep(0.2)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
