"""A large SQLite write runs off the event loop; a typical one still commits inline.

The group-commit writer commits a lone unit on the loop thread, which is the fastest path for
the few hundred bytes of a typical step row. A step row holding a megabyte (a 1 MiB argument,
a 3 MB ``fs.read`` output, the write set in its detail) took tens to hundreds of milliseconds
there, and no other client was answered meanwhile. Such a unit now runs on a worker thread;
units submitted while it runs queue up and commit together after it, and a caller cancelled
meanwhile leaves the writer working.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.store import sqlite as sqlite_store
from agenttx.store.sqlite_writer import GroupCommitWriter

pytestmark = pytest.mark.stores("sqlite")


def one_mib_argument() -> str:
    return '{"key": "k", "value": "%s"}' % ("x" * ((1 << 20) - 40))


async def test_a_large_step_row_is_written_off_the_loop_and_a_small_one_inline(
    open_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine: agenttx.Engine = await open_engine(background=False)
    loop_thread = threading.get_ident()
    writes: list[tuple[int, bool]] = []
    original = sqlite_store._write_step_on

    def recording(
        c: sqlite3.Connection, cas: str, params: Any, update: Any, step: Any, r: Any
    ) -> int:
        writes.append((len(step.arguments_json), threading.get_ident() == loop_thread))
        return original(c, cas, params, update, step, r)

    monkeypatch.setattr(sqlite_store, "_write_step_on", recording)
    tx = (await engine.begin(agent_id="large")).transaction_id
    small = await engine.execute_step(tx, 1, "kv.put", {"key": "s", "value": 1})
    big = await engine.execute_step(tx, 2, "kv.put", one_mib_argument())
    assert small.status is big.status is agenttx.StepStatus.SUCCESS
    assert [on_loop for size, on_loop in writes if size < 1000] == [True]
    assert [on_loop for size, on_loop in writes if size > 1 << 19] == [False]
    # The large row is durable and read back whole.
    assert (await engine.commit(tx)).committed
    tx2 = (await engine.begin(agent_id="large")).transaction_id
    got = await engine.execute_step(tx2, 1, "kv.get", {"key": "k"})
    assert len(got.output["value"]) == (1 << 20) - 40


async def test_steps_of_other_transactions_commit_while_a_large_row_is_written(
    open_engine: Any,
) -> None:
    engine: agenttx.Engine = await open_engine(background=False)
    big_tx = (await engine.begin(agent_id="large")).transaction_id
    others = [(await engine.begin(agent_id="small")).transaction_id for _ in range(8)]
    results = await asyncio.gather(
        engine.execute_step(big_tx, 1, "kv.put", one_mib_argument()),
        *(
            engine.execute_step(tx, 1, "kv.put", {"key": f"o{i}", "value": i})
            for i, tx in enumerate(others)
        ),
    )
    assert all(r.status is agenttx.StepStatus.SUCCESS for r in results), [
        r.clean_hint for r in results
    ]
    for tx in (big_tx, *others):
        assert (await engine.commit(tx)).committed
    views = [await engine.get_transaction(tx) for tx in others]
    assert all(v.status.value == "COMMITTED" for v in views)


def _writer(path: Path, *, threaded: bool) -> tuple[GroupCommitWriter, sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    return GroupCommitWriter(conn, threaded=threaded), conn


def _slow_insert(n: int, seconds: float) -> Any:
    def unit(c: sqlite3.Connection) -> int:
        time.sleep(seconds)  # a long bind and write, as far as the loop can tell
        c.execute("INSERT INTO t VALUES (?)", (n,))
        return n

    return unit


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
async def test_the_loop_keeps_turning_while_a_large_unit_runs(
    tmp_path: Path, threaded: bool
) -> None:
    writer, conn = _writer(tmp_path / "w.db", threaded=threaded)
    try:
        gaps: list[float] = []
        stop = False

        async def ticker() -> None:
            last = time.monotonic()
            while not stop:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        large = asyncio.create_task(writer.run(_slow_insert(1, 0.5), large=True))
        await asyncio.sleep(0.05)
        # Submitted while the large unit holds the connection: queued, committed after it.
        small = await writer.run(_slow_insert(2, 0.0))
        assert await large == 1
        assert small == 2
        stop = True
        await ticking
        assert max(gaps) < 0.25, f"the loop stood still for {max(gaps):.3f} s"
        assert [r[0] for r in conn.execute("SELECT n FROM t ORDER BY rowid")] == [1, 2]
        assert writer.commits == 2
    finally:
        writer.shutdown()
        conn.close()


async def test_a_cancelled_caller_of_a_large_unit_leaves_the_writer_working(tmp_path: Path) -> None:
    writer, conn = _writer(tmp_path / "w.db", threaded=False)
    try:
        large = asyncio.create_task(writer.run(_slow_insert(1, 0.3), large=True))
        await asyncio.sleep(0.05)
        large.cancel()
        with pytest.raises(asyncio.CancelledError):
            await large
        # The unit finishes atomically on its thread; the writer takes the next one after it.
        assert await writer.run(_slow_insert(2, 0.0)) == 2
        assert await writer.run(_slow_insert(3, 0.0), large=True) == 3
        assert [r[0] for r in conn.execute("SELECT n FROM t ORDER BY rowid")] == [1, 2, 3]
    finally:
        writer.shutdown()
        conn.close()
