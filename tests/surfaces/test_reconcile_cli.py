"""``agenttx tx reconcile`` and ``agenttx tx resolve`` against a running server with the real
HTTP provider (``psp.py``): what they print, their JSON, and their refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agenttx import AgentTxClient, StepStatus
from agenttx.cli import main
from psp import TOOLS, PaymentProvider
from server_process import ServerThread


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    provider.mode = "hang"
    yield provider
    provider.stop()


@pytest.fixture
def server(tmp_path: Path, store_url: str, clock: Any) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path, tools=TOOLS, url=store_url, clock=clock).start()
    yield s
    s.stop()


def unknown_step(server: ServerThread, tool: str) -> str:
    with AgentTxClient(server.target, timeout=10) as c:
        tx = c.begin().transaction_id
        assert c.execute_step(tx, 1, tool, {"amount": 5}).status is StepStatus.OUTCOME_UNKNOWN
        return tx


def test_tx_reconcile_settles_a_step_the_provider_saw(
    server: ServerThread, psp: PaymentProvider, clock: Any
) -> None:
    tx = unknown_step(server, "pay.charge")
    runner = CliRunner()
    shown = runner.invoke(main, ["tx", "show", tx, "--server", server.target])
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert "step 1 awaits reconciliation · operation psp:op-" in line
    assert f"agenttx tx reconcile {tx} 1" in line
    early = runner.invoke(main, ["tx", "reconcile", tx, "1", "--server", server.target])
    assert early.exit_code == 1
    assert "may be reconciled in 5000 ms" in early.output
    clock.advance(5.0)
    done = runner.invoke(main, ["tx", "reconcile", tx, "1", "--server", server.target, "--json"])
    assert done.exit_code == 0, done.output
    reply = json.loads(done.output)
    assert reply["outcome"] == "happened"
    assert reply["next_step_id"] == 2
    assert reply["operation_provider"] == "psp"


def test_tx_resolve_is_the_operators_word_for_a_tool_without_a_handler(
    server: ServerThread, psp: PaymentProvider, clock: Any
) -> None:
    tx = unknown_step(server, "pay.legacy")
    clock.advance(5.0)
    runner = CliRunner()
    refused = runner.invoke(main, ["tx", "reconcile", tx, "1", "--server", server.target])
    assert refused.exit_code == 1
    assert f"agenttx tx resolve {tx} 1 happened|not-happened" in refused.output
    bad = runner.invoke(
        main, ["tx", "resolve", tx, "1", "happened", "--output", "{no", "--server", server.target]
    )
    assert bad.exit_code == 2
    assert "not JSON" in bad.output
    ok = runner.invoke(
        main,
        ["tx", "resolve", tx, "1", "happened", "--output", '{"charge": "x"}',
         "--server", server.target],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "happened" in ok.output
    assert "continue with step 2" in " ".join(ok.output.split())  # rich wraps lines
    with AgentTxClient(server.target, timeout=10) as c:
        info = c.get_transaction(tx)
        assert info.outcome_unknown_step == 0
        assert info.steps[-1].output == {"charge": "x"}
