"""A crash during the risky call and a crash during reconcile (issue 13 point 4), both
stores, real subprocesses SIGKILLed at the worst moment, a real HTTP provider (``psp.py``):
after a restart the step is OUTCOME_UNKNOWN with the provider operation it checkpointed, and
reconcilable — while the process that reconciles lives, a second reconcile is refused; once it
is gone its lease is free."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus
from paths import TESTS
from psp import TOOLS, PaymentProvider

WORKER = TESTS.joinpath("reconcile_crash_worker.py")


@pytest.fixture
def psp() -> Iterator[PaymentProvider]:
    provider = PaymentProvider().start()
    yield provider
    provider.stop()


async def run_until(
    mark: Path, *args: str, env: dict[str, str], ready: Callable[[str], bool] | None = None
) -> None:
    """Start the worker, wait for ``mark`` (and ``ready(its text)``, if given), SIGKILL it."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), *args, env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while (
            not mark.exists()
            or not mark.read_text()
            or (ready is not None and not ready(mark.read_text()))
        ):
            if worker.returncode is not None:
                _, err = await worker.communicate()
                raise AssertionError(f"the worker exited early: {err.decode()[-2000:]}")
            assert time.monotonic() < deadline, "the worker never got there"
            await asyncio.sleep(0.02)
    finally:
        if worker.returncode is None:
            worker.kill()  # SIGKILL: a crash
        await worker.communicate()


async def test_sigkill_during_the_risky_call_then_reconcile_after_restart(
    open_engine: Any, store_url: str, psp: PaymentProvider, clock: Any, tmp_path: Path
) -> None:
    psp.mode, psp.hang_s = "hang", 30.0  # the charge arrives; the answer never comes in time
    mark, tx_file = tmp_path / "calling", tmp_path / "tx"
    # The mark is written just before the request goes out: the kill waits until the provider
    # has the charge, so the outside call surely happened before the crash.
    await run_until(
        mark, store_url, "step", str(tx_file), env={"PSP_MARK": str(mark)},
        ready=lambda op: op in psp.charges,
    )  # fmt: skip
    op, tx = mark.read_text(), tx_file.read_text()
    engine = await open_engine(tools=TOOLS, clock=clock, background=False)  # recovers
    info = await engine.get_transaction(tx)
    assert info.outcome_unknown_step == 1
    assert info.steps[-1].status == StepStatus.OUTCOME_UNKNOWN.value
    assert (info.operation_provider, info.operation_id) == ("psp", op)
    assert "reconcile_step" in info.steps[-1].clean_hint
    with pytest.raises(agenttx.OutcomeUnknownPending):
        await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    with pytest.raises(agenttx.ReconcileNotDue):
        await engine.reconcile_step(tx, 1)
    clock.advance(5.0)
    got = await engine.reconcile_step(tx, 1)
    assert got.outcome == "happened"
    assert got.output == {"charge": op, "amount": 42}
    assert list(psp.charges) == [op]  # one charge: nothing was sent again
    assert (await engine.commit(tx)).committed
    assert (await engine.verify_audit(tx)).ok


async def test_sigkill_during_reconcile_leaves_it_reconcilable(
    open_engine: Any, store_url: str, psp: PaymentProvider, clock: Any, tmp_path: Path
) -> None:
    psp.mode = "drop"  # the charge never arrives
    engine = await open_engine(tools=TOOLS, clock=clock, background=False)
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    await engine.close()
    clock.advance(5.0)
    mark = tmp_path / "reconciling"
    env = {"PSP_RECONCILE_MARK": str(mark), "PSP_RECONCILE_SLEEP": "60"}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), store_url, "reconcile", tx, env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    engine = await open_engine(tools=TOOLS, clock=clock, background=False)
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert worker.returncode is None, (await worker.communicate())[1].decode()[-2000:]
            assert time.monotonic() < deadline, "the worker never started reconciling"
            await asyncio.sleep(0.02)
        # The worker holds the lease and lives: a second reconcile is refused.
        with pytest.raises(agenttx.ReconcileInProgress):
            await engine.reconcile_step(tx, 1)
        assert (await engine.get_transaction(tx)).reconcile_state == "reconciling"
    finally:
        worker.kill()  # SIGKILL in the middle of the handler
        await worker.communicate()
    assert (await engine.get_transaction(tx)).reconcile_state == "outcome_unknown"
    got = await engine.reconcile_step(tx, 1)  # its owner is gone: the lease is free
    assert got.outcome == "not_happened"
    psp.mode = "ok"
    again = await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    assert again.status is StepStatus.SUCCESS
    assert (await engine.commit(tx)).committed
