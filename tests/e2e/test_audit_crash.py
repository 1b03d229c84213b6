"""The audit chain survives SIGKILL: a worker running transactions flat out is killed at
random moments, again and again on one store. Right after each kill — before anything is
recovered — every chain verifies on the bare store: no partial record, no gap, no durable
change without its record (the revision anchor). Then the store is reopened (recovery finishes
the interrupted step or rewind, with its records) and every chain verifies again; the
transactions a kill left open go on in the next run, their chains with them."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import agenttx
from agenttx.core.audit import AuditReader
from agenttx.store.factory import open_store
from paths import TESTS

WORKER = TESTS.joinpath("audit_crash_worker.py")
KILLS = 6
OPEN = ("ACTIVE", "EXECUTING", "ROLLING_BACK")


async def start(url: str, root: Path, seed: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        url,
        str(root),
        str(seed),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if line.strip() != b"ready":
        assert proc.stderr is not None
        raise AssertionError((await proc.stderr.read()).decode())
    return proc


async def bare_check(url: str) -> tuple[list[Any], int]:
    """Every chain checked on the store as the kill left it, and how many transactions were
    caught open."""
    store = open_store(url)
    await store.open()
    try:
        results = [v async for v in AuditReader(store).verify_all()]
        caught = len(await store.list_transactions(statuses=OPEN, limit=10_000))
    finally:
        await store.close()
    return results, caught


async def test_chains_survive_sigkill_mid_transaction(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    rng = random.Random(13)
    checked: set[str] = set()
    caught_open = 0
    for kill in range(KILLS):
        proc = await start(store_url, tmp_path, kill)
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        assert proc.returncode is None
        proc.kill()  # SIGKILL: no cleanup of any kind
        await proc.wait()
        before, caught = await bare_check(store_url)
        assert not [v for v in before if not v.ok], [v for v in before if not v.ok][:3]
        caught_open += caught
        engine = await open_engine(tools=[_remote()])  # recovery of the kill runs here
        after = [v async for v in engine.verify_all_audit()]
        assert not [v for v in after if not v.ok], [v for v in after if not v.ok][:3]
        checked |= {v.transaction_id for v in after}
        await engine.close()
    assert len(checked) > KILLS  # the runs did make transactions
    assert caught_open >= KILLS // 2  # and kills did land inside them


def _remote() -> agenttx.Tool:
    sys.path.insert(0, str(WORKER.parent))
    from audit_crash_worker import remote

    return remote
