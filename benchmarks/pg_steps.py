"""A 10-step run on PostgreSQL against the psycopg floor (issue 24): one round trip and one
server transaction per successful step, the run ≤ 1.5× the floor.

Run from the repository root, with PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth;
``AGENTTX_BENCH_PG`` overrides the admin URL)::

    .venv/bin/python -m benchmarks.pg_steps            # 3 rounds
    .venv/bin/python -m benchmarks.pg_steps --quick    # 1 round, fewer runs
    .venv/bin/python -m benchmarks.ab pg_steps --bench-from current --before main \\
        --after HEAD --rounds 4 -- --quick             # before and after, interleaved

Each on a database of its own, created and dropped here:

- ``run``: the embedded ``Engine`` on PostgreSQL (``background=False``): ``begin``, 10
  ``execute_step kv.put`` (distinct keys), ``commit``; wall time of the whole run.
- ``floor``: what 12 durable writes cost at the least through the same driver: 12 one-row
  autocommit ``INSERT`` statements (one round trip and one commit each) on one async psycopg
  connection.

A round alternates the two, one run each, ``--runs`` times, so a shared machine's load hits
both alike; its ratio is p50 run / p50 floor; ``run_cpu_us``: this process's CPU time a run
(the engine and the driver), and over the rounds' median, per step, ``cpu_us_per_step.run``
(a figure of ``benchmarks.ab``). ``xacts``: server transactions (the database's
``pg_stat_database.xact_commit``, read once every backend of the engine has exited, so all
their counts are flushed) per step: the difference between runs of 10 steps and runs of none
(begin + commit only), so opening, begin and commit cancel out.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

import agenttx
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    finish_machine,
    machine_info,
    output_of,
    read_result,
    rounds_of,
    stats_us,
    write_result,
)

ADMIN_URL = os.environ.get("AGENTTX_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
STEPS = 10
TARGET = 1.5  # the issue's: a 10-step run ≤ 1.5× the floor of its 12 one-row commits


def _url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


@asynccontextmanager
async def _database() -> AsyncIterator[str]:
    name = f"agenttx_bench_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(ADMIN_URL, autocommit=True) as c:
        await c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        async with await psycopg.AsyncConnection.connect(ADMIN_URL, autocommit=True) as c:
            await c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _agent_run(engine: agenttx.Engine, steps: int, tag: str) -> None:
    tx = (await engine.begin()).transaction_id
    for s in range(1, steps + 1):
        await engine.execute_step(tx, s, "kv.put", {"key": f"{tag}-{s}", "value": s})
    await engine.commit(tx)


async def _floor_run(c: psycopg.AsyncConnection[Any], n: int) -> None:
    for i in range(n):
        await c.execute("INSERT INTO floor (v) VALUES (%s)", (i,))


async def _round(runs: int) -> dict[str, Any]:
    async with _database() as name:
        url = _url(name)
        engine = await agenttx.Engine.open(url, background=False)
        floor = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            await floor.execute("CREATE TABLE floor (id BIGSERIAL PRIMARY KEY, v BIGINT)")
            for w in range(3):  # warm both: pools, prepared plans, caches
                await _agent_run(engine, STEPS, f"w{w}")
                await _floor_run(floor, STEPS + 2)
            run_ns: list[int] = []
            floor_ns: list[int] = []
            run_cpu_ns = 0  # this process's CPU during the runs: the engine and the driver
            for r in range(runs):
                for side in ("run", "floor") if r % 2 == 0 else ("floor", "run"):
                    t0 = time.perf_counter_ns()
                    if side == "run":
                        c0 = time.process_time_ns()
                        await _agent_run(engine, STEPS, f"r{r}")
                        run_ns.append(time.perf_counter_ns() - t0)
                        run_cpu_ns += time.process_time_ns() - c0
                    else:
                        await _floor_run(floor, STEPS + 2)
                        floor_ns.append(time.perf_counter_ns() - t0)
        finally:
            await floor.close()
            await engine.close()
    run, fl = stats_us(run_ns), stats_us(floor_ns)
    cpu_us = run_cpu_ns / runs / 1000
    return {"run": run, "floor": fl, "ratio": run["p50"] / fl["p50"], "run_cpu_us": cpu_us}


async def _xact_commits(name: str) -> int:
    """The database's committed transactions once none of its backends is left."""
    async with await psycopg.AsyncConnection.connect(ADMIN_URL, autocommit=True) as c:
        for _ in range(200):  # an exiting backend flushes its counts as it goes
            cur = await c.execute(
                "SELECT numbackends FROM pg_stat_database WHERE datname = %s", (name,)
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.05)
        await c.execute("SELECT pg_stat_clear_snapshot()")
        cur = await c.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _xacts(runs: int, steps: int) -> int:
    """Server transactions committed by an engine opened on a fresh database that makes
    ``runs`` runs of ``steps`` steps after one warm-up run, then closes."""
    async with _database() as name:
        engine = await agenttx.Engine.open(_url(name), background=False)
        try:
            await _agent_run(engine, steps, "warm")
        finally:
            await engine.close()
        before = await _xact_commits(name)
        engine = await agenttx.Engine.open(_url(name), background=False)
        try:
            for r in range(runs):
                await _agent_run(engine, steps, f"x{r}")
        finally:
            await engine.close()
        return await _xact_commits(name) - before


async def _xacts_per_step(runs: int) -> dict[str, float]:
    with_steps = await _xacts(runs, STEPS)
    without = await _xacts(runs, 0)
    return {
        "server_xacts_per_run": with_steps / runs,
        "per_run_without_steps": without / runs,
        "server_xacts_per_step": (with_steps - without) / (runs * STEPS),
    }


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS_DIR / "pg_steps.json")
    ap.add_argument("--runs", type=int, default=None, help="runs a side a round (default 60)")
    ns = ap.parse_args(argv)
    out = Out()
    if ns.markdown:
        res = read_result(ns.default_output)
        _tables(out, res)
        return 0
    started = time.perf_counter()
    res: dict[str, Any] = {"machine": machine_info(packages=("psycopg",))}
    runs = int(ns.runs or (20 if ns.quick else 60))
    rounds = [asyncio.run(_round(runs)) for _ in range(rounds_of(ns))]
    res["rounds"] = rounds
    res["ratio"] = {
        "p50": statistics.median(r["ratio"] for r in rounds),
        "target": TARGET,
    }
    res["run"] = {"p50": statistics.median(r["run"]["p50"] for r in rounds)}
    res["floor"] = {"p50": statistics.median(r["floor"]["p50"] for r in rounds)}
    # This process's CPU (the engine and the driver) a run over its steps: a figure for
    # benchmarks.ab, which a loaded disk moves far less than the wall times.
    res["cpu_us_per_step"] = {"run": statistics.median(r["run_cpu_us"] for r in rounds) / STEPS}
    res["xacts"] = asyncio.run(_xacts_per_step(5 if ns.quick else 20))
    finish_machine(res, started)
    _tables(out, res)
    write_result(out, output_of(ns), res)
    return 0


def _tables(out: Out, res: dict[str, Any]) -> None:
    if not res:
        out.note("no results yet")
        return
    rows = [
        [f"round {i + 1}", r["run"]["p50"], r["floor"]["p50"], r["ratio"], r.get("run_cpu_us")]
        for i, r in enumerate(res.get("rounds", []))
    ]
    rows.append(["median", res["run"]["p50"], res["floor"]["p50"], res["ratio"]["p50"], ""])
    out.table(
        f"10-step run vs 12 one-row psycopg commits (target ≤ {TARGET}×)",
        ["", "run p50 µs", "floor p50 µs", "run / floor", "run CPU µs (this process)"],
        rows,
    )
    x = res.get("xacts", {})
    if x:
        out.table(
            "server transactions (pg_stat_database.xact_commit)",
            ["per step", "per 10-step run", "per run of no steps"],
            [
                [
                    x["server_xacts_per_step"],
                    x["server_xacts_per_run"],
                    x["per_run_without_steps"],
                ]
            ],
        )


if __name__ == "__main__":
    raise SystemExit(main())
