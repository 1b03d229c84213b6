"""A checkpointed unknown undo survives a crash (issue 30 point 14), both stores, a real
subprocess SIGKILLed: after the restart the undo is not run again — not by recovery, not by
the maintenance pass, not by another abort — and the rollback waits until its
``undo_reconcile`` handler says it took effect, then ends ROLLED_BACK."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import agenttx
from conftest import FakeClock
from paths import TESTS
from undo_outcome_tools import TOOLS, calls

WORKER = TESTS.joinpath("undo_outcome_crash_worker.py")


async def _kill_at(mark: Path, *args: str) -> None:
    """Start the worker, wait for ``mark``, SIGKILL it."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), *args, env=dict(os.environ),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            if worker.returncode is not None:
                _, err = await worker.communicate()
                raise AssertionError(f"the worker exited early: {err.decode()[-2000:]}")
            assert time.monotonic() < deadline, "the worker never got there"
            await asyncio.sleep(0.02)
    finally:
        if worker.returncode is None:
            worker.kill()  # SIGKILL: a crash
        await worker.communicate()


@pytest.mark.parametrize("moment", ["before_the_plan_says_so", "while_it_waits"])
async def test_sigkill_after_the_checkpoint_then_restart_does_not_run_the_undo_again(
    open_engine: Any, store_url: str, tmp_path: Path, moment: str
) -> None:
    log = tmp_path / "provider-log"
    log.mkdir()
    tx_file = tmp_path / "tx"
    if moment == "before_the_plan_says_so":
        # Killed while the older undo runs: step 2's checkpoint is durable, the waiting plan
        # is not written yet.
        (log / "slow").write_text("hang")
        await _kill_at(log / "slow.started", store_url, str(log), str(tx_file))
        (log / "slow").unlink()
    else:
        await _kill_at(log / "waiting", store_url, str(log), str(tx_file))
    tx = tx_file.read_text()
    assert calls(log, "pay.uncertain") == 1
    # The worker's clock was the real one: this engine's starts there, and moves by hand.
    clock = FakeClock(time.time())
    engine = await open_engine(tools=TOOLS, clock=clock, background=False)  # recovers
    await engine.recover()
    info = await engine.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLING_BACK
    assert info.requires_human
    assert (info.outcome_unknown_step, info.reconcile_state) == (2, "undo_outcome_unknown")
    assert any("never run again blindly" in e for e in info.compensation_errors)
    assert calls(log, "pay.slow") == (2 if moment == "before_the_plan_says_so" else 1)
    again = await engine.rollback(tx)
    assert again.transaction_status is agenttx.TxStatus.ROLLING_BACK
    assert calls(log, "pay.uncertain") == 1  # never sent again
    (log / "provider").write_text("happened")
    # Its record was re-made from the checkpoint when the crash came before the plan said
    # what the UncertainOutcome did (retry_after_ms=0): the default earliest time then.
    clock.advance(5.0)
    settled = await engine.reconcile_step(tx, 2)
    assert settled.outcome == "happened"
    assert settled.transaction_status is agenttx.TxStatus.ROLLED_BACK
    assert calls(log, "pay.uncertain") == 1
    info = await engine.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert not info.requires_human
    assert (await engine.verify_audit(tx)).ok
