"""Engine benchmark: the reference's shapes, in-process, on SQLite, at both durabilities.

Run from the repository root::

    .venv/bin/python -m benchmarks.engine            # full run, several minutes
    .venv/bin/python -m benchmarks.engine --quick    # smoke run, ~30 s
    .venv/bin/python -m benchmarks.engine --only step --only floor

Prints one table per section and writes ``benchmarks/results/engine.json`` (with ``--only``
the other sections already in that file are kept; a ``--quick`` run writes only to
``--output``). Samples, stats, tables and the results file come from
``benchmarks.harness``. Sections:

- ``floor``: one raw SQLite transaction (``BEGIN IMMEDIATE``; ``INSERT`` one row; ``COMMIT``)
  on a WAL file with ``synchronous=NORMAL`` (default durability) and ``FULL``
  (``sync_writes=True``): the cost no SQLite-backed step can go under.
- ``store``: the store write one ``kv.put`` step makes (``SqliteStore.finish_step``: the CAS
  on the transaction row plus the step row) called directly, without the engine around it;
  ``store.<durability>_audited`` adds the step's audit record to that write (as the engine's
  default, the audit chain on, writes it; the record is built before the timer starts: making
  it is the engine's work, storing it the store's).
- ``step``: ``execute_step(tx, n, "kv.put", {key, value})``, 500 warm-up calls then 5,000
  timed ones; a new transaction every 1,000 steps (the commit and begin between batches are
  not timed), a distinct key per step.
- ``rewind``: ``rollback(tx, to_step=1)`` undoing n journal entries (writes). To get large n
  quickly, step 1 is a user tool (``bench.put_many``) writing n keys in one step. A second
  series (``rewind_steps``) rewinds n one-write ``kv.put`` steps, which also marks n step rows
  not live.
- ``commit``: ``commit(tx)`` of a transaction whose step 1 wrote n keys (same tool).
- ``throughput``: 512 transactions × (begin, 20 ``kv.put``, commit) on one engine, run by
  1/4/16/64 asyncio tasks; steps/s = 10,240 / wall time (begins and commits included).
- ``memory``: 1,000 transactions begun, each with one ``kv.put`` step, left open, on a new
  engine: RSS growth (passes without tracemalloc, each in a new process, the median),
  SQLite's own memory growth, and in a traced pass the Python heap growth, each divided by
  1,000 (issue 24: ≤ 4 KiB RSS).
- ``compare``: the same 10-step workload (10 writes, then commit) through AgentTx, DBOS
  (SQLite system database) and LangGraph (``SqliteSaver``), if installed
  (``benchmarks/requirements.txt``); per-workload p50 and ratio to AgentTx.
- ``profile``: the step loop under cProfile; top functions by self time, and self time
  grouped by area (SQLite, json, asyncio, graph …).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import dataclasses
import gc
import os
import pstats
import sqlite3
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agenttx
from agenttx.audit import EMPTY, record_from_text
from agenttx.core.audit import step_event_text
from agenttx.store.contract import StepRow, TxRow, TxUpdate
from agenttx.store.sqlite import SqliteStore
from benchmarks.harness import (
    RESULTS_DIR,
    AreaRule,
    Out,
    area_of,
    bench_parser,
    best_round,
    finish_machine,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    run_sections,
    sampled_self_times,
    scratch,
    short_source,
    stats_ms,
    stats_us,
    target_rows,
    targets_section,
    top_function_rows,
    write_result,
)

RESULTS = RESULTS_DIR / "engine.json"

DURABILITIES = (("default", False), ("sync_writes", True))
SECTIONS = (
    "floor",
    "store",
    "step",
    "rewind",
    "commit",
    "throughput",
    "memory",
    "compare",
    "profile",
)

# The reference's published numbers (Ryzen 5 5600H, Rust release build), for the tables.
REF_STEP = {"p50": 52.5, "mean": 62.9, "p99": 184.0}
REF_REWIND = {10: 0.056, 100: 0.337, 1_000: 3.94, 10_000: 62.5, 100_000: 291.0}
REF_COMMIT = {10: 0.038, 100: 0.284, 1_000: 2.98, 10_000: 31.4, 50_000: 201.0}
REF_THROUGHPUT = {1: 22_400, 4: 42_000, 16: 43_000, 64: 44_000}  # "~42-44k at 4-64"
# The targets; the floors it quotes ("roughly 40 µs and 250 µs") give absolute bounds.
BRIEF_FLOOR_US = {"default": 40.0, "sync_writes": 250.0}
STEP_FLOOR_RATIO = {"default": 2.5, "sync_writes": 1.5}


# --------------------------------------------------------------------------- set-up

# Latency and throughput sections run this many rounds and keep the best one (lowest p50,
# highest steps/s): on a shared machine the best round is the least disturbed. All rounds'
# figures are kept in the JSON. Set by --rounds (default 3, 1 with --quick).
ROUNDS = {"n": 3}
# Issue 24: 1,000 open transactions (one step each) in one embedded engine on SQLite, RSS
# growth per transaction at most this (peers: LangGraph 2.2, DBOS 21).
MEMORY_TRANSACTIONS = 1_000
RSS_PER_TX_TARGET_KIB = 4.0


async def open_engine(d: Path, sync: bool, **kw: Any) -> agenttx.Engine:
    return await agenttx.Engine.open(
        f"sqlite:///{d / 'agenttx.db'}",
        fs_root=d / "files",
        outbox_path=d / "outbox.jsonl",
        sync_writes=sync,
        background=True,
        tools=[put_many],
        **kw,
    )


@agenttx.tool(
    name="bench.put_many",
    effect="state",
    idempotent=True,
    description="Benchmark helper: write n keys prefix/0 … prefix/n-1 in one step.",
    schema={
        "type": "object",
        "properties": {"prefix": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["prefix", "n"],
    },
)
async def put_many(ctx: agenttx.ToolContext, arguments: Any) -> dict[str, Any]:
    prefix, n = arguments["prefix"], int(arguments["n"])
    for i in range(n):
        await ctx.state.put(f"kv/{prefix}/{i}", i)
    return {"written": n}


# --------------------------------------------------------------------------- floor


def bench_floor(quick: bool) -> dict[str, Any]:
    """One raw SQLite transaction inserting one row, on a warm WAL connection."""
    n, warm = (1_000, 100) if quick else (5_000, 500)
    out: dict[str, Any] = {"samples": n, "warmup": warm}
    for name, sync in DURABILITIES:
        out[name] = best_round([_floor_round(sync, n, warm) for _ in range(ROUNDS["n"])])
    return out


def _floor_round(sync: bool, n: int, warm: int) -> dict[str, Any]:
    with scratch("floor") as d:
        c = sqlite3.connect(d / "floor.db", isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT NOT NULL)")
        samples: list[int] = []
        clock = time.perf_counter_ns
        for i in range(n + warm):
            t0 = clock()
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"k{i}", '{"value":1}'))
            c.execute("COMMIT")
            t1 = clock()
            if i >= warm:
                samples.append(t1 - t0)
        c.close()
    return stats_us(samples)


# --------------------------------------------------------------------------- store


async def bench_store(quick: bool) -> dict[str, Any]:
    """``SqliteStore.finish_step`` alone: the durable write of one successful kv.put step."""
    n, warm = (1_000, 100) if quick else (5_000, 500)
    out: dict[str, Any] = {"samples": n, "warmup": warm}
    for name, sync in DURABILITIES:
        for audited in (False, True):
            rounds = [await _store_round(sync, n, warm, audited) for _ in range(ROUNDS["n"])]
            out[f"{name}_audited" if audited else name] = best_round(rounds)
    return out


async def _store_round(sync: bool, n: int, warm: int, audited: bool = False) -> dict[str, Any]:
    with scratch("store") as d:
        store = SqliteStore(d / "store.db", sync_writes=sync)
        await store.open()
        now = time.time()
        row = TxRow(
            "tx_bench",
            "default",
            "bench",
            "ACTIVE",
            1,
            1,
            0,
            "snapshot",
            {"step_seq": 0},
            now,
            now,
            now,
        )
        await store.create_transaction(row)
        samples: list[int] = []
        revision = 1
        clock = time.perf_counter_ns
        head = EMPTY
        for i in range(n + warm):
            k = i + 1
            step = StepRow(
                "tx_bench",
                k,
                k,
                1,
                0,
                "kv.put",
                "state",
                "SUCCESS",
                True,
                f'{{"key":"k{i}","value":{i}}}',
                f'{{"key":"k{i}","value":{i}}}',
                "",
                {"w": [[f"kv/k{i}", str(i), 0]]},
                now,
                now,
            )
            update = TxUpdate("tx_bench", revision, ("ACTIVE",), "ACTIVE", k + 1, None, now)
            if audited:
                kind, data_text = step_event_text(step)
                record = record_from_text(
                    head, tx_id="tx_bench", tenant="default", kind=kind, at=now,
                    revision=revision + 1, data_text=data_text,
                )  # fmt: skip
                update = dataclasses.replace(update, audit=(record,))
                head = record.head
            t0 = clock()
            revision = await store.finish_step(update, step)
            t1 = clock()
            if i >= warm:
                samples.append(t1 - t0)
        await store.close()
    return stats_us(samples)


# --------------------------------------------------------------------------- step


async def step_loop(engine: agenttx.Engine, n: int, warm: int, per_tx: int = 1_000) -> list[int]:
    """Timed ``kv.put`` steps; a new transaction every ``per_tx`` steps (not timed)."""
    samples: list[int] = []
    clock = time.perf_counter_ns
    tx = (await engine.begin(agent_id="bench")).transaction_id
    step = 1
    for i in range(n + warm):
        if step > per_tx:
            await engine.commit(tx)
            tx = (await engine.begin(agent_id="bench")).transaction_id
            step = 1
        args = {"key": f"step/{i}", "value": i}
        t0 = clock()
        res = await engine.execute_step(tx, step, "kv.put", args)
        t1 = clock()
        if res.status is not agenttx.StepStatus.SUCCESS:
            raise RuntimeError(f"step failed: {res.clean_hint}")
        if i >= warm:
            samples.append(t1 - t0)
        step += 1
    await engine.commit(tx)
    return samples


async def bench_step(quick: bool) -> dict[str, Any]:
    n, warm = (1_000, 100) if quick else (5_000, 500)
    out: dict[str, Any] = {"samples": n, "warmup": warm, "steps_per_transaction": 1_000}
    for name, sync in DURABILITIES:
        rounds = []
        for _ in range(ROUNDS["n"]):
            with scratch("step") as d:
                engine = await open_engine(d, sync)
                try:
                    rounds.append(stats_us(await step_loop(engine, n, warm)))
                finally:
                    await engine.close()
        out[name] = best_round(rounds)
    return out


# --------------------------------------------------------------------------- rewind / commit


def _reps(n: int, quick: bool) -> int:
    if quick:
        return 10 if n <= 1_000 else 2
    if n <= 100:
        return 100
    if n <= 1_000:
        return 40
    if n <= 10_000:
        return 10
    return 4


async def _bulk_tx(engine: agenttx.Engine, n: int, tag: str) -> str:
    tx = (await engine.begin(agent_id="bench")).transaction_id
    res = await engine.execute_step(tx, 1, "bench.put_many", {"prefix": tag, "n": n})
    if res.status is not agenttx.StepStatus.SUCCESS:
        raise RuntimeError(f"bulk step failed: {res.clean_hint}")
    return tx


async def _steps_tx(engine: agenttx.Engine, n: int, tag: str) -> str:
    tx = (await engine.begin(agent_id="bench")).transaction_id
    for s in range(1, n + 1):
        await engine.execute_step(tx, s, "kv.put", {"key": f"{tag}/{s}", "value": s})
    return tx


async def bench_rewind(quick: bool) -> dict[str, Any]:
    sizes = [10, 100, 1_000] if quick else [10, 100, 1_000, 10_000, 100_000]
    step_sizes = [10, 100] if quick else [10, 100, 1_000, 10_000]
    out: dict[str, Any] = {"entries": {}, "steps": {}}
    for name, sync in DURABILITIES:
        out["entries"][name] = {}
        out["steps"][name] = {}
        with scratch("rewind") as d:
            engine = await open_engine(d, sync)
            try:
                for series, make, sz in (
                    ("entries", _bulk_tx, sizes),
                    ("steps", _steps_tx, step_sizes),
                ):
                    for n in sz:
                        reps = _reps(n, quick) if series == "entries" else _reps(n * 4, quick)
                        samples = []
                        for r in range(reps + 1):  # the first is a warm-up
                            tx = await make(engine, n, f"rw{n}-{r}")
                            t0 = time.perf_counter_ns()
                            res = await engine.rollback(tx, to_step=1)
                            t1 = time.perf_counter_ns()
                            assert res.next_step_id == 1
                            if r:
                                samples.append(t1 - t0)
                            await engine.rollback(tx)  # abort: clean up, not timed
                        out[series][name][str(n)] = stats_ms(samples)
            finally:
                await engine.close()
    return out


async def bench_commit(quick: bool) -> dict[str, Any]:
    sizes = [10, 100, 1_000] if quick else [10, 100, 1_000, 10_000, 50_000]
    out: dict[str, Any] = {}
    for name, sync in DURABILITIES:
        out[name] = {}
        with scratch("commit") as d:
            engine = await open_engine(d, sync)
            try:
                for n in sizes:
                    samples = []
                    for r in range(_reps(n, quick) + 1):
                        tx = await _bulk_tx(engine, n, f"c{n}-{r}")
                        t0 = time.perf_counter_ns()
                        res = await engine.commit(tx)
                        t1 = time.perf_counter_ns()
                        assert res.committed
                        if r:
                            samples.append(t1 - t0)
                    out[name][str(n)] = stats_ms(samples)
            finally:
                await engine.close()
    return out


# --------------------------------------------------------------------------- throughput


async def run_throughput(
    engine: agenttx.Engine, transactions: int, steps: int, concurrency: int, tag: str
) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for t in range(transactions):
        queue.put_nowait(t)

    async def worker() -> None:
        while True:
            try:
                t = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            tx = (await engine.begin(agent_id="bench")).transaction_id
            for s in range(1, steps + 1):
                res = await engine.execute_step(
                    tx, s, "kv.put", {"key": f"{tag}/{t}/{s}", "value": s}
                )
                if res.status is not agenttx.StepStatus.SUCCESS:
                    raise RuntimeError(res.clean_hint)
            await engine.commit(tx)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def bench_throughput(quick: bool) -> dict[str, Any]:
    transactions, steps = (64, 20) if quick else (512, 20)
    out: dict[str, Any] = {"transactions": transactions, "steps_per_transaction": steps}
    for name, sync in DURABILITIES:
        out[name] = {}
        for conc in (1, 4, 16, 64):
            times = []
            for _ in range(ROUNDS["n"]):
                with scratch("tput") as d:
                    engine = await open_engine(d, sync)
                    try:
                        await run_throughput(engine, 8, steps, min(conc, 8), "warm")
                        times.append(await run_throughput(engine, transactions, steps, conc, "run"))
                    finally:
                        await engine.close()
            elapsed = min(times)
            out[name][str(conc)] = {
                "seconds": elapsed,
                "steps_per_s": transactions * steps / elapsed,
                "tx_per_s": transactions / elapsed,
                "steps_per_s_rounds": [transactions * steps / t for t in times],
            }
    return out


# --------------------------------------------------------------------------- memory


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _sqlite_memory_used() -> Callable[[], int] | None:
    """SQLite's own count of the bytes it holds (its page caches, mostly), from the library
    the ``sqlite3`` module is linked with; None where it cannot be reached."""
    import _sqlite3
    import ctypes
    import ctypes.util

    for name in (_sqlite3.__file__, ctypes.util.find_library("sqlite3")):
        with contextlib.suppress(OSError, AttributeError, TypeError):
            used = ctypes.CDLL(name).sqlite3_memory_used
            used.restype = ctypes.c_int64
            return lambda: int(used())
    return None


async def _open_transactions(count: int, traced: bool) -> dict[str, float]:
    """``count`` transactions begun, each with one ``kv.put`` step, left open, on a new
    engine; the growth per transaction of RSS and SQLite's memory, and with ``traced`` of the
    Python heap (tracemalloc) and its biggest allocation sites."""
    sqlite_used = _sqlite_memory_used()
    with scratch("mem") as d:
        engine = await open_engine(d, False)
        try:
            # Warm every code path once so first-use allocations are not counted.
            for _ in range(20):
                tx = (await engine.begin(agent_id="bench")).transaction_id
                await engine.execute_step(tx, 1, "kv.put", {"key": "warm", "value": 0})
                await engine.commit(tx)
            gc.collect()
            if traced:
                tracemalloc.start()
            base_traced = tracemalloc.get_traced_memory()[0]
            base_rss = _rss_bytes()
            base_sqlite = sqlite_used() if sqlite_used else 0
            ids = []
            for i in range(count):
                tx = (await engine.begin(agent_id=f"agent-{i}")).transaction_id
                await engine.execute_step(tx, 1, "kv.put", {"key": f"mem/{i}", "value": i})
                ids.append(tx)
            gc.collect()
            out: dict[str, Any] = {
                "rss_bytes_per_tx": (_rss_bytes() - base_rss) / count,
                "sqlite_bytes_per_tx": (
                    (sqlite_used() - base_sqlite) / count if sqlite_used else None
                ),
            }
            if traced:
                heap = tracemalloc.get_traced_memory()[0] - base_traced
                snapshot = tracemalloc.take_snapshot()
                tracemalloc.stop()
                ids_bytes = sum(sys.getsizeof(t) for t in ids) + sys.getsizeof(ids)
                out["heap_bytes_per_tx"] = (heap - ids_bytes) / count
                out["top_allocations"] = [
                    {"where": str(s.traceback[0]), "bytes_per_tx": s.size / count}
                    for s in snapshot.statistics("lineno")[:8]
                ]
        finally:
            await engine.close()
    return out


def _untraced_pass(count: int) -> dict[str, float]:
    """One RSS pass in this (fresh) process: see ``bench_memory``."""
    return asyncio.run(_open_transactions(count, traced=False))


async def bench_memory(quick: bool) -> dict[str, Any]:
    """Issue 24's measure: RSS growth over ``MEMORY_TRANSACTIONS`` open transactions, in
    passes without tracemalloc (whose bookkeeping of every allocation would be counted in the
    RSS), each in a new process (memory a finished pass freed stays resident and would be
    reused by the next), the median of the passes; then one traced pass here for the heap and
    where it goes."""
    import concurrent.futures
    import multiprocessing

    count = MEMORY_TRANSACTIONS
    passes = []
    for _ in range(1 if quick else 3):
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            passes.append(pool.submit(_untraced_pass, count).result())
    traced = await _open_transactions(count, traced=True)
    rss = statistics.median(p["rss_bytes_per_tx"] for p in passes)
    sqlite_figures = [p["sqlite_bytes_per_tx"] for p in passes if p["sqlite_bytes_per_tx"]]
    return {
        "transactions": count,
        "rss_bytes_per_tx": rss,
        "rss_bytes_per_tx_passes": [p["rss_bytes_per_tx"] for p in passes],
        "sqlite_bytes_per_tx": statistics.median(sqlite_figures) if sqlite_figures else None,
        "heap_bytes_per_tx": traced["heap_bytes_per_tx"],
        "top_allocations": traced["top_allocations"],
        "note": "RSS: median of untraced passes, each in a new process; it counts SQLite's "
        "page caches (bounded, ~2 MiB a connection, shown as sqlite) and allocator slack. "
        "heap: tracemalloc growth minus the benchmark's own list of ids",
    }


# --------------------------------------------------------------------------- compare


async def agenttx_workload(engine: agenttx.Engine, runs: int, warm: int) -> list[int]:
    samples = []
    for r in range(runs + warm):
        t0 = time.perf_counter_ns()
        tx = (await engine.begin(agent_id="bench")).transaction_id
        for s in range(1, 11):
            await engine.execute_step(tx, s, "kv.put", {"key": f"w{r}/k{s}", "value": s})
        await engine.commit(tx)
        t1 = time.perf_counter_ns()
        if r >= warm:
            samples.append(t1 - t0)
    return samples


async def agenttx_compare(sync: bool, runs: int, warm: int) -> dict[str, Any]:
    """``agenttx_workload`` on a new engine in a scratch directory: per-run stats, ms."""
    with scratch("cmp") as d:
        engine = await open_engine(d, sync)
        try:
            return {"status": "ok", **stats_ms(await agenttx_workload(engine, runs, warm))}
        finally:
            await engine.close()


# DBOS's SQLite connections get the durability under test through a SQLAlchemy connect hook
# (DBOS opens them with the library defaults); the hook reads this at each connect.
_SYNC_PRAGMA = {"value": "NORMAL"}
# The registered DBOS workflows, once per process (DBOS keeps its registry across instances).
_DBOS_FUNCS: dict[str, Any] = {}


def dbos_workflows() -> dict[str, Any]:
    """Register the 10-step DBOS workflow once, in both of DBOS's forms: ``workflow`` (a
    function, run in the calling thread or by ``DBOS.start_workflow`` on DBOS's executor) and
    ``workflow_async`` (a coroutine, run on the caller's event loop); ImportError if DBOS is
    not installed."""
    from dbos import DBOS

    if not _DBOS_FUNCS:
        import sqlalchemy as sa
        from sqlalchemy import event

        @event.listens_for(sa.engine.Engine, "connect")
        def _synchronous(dbapi_conn: Any, _record: Any) -> None:
            with contextlib.suppress(Exception):
                dbapi_conn.execute(f"PRAGMA synchronous={_SYNC_PRAGMA['value']}")

        @DBOS.step()
        def put(key: str, value: int) -> dict[str, Any]:
            return {"key": key, "value": value}

        @DBOS.workflow()
        def ten_steps(run: int) -> int:
            for s in range(1, 11):
                put(f"w{run}/k{s}", s)
            return 10

        @DBOS.step()
        async def put_async(key: str, value: int) -> dict[str, Any]:
            return {"key": key, "value": value}

        @DBOS.workflow()
        async def ten_steps_async(run: int) -> int:
            for s in range(1, 11):
                await put_async(f"w{run}/k{s}", s)
            return 10

        _DBOS_FUNCS.update(workflow=ten_steps, workflow_async=ten_steps_async)
    return _DBOS_FUNCS


@contextlib.contextmanager
def dbos_launched(d: Path, sync: bool) -> Iterator[Any]:
    """DBOS launched on a SQLite system database in ``d`` (WAL, ``synchronous`` as the
    durability under test), destroyed on leaving; yields the DBOS class. ImportError if DBOS
    is not installed."""
    import logging

    dbos_workflows()
    from dbos import DBOS

    _SYNC_PRAGMA["value"] = "FULL" if sync else "NORMAL"
    path = d / "dbos.sqlite"
    pre = sqlite3.connect(path)  # WAL persists in the file: same journal as AgentTx
    pre.execute("PRAGMA journal_mode=WAL")
    pre.close()
    DBOS(
        config={
            "name": "agenttx-bench",
            "system_database_url": f"sqlite:///{path}",
            "log_level": "WARNING",
        }
    )
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS.launch()
    try:
        yield DBOS
    finally:
        DBOS.destroy()


def dbos_workload(sync: bool, runs: int, warm: int) -> dict[str, Any]:
    try:
        wf = dbos_workflows()["workflow"]
    except ImportError:
        return {"status": "not installed"}
    with scratch("dbos") as d, dbos_launched(d, sync):
        samples = []
        for r in range(runs + warm):
            t0 = time.perf_counter_ns()
            wf(r)
            t1 = time.perf_counter_ns()
            if r >= warm:
                samples.append(t1 - t0)
    return {"status": "ok", **stats_ms(samples)}


def langgraph_graph() -> Any:
    """The 10-node LangGraph ``StateGraph`` (``START`` → put1 → … → put10 → ``END``, each node
    writing one key into the merged state ``kv``), not yet compiled; ImportError if LangGraph
    is not installed."""
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph

    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {**a, **b}

    # The functional form: evaluated now, not as a string under ``from __future__``.
    State = TypedDict("State", {"kv": Annotated[dict[str, Any], merge]})  # noqa: UP013

    def node(s: int) -> Callable[[State], dict[str, Any]]:
        def put(state: State) -> dict[str, Any]:
            return {"kv": {f"k{s}": s}}

        return put

    graph = StateGraph(State)
    prev = START
    for s in range(1, 11):
        graph.add_node(f"put{s}", node(s))  # type: ignore[call-overload]
        graph.add_edge(prev, f"put{s}")
        prev = f"put{s}"
    graph.add_edge(prev, END)
    return graph


def synchronous_pragma(sync: bool) -> str:
    """The ``PRAGMA synchronous`` a peer's own SQLite connection gets for the durability."""
    return f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}"


def langgraph_workload(sync: bool, runs: int, warm: int) -> dict[str, Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        graph = langgraph_graph()
    except ImportError:
        return {"status": "not installed"}

    with scratch("langgraph") as d:
        conn = sqlite3.connect(d / "langgraph.db", check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()  # sets journal_mode=WAL
        conn.execute(synchronous_pragma(sync))
        app = graph.compile(checkpointer=saver)
        samples = []
        for r in range(runs + warm):
            t0 = time.perf_counter_ns()
            # durability="sync": each super-step's checkpoint is written before the next runs,
            # as AgentTx makes each step durable before it returns.
            app.invoke({"kv": {}}, {"configurable": {"thread_id": f"run-{r}"}}, durability="sync")
            t1 = time.perf_counter_ns()
            if r >= warm:
                samples.append(t1 - t0)
        conn.close()
    return {"status": "ok", **stats_ms(samples)}


def bench_compare(quick: bool) -> dict[str, Any]:
    runs, warm = (30, 5) if quick else (200, 20)
    out: dict[str, Any] = {
        "runs": runs,
        "warmup": warm,
        "workload": "10 writes then commit, one run after the other",
    }
    for name, sync in DURABILITIES:
        res: dict[str, Any] = {"agenttx": asyncio.run(agenttx_compare(sync, runs, warm))}
        res["dbos"] = dbos_workload(sync, runs, warm)
        res["langgraph"] = langgraph_workload(sync, runs, warm)
        for other in ("dbos", "langgraph"):
            if res[other]["status"] == "ok":
                res[other]["ratio_p50"] = res[other]["p50"] / res["agenttx"]["p50"]
                res[other]["ratio_mean"] = res[other]["mean"] / res["agenttx"]["mean"]
        out[name] = res
    return out


# --------------------------------------------------------------------------- profile

# Where a step's self time goes (``benchmarks.harness.area_of``); the first match wins.
_AREAS: list[AreaRule] = [
    (
        "SQLite (C calls: execute, commit)",
        lambda f, fn, b: b and any(x in fn for x in ("sqlite3", "Connection.", "Cursor.")),
    ),
    ("waiting in epoll (fsync on the writer thread)", lambda f, fn, b: b and "poll" in fn),
    ("json encode/decode", lambda f, fn, b: "/json/" in f or (b and "json" in fn.lower())),
    (
        "asyncio event loop",
        lambda f, fn, b: (
            "/asyncio/" in f
            or "selectors" in f
            or (
                b
                and any(
                    x in fn
                    for x in (
                        "_asyncio",
                        "socket",
                        "Future",
                        "Task",
                        "Event",
                        "call_soon",
                        "_contextvars",
                    )
                )
            )
        ),
    ),
    ("dependency graph (core/graph.py)", lambda f, fn, b: f.endswith("core/graph.py")),
    ("references (core/refs.py)", lambda f, fn, b: f.endswith("core/refs.py")),
    ("store + group-commit writer", lambda f, fn, b: "/agenttx/store/" in f),
    (
        "engine pipeline (core/steps, base, engine)",
        lambda f, fn, b: any(
            f.endswith(f"core/{m}.py") for m in ("engine", "steps", "base", "recovery", "views")
        ),
    ),
    (
        "runtime, tool context, kv.put",
        lambda f, fn, b: "/core/runtime.py" in f or "/agenttx/tools/" in f,
    ),
    ("other agenttx (limits, states, types, controller)", lambda f, fn, b: "/agenttx/" in f),
    (
        "stdlib (uuid, enum, dataclasses, typing)",
        lambda f, fn, b: "/lib/python3" in f and "site-packages" not in f,
    ),
    ("benchmark loop", lambda f, fn, b: "benchmarks/" in f),
    ("builtins (isinstance, dict/list ops, time …)", lambda f, fn, b: b),
]


def _area(filename: str, func: str) -> str:
    return area_of(_AREAS, filename, func)


def _areas_table(areas: dict[str, float], total: float, n: int) -> dict[str, Any]:
    return {
        k: {"us_per_step": v / n * 1e6, "pct": 100 * v / total}
        for k, v in sorted(areas.items(), key=lambda kv: -kv[1])
    }


def _sampled_areas(frame: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Self time per area and per function from a pyinstrument frame tree."""
    areas: dict[str, float] = {}
    funcs: dict[str, float] = {}
    for path, line, function, self_time in sampled_self_times(frame):
        a = _area(path, function)
        areas[a] = areas.get(a, 0.0) + self_time
        key = f"{short_source(path)}:{line}({function})"
        funcs[key] = funcs.get(key, 0.0) + self_time
    return areas, funcs


def bench_profile(quick: bool) -> dict[str, Any]:
    """The step loop under cProfile (exact call counts, but its per-call cost inflates Python
    code relative to C) and, if installed, pyinstrument (sampling every 100 µs: closer to the
    real split, no call counts). Only the event-loop thread is profiled: with sync_writes the
    SQLite work and fsync run on the writer thread and show up as time waiting in epoll."""
    n = 1_000 if quick else 5_000
    out: dict[str, Any] = {"samples": n}
    sampler_cls: Any = None
    with contextlib.suppress(ImportError):
        from pyinstrument import Profiler as sampler_cls
    for name, sync in DURABILITIES:
        res: dict[str, Any] = {}

        async def run(
            start: Callable[[], object], stop: Callable[[], object], sync: bool = sync
        ) -> float:
            with scratch("prof") as d:
                engine = await open_engine(d, sync)
                try:
                    await step_loop(engine, 200, 0)  # warm
                    t0 = time.perf_counter()
                    start()
                    await step_loop(engine, n, 0)
                    stop()
                    return time.perf_counter() - t0
                finally:
                    await engine.close()

        prof = cProfile.Profile()
        wall = asyncio.run(run(prof.enable, prof.disable))
        st = pstats.Stats(prof)
        total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
        rows = []
        areas: dict[str, float] = {}
        for (filename, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
            rows.append(
                {
                    "function": f"{short_source(filename)}:{line}({func})",
                    "calls_per_step": nc / n,
                    "self_us_per_step": tt / n * 1e6,
                    "cum_us_per_step": ct / n * 1e6,
                    "self_pct": 100 * tt / total,
                }
            )
            a = _area(filename, func)
            areas[a] = areas.get(a, 0.0) + tt
        rows.sort(key=lambda r: r["self_us_per_step"], reverse=True)
        res["cprofile"] = {
            "wall_us_per_step": wall / n * 1e6,
            "top_self": rows[:25],
            "areas": _areas_table(areas, total, n),
        }
        if sampler_cls is not None:
            sampler = sampler_cls(interval=0.0001, async_mode="disabled")
            wall = asyncio.run(run(sampler.start, sampler.stop))
            root = sampler.last_session.root_frame() if sampler.last_session else None
            if root is not None:
                s_areas, funcs = _sampled_areas(root)
                s_total = sum(s_areas.values())
                res["pyinstrument"] = {
                    "wall_us_per_step": wall / n * 1e6,
                    "areas": _areas_table(s_areas, s_total, n),
                    "top_self": [
                        {
                            "function": k,
                            "self_us_per_step": v / n * 1e6,
                            "self_pct": 100 * v / s_total,
                        }
                        for k, v in sorted(funcs.items(), key=lambda kv: -kv[1])[:25]
                    ],
                }
        out[name] = res
    return out


# --------------------------------------------------------------------------- report


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    t: list[dict[str, Any]] = []
    floor, step = res.get("floor"), res.get("step")
    if floor and step:
        for name, _ in DURABILITIES:
            p50, f = step[name]["p50"], floor[name]["p50"]
            ratio = STEP_FLOOR_RATIO[name]
            t.append(
                {
                    "target": f"kv.put step p50 ≤ {ratio}× measured floor ({name})",
                    "bound": ratio * f,
                    "measured": p50,
                    "unit": "µs",
                    "met": p50 <= ratio * f,
                    "ratio_to_floor": p50 / f,
                }
            )
            b = BRIEF_FLOOR_US[name] * ratio
            t.append(
                {
                    "target": f"kv.put step p50 ≤ {ratio}× the issue's floor "
                    f"{BRIEF_FLOOR_US[name]:g} µs ({name})",
                    "bound": b,
                    "measured": p50,
                    "unit": "µs",
                    "met": p50 <= b,
                }
            )
    if "rewind" in res:
        for name, _ in DURABILITIES:
            v = res["rewind"]["entries"][name].get("1000")
            if v:
                t.append(
                    {
                        "target": f"rewind of 1k entries ≤ 5 ms ({name})",
                        "bound": 5.0,
                        "measured": v["p50"],
                        "unit": "ms",
                        "met": v["p50"] <= 5.0,
                    }
                )
    if "commit" in res:
        for name, _ in DURABILITIES:
            v = res["commit"][name].get("1000")
            if v:
                t.append(
                    {
                        "target": f"commit of 1k keys ≤ 5 ms ({name})",
                        "bound": 5.0,
                        "measured": v["p50"],
                        "unit": "ms",
                        "met": v["p50"] <= 5.0,
                    }
                )
    if "throughput" in res:
        v = res["throughput"]["default"]["16"]["steps_per_s"]
        t.append(
            {
                "target": "throughput at concurrency 16 ≥ 8,000 steps/s (default)",
                "bound": 8000.0,
                "measured": v,
                "unit": "steps/s",
                "met": v >= 8000,
            }
        )
    if "memory" in res:
        v = res["memory"]["heap_bytes_per_tx"] / 1024
        t.append(
            {
                "target": "memory per idle open transaction ≤ 20 KB",
                "bound": 20.0,
                "measured": v,
                "unit": "KiB",
                "met": v <= 20.0,
            }
        )
        rss = res["memory"]["rss_bytes_per_tx"] / 1024
        t.append(
            {
                "target": f"RSS per open transaction ≤ {RSS_PER_TX_TARGET_KIB:g} KiB "
                f"({res['memory']['transactions']:,} open; issue 24)",
                "bound": RSS_PER_TX_TARGET_KIB,
                "measured": rss,
                "unit": "KiB",
                "met": rss <= RSS_PER_TX_TARGET_KIB,
            }
        )
    return t


def report(out: Out, res: dict[str, Any]) -> None:
    m = res.get("machine", {})
    out.note(
        f"[bold]machine[/bold]: {m.get('cpu')} · {m.get('cores')} cores · Python "
        f"{m.get('python')} · SQLite {m.get('sqlite')} · {m.get('date')} · load "
        f"{m.get('load_average_start')} → {m.get('load_average_end')}"
    )
    if "floor" in res or "store" in res or "step" in res:
        rows = []
        for sec, label in (
            ("floor", "raw SQLite txn (1 insert)"),
            ("store", "store.finish_step direct"),
            ("store_audited", "store.finish_step + audit record"),
            ("step", "engine kv.put step"),
        ):
            for name, _ in DURABILITIES:
                if sec == "store_audited" and f"{name}_audited" in res.get("store", {}):
                    s = res["store"][f"{name}_audited"]
                    rows.append([f"{label} · {name}", s["p50"], s["mean"], s["p90"], s["p99"]])
                elif sec in res:
                    s = res[sec][name]
                    rows.append([f"{label} · {name}", s["p50"], s["mean"], s["p90"], s["p99"]])
        rows.append(
            [
                "reference: engine step in-process",
                REF_STEP["p50"],
                REF_STEP["mean"],
                "",
                REF_STEP["p99"],
            ]
        )
        out.table("Per-call latency (µs)", ["", "p50", "mean", "p90", "p99"], rows)
    if "rewind" in res:
        for series, title in (
            (
                "entries",
                "Rewind: rollback(to_step=1) of n journal entries written by one step (ms)",
            ),
            ("steps", "Rewind of n one-write kv.put steps (ms)"),
        ):
            sizes = list(res["rewind"][series]["default"])
            rows = []
            for name, _ in DURABILITIES:
                r = res["rewind"][series][name]
                rows.append([f"{name} p50", *(r[k]["p50"] for k in sizes)])
                rows.append([f"{name} p99", *(r[k]["p99"] for k in sizes)])
            if series == "entries":
                rows.append(["reference p50", *(REF_REWIND.get(int(k), "") for k in sizes)])
            out.table(title, ["n", *sizes], rows)
    if "commit" in res:
        sizes = list(res["commit"]["default"])
        rows = []
        for name, _ in DURABILITIES:
            rows.append([f"{name} p50", *(res["commit"][name][k]["p50"] for k in sizes)])
            rows.append([f"{name} p99", *(res["commit"][name][k]["p99"] for k in sizes)])
        rows.append(["reference p50", *(REF_COMMIT.get(int(k), "") for k in sizes)])
        out.table("Commit of n keys (ms)", ["n", *sizes], rows)
    if "throughput" in res:
        tp = res["throughput"]
        concs = list(tp["default"])
        rows = [[name, *(tp[name][c]["steps_per_s"] for c in concs)] for name, _ in DURABILITIES]
        rows.append(["reference", *(float(REF_THROUGHPUT[int(c)]) for c in concs)])
        out.table(
            f"Throughput, {tp['transactions']} tx × {tp['steps_per_transaction']} kv.put "
            "+ commit (steps/s)",
            ["concurrency", *concs],
            rows,
        )
    if "memory" in res:
        mem = res["memory"]
        out.table(
            "Memory per idle open transaction (1 step each)",
            ["", "bytes"],
            [
                ["Python heap (tracemalloc)", mem["heap_bytes_per_tx"]],
                ["RSS growth", mem["rss_bytes_per_tx"]],
                ["… of it SQLite's page caches", mem.get("sqlite_bytes_per_tx") or "n/a"],
            ],
        )
    if "compare" in res:
        rows = []
        for name, _ in DURABILITIES:
            c = res["compare"][name]
            for sysname in ("agenttx", "dbos", "langgraph"):
                v = c[sysname]
                if v["status"] != "ok":
                    rows.append([f"{sysname} · {name}", v["status"], "", "", ""])
                    continue
                rows.append(
                    [
                        f"{sysname} · {name}",
                        v["p50"],
                        v["mean"],
                        v["p99"],
                        f"{v.get('ratio_p50', 1.0):.1f}×",
                    ]
                )
        out.table(
            "10-step workload (10 writes + commit), ms per run",
            ["", "p50", "mean", "p99", "× AgentTx p50"],
            rows,
        )
    if "profile" in res:
        for name, _ in DURABILITIES:
            p = res["profile"][name]
            for prof in ("pyinstrument", "cprofile"):
                if prof not in p:
                    continue
                q = p[prof]
                out.table(
                    f"Profile ({name}, {prof}): self time by area, µs per step "
                    f"(wall {q['wall_us_per_step']:.0f} µs/step under the profiler)",
                    ["area", "µs/step", "%"],
                    [[k, v["us_per_step"], v["pct"]] for k, v in q["areas"].items()],
                )
            q = p["cprofile"]
            out.table(
                f"Profile ({name}, cprofile): top functions by self time",
                ["function", "calls/step", "self µs/step", "%"],
                top_function_rows(q["top_self"], "step", "self_pct", md=False),
            )
    if res.get("targets"):
        out.table(
            "Targets",
            ["target", "bound", "measured", "unit", "met"],
            target_rows(res["targets"], "unit", md=False),
        )


def markdown(res: dict[str, Any]) -> str:
    """The results as Markdown tables (for benchmarks/results/engine.md)."""
    parts: list[str] = []
    if "step" in res:
        rows = []
        for sec, label in (
            ("floor", "raw SQLite transaction, 1 insert"),
            ("store", "`store.finish_step` direct"),
            ("store_audited", "`store.finish_step` + the step's audit record"),
            ("step", "engine `kv.put` step"),
        ):
            for name, _ in DURABILITIES:
                if sec == "store_audited" and f"{name}_audited" in res.get("store", {}):
                    s = res["store"][f"{name}_audited"]
                    rows.append([f"{label} · {name}", s["p50"], s["mean"], s["p90"], s["p99"]])
                elif sec in res:
                    s = res[sec][name]
                    rows.append([f"{label} · {name}", s["p50"], s["mean"], s["p90"], s["p99"]])
        rows.append(["reference engine step (Rust, 5600H)", 52.5, 62.9, "", 184.0])
        parts.append("Per-call latency, µs\n\n" + md_table(["", "p50", "mean", "p90", "p99"], rows))
    if "rewind" in res:
        for series, title in (
            (
                "entries",
                "Rewind `rollback(to_step=1)` of n journal entries (one step wrote n keys), ms",
            ),
            ("steps", "Rewind of n one-write `kv.put` steps, ms"),
        ):
            sizes = list(res["rewind"][series]["default"])
            rows = []
            for name, _ in DURABILITIES:
                r = res["rewind"][series][name]
                rows.append([f"{name} p50", *(r[k]["p50"] for k in sizes)])
                rows.append([f"{name} p99", *(r[k]["p99"] for k in sizes)])
            if series == "entries":
                rows.append(["reference p50", *(REF_REWIND.get(int(k), "") for k in sizes)])
            parts.append(f"{title}\n\n" + md_table(["n", *sizes], rows))
    if "commit" in res:
        sizes = list(res["commit"]["default"])
        rows = []
        for name, _ in DURABILITIES:
            rows.append([f"{name} p50", *(res["commit"][name][k]["p50"] for k in sizes)])
            rows.append([f"{name} p99", *(res["commit"][name][k]["p99"] for k in sizes)])
        rows.append(["reference p50", *(REF_COMMIT.get(int(k), "") for k in sizes)])
        parts.append("Commit of n keys, ms\n\n" + md_table(["n", *sizes], rows))
    if "throughput" in res:
        tp = res["throughput"]
        concs = list(tp["default"])
        rows = [[name, *(tp[name][c]["steps_per_s"] for c in concs)] for name, _ in DURABILITIES]
        rows.append(["reference", *(float(REF_THROUGHPUT[int(c)]) for c in concs)])
        parts.append(
            f"Throughput, {tp['transactions']} tx × {tp['steps_per_transaction']} `kv.put` + "
            "commit, steps/s\n\n" + md_table(["concurrency", *concs], rows)
        )
    if "memory" in res:
        m = res["memory"]
        parts.append(
            f"Memory per idle open transaction ({m['transactions']:,} open, one step each)\n\n"
            + md_table(
                ["", "bytes per transaction"],
                [
                    ["Python heap (tracemalloc)", m["heap_bytes_per_tx"]],
                    ["RSS growth", m["rss_bytes_per_tx"]],
                    ["… of it SQLite's page caches", m.get("sqlite_bytes_per_tx") or "n/a"],
                ],
            )
        )
    if "compare" in res:
        rows = []
        for name, _ in DURABILITIES:
            c = res["compare"][name]
            for sysname in ("agenttx", "dbos", "langgraph"):
                v = c[sysname]
                if v["status"] != "ok":
                    rows.append([f"{sysname} · {name}", v["status"], "", "", ""])
                else:
                    rows.append(
                        [
                            f"{sysname} · {name}",
                            v["p50"],
                            v["mean"],
                            v["p99"],
                            f"{v.get('ratio_p50', 1.0):.1f}×",
                        ]
                    )
        parts.append(
            "10-step workload (10 writes, then commit), ms per run\n\n"
            + md_table(["", "p50", "mean", "p99", "× AgentTx (p50)"], rows)
        )
    if "profile" in res:
        for name, _ in DURABILITIES:
            p = res["profile"][name]
            for prof in ("pyinstrument", "cprofile"):
                if prof in p:
                    q = p[prof]
                    parts.append(
                        f"Self time by area, {name}, {prof} "
                        f"({q['wall_us_per_step']:.0f} µs/step under the profiler)\n\n"
                        + md_table(
                            ["area", "µs/step", "%"],
                            [[k, v["us_per_step"], v["pct"]] for k, v in q["areas"].items()],
                        )
                    )
            q = p["cprofile"]
            parts.append(
                f"Top functions by self time, {name}, cProfile\n\n"
                + md_table(
                    ["function", "calls/step", "self µs/step", "%"],
                    top_function_rows(q["top_self"], "step", "self_pct", md=True),
                )
            )
    if res.get("targets"):
        parts.append(targets_section(res["targets"], "unit"))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ap.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        help="run only this section (repeatable); other sections in the results file are kept",
    )
    ns = ap.parse_args(argv)
    output = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or RESULTS)))
        return 0
    selected = ns.only or list(SECTIONS)
    ROUNDS["n"] = rounds_of(ns)
    out = Out()

    res: dict[str, Any] = read_result(output) if ns.only and output is not None else {}
    res["machine"] = machine_info()
    res["quick"] = ns.quick
    res["rounds"] = ROUNDS["n"]
    started = time.perf_counter()
    q = ns.quick
    run_sections(
        out,
        res,
        selected,
        {
            "floor": lambda: bench_floor(q),
            "store": lambda: asyncio.run(bench_store(q)),
            "step": lambda: asyncio.run(bench_step(q)),
            "rewind": lambda: asyncio.run(bench_rewind(q)),
            "commit": lambda: asyncio.run(bench_commit(q)),
            "throughput": lambda: asyncio.run(bench_throughput(q)),
            "memory": lambda: asyncio.run(bench_memory(q)),
            "compare": lambda: bench_compare(q),
            "profile": lambda: bench_profile(q),
        },
    )
    finish_machine(res, started)
    res["targets"] = targets(res)
    report(out, res)
    write_result(out, output, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
