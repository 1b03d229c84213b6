"""What coordinating several processes on one SQLite file costs a step (issue 10, point 7).

Run: ``.venv/bin/python -m benchmarks.shared_sqlite [--batches 40]``. One process, one engine:
batches of 200 ``kv.put`` steps alternate between the store's transaction lock (the store is
alone on its file, so it holds nothing) and main's path, where the lock is skipped altogether;
then the lock's own enter + exit, alone and shared (a second store opened on the file). All
figures are CPU time (``time.process_time``), which waiting for a busy machine's cores does not
inflate; medians in µs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import agenttx
from agenttx.store.sqlite import SqliteStore


async def _steps(engine: agenttx.Engine, locked: bool) -> float:
    engine.images.store_locks = locked
    tx = (await engine.begin()).transaction_id
    started = time.process_time()
    for s in range(1, 201):
        await engine.execute_step(tx, s, "kv.put", {"key": f"k{s % 50}", "value": s})
    spent = (time.process_time() - started) / 200 * 1e6
    await engine.commit(tx)
    return spent


async def _per_call(call: Callable[[], Awaitable[None]], n: int = 20_000) -> float:
    started = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - started) / n * 1e6


async def run(batches: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'agenttx.db'}"
        engine = await agenttx.Engine.open(url, background=False)
        try:
            sides: dict[bool, list[float]] = {True: [], False: []}
            for b in range(batches):
                for locked in (b % 2 == 0, b % 2 == 1):
                    sides[locked].append(await _steps(engine, locked))
            engine.images.store_locks = True
            store = engine.store
            assert isinstance(store, SqliteStore)
            tx = (await engine.begin()).transaction_id

            async def lock_once() -> None:
                async with store.transaction_lock(tx, 5.0):
                    pass

            alone = await _per_call(lock_once)
            other = SqliteStore(store.path)
            await other.open()  # the first store turns shared within a watcher tick
            try:
                shared = await _per_call(lock_once)
            finally:
                await other.close()
        finally:
            await engine.close()
    return {
        "step, lock skipped (main)": statistics.median(sides[False]),
        "step, transaction_lock (alone)": statistics.median(sides[True]),
        "transaction_lock, alone": alone,
        "transaction_lock, shared": shared,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=40, help="batches of 200 steps a side")
    ns = ap.parse_args(argv)
    for name, value in asyncio.run(run(ns.batches)).items():
        print(f"{name:34} {value:8.1f} µs CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
