"""An unknown undo in the words of the CLI and MCP (issue 30 point 14), against a running
server on both stores: ``agenttx tx show`` prints it, ``agenttx tx reconcile`` / ``agenttx tx
resolve`` settle it, and MCP says the rollback waits. What every surface shows of it (the view's
``requires_human``, ``reconcile_state``, ``compensation_errors``, the settled view) is in the
conformance table (``tests/surfaces/cases.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agenttx import AgentTxClient, TxStatus
from agenttx.cli import main
from mcp_harness import stdio_client, structured, text
from server_process import ServerThread
from undo_outcome_tools import TOOLS, calls


@pytest.fixture
def server(tmp_path: Path, store_url: str, clock: Any) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path, tools=TOOLS, url=store_url, clock=clock).start()
    yield s
    s.stop()


def _waiting(server: ServerThread, log: Path, tool: str) -> str:
    with AgentTxClient(server.target, timeout=10) as c:
        tx = c.begin().transaction_id
        c.execute_step(tx, 1, tool, {"n": 1, "log": str(log)})
        r = c.rollback(tx)
        assert r.transaction_status is TxStatus.ROLLING_BACK
        [line] = r.compensation_errors
        assert "outcome unknown" in line
        return tx


def test_the_cli_and_the_client_show_and_settle_an_unknown_undo(
    server: ServerThread, tmp_path: Path
) -> None:
    log = tmp_path / "provider-log"
    log.mkdir()
    tx = _waiting(server, log, "pay.unasked")
    with AgentTxClient(server.target, timeout=10) as c:
        info = c.get_transaction(tx)
    assert info.requires_human
    assert (info.outcome_unknown_step, info.reconcile_state) == (1, "undo_outcome_unknown")
    runner = CliRunner()
    shown = runner.invoke(main, ["tx", "show", tx, "--server", server.target])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "the undo of step 1 awaits reconciliation" in text
    assert "never run again blindly" in text
    refused = runner.invoke(main, ["tx", "reconcile", tx, "1", "--server", server.target])
    assert refused.exit_code == 1
    assert "no undo_reconcile handler" in " ".join(refused.output.split())
    ok = runner.invoke(
        main,
        ["tx", "resolve", tx, "1", "not-happened", "--reason", "no refund at the bank",
         "--server", server.target, "--json"],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    reply = json.loads(ok.output)
    assert (reply["outcome"], reply["transaction_status"]) == ("not_happened", "ROLLED_BACK")
    with AgentTxClient(server.target, timeout=10) as c:
        info = c.get_transaction(tx)
    assert info.status is TxStatus.ROLLED_BACK
    assert info.requires_human
    assert any("did not take effect" in e for e in info.compensation_errors)
    assert calls(log, "pay.unasked") == 1


async def test_mcp_says_the_rollback_waits_and_reconcile_step_settles_it(tmp_path: Path) -> None:
    log = tmp_path / "provider-log"
    log.mkdir()
    async with stdio_client(tmp_path / "data", "legacy", "--tools", "undo_outcome_tools") as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        r = await c.call_tool(
            "run_step",
            {"transaction_id": tx, "step_id": 1, "tool": "pay.uncertain",
             "arguments": {"n": 1, "log": str(log)}},
        )  # fmt: skip
        assert structured(r)["status"] == "SUCCESS", text(r)
        waiting = await c.call_tool("rollback_transaction", {"transaction_id": tx})
        assert structured(waiting)["transaction_status"] == "ROLLING_BACK"
        assert "never run again" in text(waiting)
        assert "Resume with run_step" not in text(waiting)
        shown = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert structured(shown)["reconcile_state"] == "undo_outcome_unknown"
        assert structured(shown)["requires_human"]
        assert "reconcile_step" in text(shown)
        (log / "provider").write_text("happened")
        done = structured(await c.call_tool("reconcile_step", {"transaction_id": tx, "step_id": 1}))
        assert done["outcome"] == "happened"
        assert done["transaction_status"] == "ROLLED_BACK"
    assert calls(log, "pay.uncertain") == 1
