"""The commit preview shows what undoing the steps would do (issue 13 points 5 and 8: "preview
shows it beforehand", "preview shows what a compensation would run"): per undoable step,
newest first, the verdict of ``compensation_plan`` — run, awaiting_approval, past_window,
not_supported — with the reason, on both stores, over gRPC and the sync client, the CLI and
MCP. The verdicts move with the clock, the change hash does not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from click.testing import CliRunner

import agenttx
from agenttx.cli import main
from agenttx.client import AgentTxClient
from compensation_tools import TOOLS
from mcp_harness import stdio_client, structured, text

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]

STEPS = ("comp.charge", "comp.launch", "comp.refund", "comp.brief")
EXPECTED = [
    (4, "comp.brief", "run"),
    (3, "comp.refund", "awaiting_approval"),
    (2, "comp.launch", "not_supported"),
    (1, "comp.charge", "run"),
]


async def four_steps(engine: agenttx.Engine, log: Path) -> str:
    tx = (await engine.begin(agent_id="a", principal="bob")).transaction_id
    for n, tool in enumerate(STEPS, start=1):
        r = await engine.execute_step(tx, n, tool, {"n": n, "log": str(log)})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    return tx


def verdicts(actions: Any) -> list[tuple[int, str, str]]:
    return [(a.step_id, a.tool, a.verdict) for a in actions]


async def test_the_preview_shows_each_steps_undo_verdict(
    open_engine: Any, clock: Any, tmp_path: Path
) -> None:
    engine = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = await four_steps(engine, tmp_path / "undone.jsonl")
    p = await engine.preview_commit(tx)
    assert verdicts(p.compensation) == EXPECTED
    by_step = {a.step_id: a for a in p.compensation}
    assert "rollback_not_supported" in by_step[2].reason
    assert by_step[3].needs_approval
    clock.advance(0.5)  # past comp.brief's 10 ms window, inside comp.charge's hour
    later = await engine.preview_commit(tx)
    assert verdicts(later.compensation)[0] == (4, "comp.brief", "past_window")
    assert "window ended" in later.compensation[0].reason
    assert later.change_hash == p.change_hash  # the same change: the clock is not part of it
    # What the preview said is what a rollback then does.
    r = await engine.rollback(tx)
    assert r.compensation_approval_pending  # comp.refund waits for an approver, as shown


async def test_a_preview_with_nothing_to_undo_shows_no_compensation(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin(agent_id="a")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    assert (await engine.preview_commit(tx)).compensation == []


async def test_over_grpc_the_sync_client_and_the_cli(
    serve: Any, clock: Any, tmp_path: Path
) -> None:
    s: Served = await serve(tools=TOOLS, clock=clock, background=False)
    tx = await four_steps(s.engine, tmp_path / "undone.jsonl")

    def over_the_wire() -> tuple[Any, str, dict[str, Any]]:
        with AgentTxClient(s.target, timeout=20) as c:
            p = c.preview_commit(tx)
        shown = CliRunner().invoke(main, ["tx", "preview", tx, "--server", s.target])
        as_json = CliRunner().invoke(main, ["tx", "preview", tx, "--server", s.target, "--json"])
        assert shown.exit_code == 0, shown.output
        assert as_json.exit_code == 0, as_json.output
        return p, shown.output, json.loads(as_json.output)

    p, shown, as_json = await asyncio.to_thread(over_the_wire)
    assert verdicts(p.compensation) == EXPECTED
    assert "undo not supported step 2 comp.launch (rollback_not_supported)" in shown
    assert "undo awaiting approval step 3 comp.refund (supported)" in shown
    assert [a["verdict"] for a in as_json["compensation"]] == [v for _, _, v in EXPECTED]


async def test_over_mcp(tmp_path: Path) -> None:
    log = str(tmp_path / "undone.jsonl")
    async with stdio_client(tmp_path / "data", "legacy", "--tools", "compensation_tools") as c:
        begun = structured(await c.call_tool("begin_transaction", {"agent_id": "a"}))
        tx = begun["transaction_id"]
        for n, tool in enumerate(STEPS[:2], start=1):
            step = structured(
                await c.call_tool(
                    "run_step",
                    {
                        "transaction_id": tx,
                        "step_id": n,
                        "tool": tool,
                        "arguments": {"n": n, "log": log},
                    },
                )
            )
            assert step["status"] == "SUCCESS", step
        shown = await c.call_tool("preview_commit", {"transaction_id": tx})
        plan = structured(shown)["compensation"]
        assert [(a["step_id"], a["verdict"]) for a in plan] == [
            (2, "not_supported"),
            (1, "run"),
        ]
        assert "- undo of step 2 comp.launch: not supported" in text(shown)
