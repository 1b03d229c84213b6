"""The idle reaper's cadence is what docs/recovery.md says: every timeout/4, clamped to
50 ms – 5 s, so a transaction idle for T is aborted by T + min(T/4, 5 s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from agenttx import TxStatus
from agenttx.core.background import RECOVER_EVERY_S, reaper_tick

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"


@pytest.mark.parametrize(
    ("idle_timeout_s", "tick_s"),
    [(0.1, 0.05), (0.2, 0.05), (1.0, 0.25), (8.0, 2.0), (20.0, 5.0), (900.0, 5.0)],
)
def test_the_reaper_ticks_every_quarter_timeout_between_50_ms_and_5_s(
    idle_timeout_s: float, tick_s: float
) -> None:
    assert reaper_tick(idle_timeout_s) == pytest.approx(tick_s)


def test_with_the_reaper_off_the_loop_keeps_the_recovery_cadence() -> None:
    assert reaper_tick(0) == RECOVER_EVERY_S == 5.0


def test_the_doc_states_the_same_clamp() -> None:
    assert "timeout/4, clamped to **50 ms – 5 s**" in DOCS.read_text()


async def test_a_running_engine_reaps_an_idle_transaction_within_a_quarter_timeout(
    open_engine: Any,
) -> None:
    engine = await open_engine(tx_idle_timeout_s=0.4)  # ticks every 100 ms
    started = time.monotonic()  # before begin: the idle time counts from the transaction's
    tx = (await engine.begin()).transaction_id  # last activity, which is after this
    while (await engine.get_transaction(tx)).status is TxStatus.ACTIVE:
        assert time.monotonic() - started < 5, "the background reaper never aborted it"
        await asyncio.sleep(0.02)
    info = await engine.get_transaction(tx)
    assert info.status is TxStatus.ROLLED_BACK
    assert "idle for more than 0.4 s" in info.abort_reason
    # Idle for 0.4 s, found on a tick at most 0.1 s later (scheduling slack allowed).
    assert 0.4 <= time.monotonic() - started < 2.0
