"""What-if experiments: how much proposed engine changes would save, measured by patching the
engine in this process (nothing in ``src/`` is edited).

Run: ``.venv/bin/python -m benchmarks.engine_whatif [--rounds N] [--quick]``. Each experiment
and the baseline run interleaved, in shuffled order, ``--rounds`` times (default 5); the table
reports the best round of each (the least disturbed by other work on a shared machine).
Results go to ``benchmarks/results/engine_whatif.json``; ``--quick`` (1 round, small sizes)
writes only to ``--output``.

Experiments (each a stand-in that bounds the gain, not the code to ship):

- writer batching at the default durability: ``batched flush`` defers each write unit with
  ``call_soon`` so units of one loop iteration share a commit (the writer before it committed
  each unit at once); ``adaptive flush`` commits at once when no other callback is ready and
  batches otherwise (a stand-in for "another step is in flight");
- ``fsync on the loop``: sync_writes without the writer thread;
- ``commit fast path``: skip reading the versions of the written keys when no transaction
  committed since the snapshot.

They name engine internals, so they go stale when those move: a variant whose patch target is
missing, or that fails, is reported and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.engine import _bulk_tx, open_engine, run_throughput, step_loop
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    load_average,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    scratch,
    write_result,
)

RESULTS = RESULTS_DIR / "engine_whatif.json"

_saved: list[tuple[Any, str, Any]] = []


def _patch(obj: Any, name: str, value: Any) -> None:
    if not hasattr(obj, name):
        raise LookupError(f"{getattr(obj, '__name__', obj)!r} has no {name!r}")
    _saved.append((obj, name, getattr(obj, name)))
    setattr(obj, name, value)


def _unpatch() -> None:
    while _saved:
        obj, name, value = _saved.pop()
        setattr(obj, name, value)


@contextlib.contextmanager
def applied(experiments: list[Callable[[], None]]) -> Iterator[None]:
    """Apply the patches; a lone patch whose target is gone skips the variant (LookupError),
    a combination runs with the patches that still apply."""
    try:
        for e in experiments:
            try:
                e()
            except LookupError as exc:
                if len(experiments) == 1:
                    raise
                print(f"part of a combination skipped: {exc}", file=sys.stderr)
        yield
    finally:
        _unpatch()


# --------------------------------------------------------------------------- the patches


def _batched_run(adaptive: bool) -> Callable[..., Any]:
    from agenttx.store import sqlite_writer

    original = sqlite_writer.GroupCommitWriter.run

    def flush(self: Any) -> None:
        batch, self._bench_pending = self._bench_pending, []
        with self._lock:
            results = sqlite_writer._execute_batch(self._conn, [u for u, _ in batch])
        for (_, fut), (value, exc) in zip(batch, results, strict=True):
            if fut.done():
                continue
            if exc is None:
                fut.set_result(value)
            else:
                fut.set_exception(exc)

    async def run(self: Any, unit: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._threaded:
            return await original(self, unit)
        loop = asyncio.get_running_loop()
        pending = self.__dict__.setdefault("_bench_pending", [])
        # Stand-in for "another step is in flight": other callbacks ready in this iteration.
        if adaptive and not pending and not loop._ready:  # type: ignore[attr-defined]
            with self._lock:
                value, exc = sqlite_writer._execute_batch(self._conn, [unit])[0]
            if exc is not None:
                raise exc
            return value
        fut = loop.create_future()
        pending.append((unit, fut))
        if len(pending) == 1:
            loop.call_soon(flush, self)
        return await fut

    return run


def batched_flush() -> None:
    """Default durability: units of one loop iteration share a commit (call_soon), as the
    writer did before it committed each unit at once."""
    from agenttx.store import sqlite_writer

    _patch(sqlite_writer.GroupCommitWriter, "run", _batched_run(adaptive=False))


def adaptive_flush() -> None:
    """Commit at once when nothing else is ready to run; batch (call_soon) otherwise."""
    from agenttx.store import sqlite_writer

    _patch(sqlite_writer.GroupCommitWriter, "run", _batched_run(adaptive=True))


def fsync_on_loop() -> None:
    """sync_writes without the writer thread: the FULL commit runs inline on the loop."""
    from agenttx.store import sqlite_writer

    init = sqlite_writer.GroupCommitWriter.__init__

    def inline(self: Any, conn: sqlite3.Connection, *, threaded: bool) -> None:
        init(self, conn, threaded=False)

    _patch(sqlite_writer.GroupCommitWriter, "__init__", inline)


_MIN_CHECKED: contextvars.ContextVar[int | None] = contextvars.ContextVar("min_checked")


def commit_fast_path() -> None:
    """Before reading the versions of the written keys, read ``commit_seq``: if no transaction
    committed since the oldest version checked against, nothing can conflict. (Inline writer
    only: the wrapper hands the bound to the write unit through a context variable.)"""
    from agenttx.store import sqlite

    latest_versions = sqlite._latest_versions  # LookupError below if it moved
    commit = sqlite.SqliteStore.commit

    def latest(c: sqlite3.Connection, tenant: str, keys: list[str]) -> dict[str, int]:
        bound = _MIN_CHECKED.get(None)
        if bound is not None:
            newest = c.execute("SELECT value FROM meta WHERE name = 'commit_seq'").fetchone()[0]
            if newest <= bound:
                return {}
        result: dict[str, int] = latest_versions(c, tenant, keys)
        return result

    async def wrapped(self: Any, plan: Any) -> Any:
        token = _MIN_CHECKED.set(min((ch.max_version for ch in plan.checks), default=None))
        try:
            return await commit(self, plan)
        finally:
            _MIN_CHECKED.reset(token)

    _patch(sqlite, "_latest_versions", latest)
    _patch(sqlite.SqliteStore, "commit", wrapped)


# --------------------------------------------------------------------------- measurements


async def step_p50(sync: bool, n: int) -> float:
    with scratch("whatif") as d:
        engine = await open_engine(d, sync)
        try:
            return statistics.median(await step_loop(engine, n, 300)) / 1e3
        finally:
            await engine.close()


async def steps_per_s(sync: bool, concurrency: int, transactions: int) -> float:
    with scratch("whatif") as d:
        engine = await open_engine(d, sync)
        try:
            await run_throughput(engine, 8, 20, min(concurrency, 8), "warm")
            return (
                transactions
                * 20
                / await run_throughput(engine, transactions, 20, concurrency, "run")
            )
        finally:
            await engine.close()


async def commit_ms(sync: bool, n: int, reps: int) -> float:
    with scratch("whatif") as d:
        engine = await open_engine(d, sync)
        try:
            samples = []
            for r in range(reps + 1):
                tx = await _bulk_tx(engine, n, f"c{r}")
                t0 = time.perf_counter_ns()
                await engine.commit(tx)
                if r:
                    samples.append(time.perf_counter_ns() - t0)
            return statistics.median(samples) / 1e6
        finally:
            await engine.close()


def interleaved(
    rounds: int,
    variants: dict[str, list[Callable[[], None]]],
    measure: Callable[[], float],
    *,
    higher_is_better: bool = False,
) -> dict[str, Any]:
    runs: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            try:
                with applied(variants[name]):
                    runs[name].append(measure())
            except Exception as exc:
                print(f"skipped {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    pick = max if higher_is_better else min
    best = {k: pick(v) for k, v in runs.items() if v}
    base = best.get("baseline")
    return {
        k: {
            "best": v,
            "runs": runs[k],
            "change_vs_baseline": (v - base) if base is not None else None,
        }
        for k, v in best.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ns = ap.parse_args(argv)
    output = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or RESULTS)))
        return 0
    rounds = rounds_of(ns, full=5)
    # Quick: sizes that only prove every variant still runs; the full sizes are the measured.
    steps, transactions = (300, 32) if ns.quick else (2_000, 256)
    commits = ((1_000, 2),) if ns.quick else ((1_000, 20), (10_000, 4))
    out = Out()
    res: dict[str, Any] = {"machine": machine_info(), "rounds": rounds}
    if ns.quick:
        res["quick"] = True

    def step(sync: bool) -> Callable[[], float]:
        return lambda: asyncio.run(step_p50(sync, steps))

    def tput(sync: bool, conc: int) -> Callable[[], float]:
        return lambda: asyncio.run(steps_per_s(sync, conc, transactions))

    writer = {
        "baseline": [],
        "batched flush (call_soon)": [batched_flush],
        "adaptive flush": [adaptive_flush],
    }
    res["step_p50_us_default"] = interleaved(rounds, writer, step(False))
    for conc in (1, 16, 64):
        res[f"steps_per_s_default_c{conc}"] = interleaved(
            rounds, writer, tput(False, conc), higher_is_better=True
        )
    sync_variants = {"baseline": [], "fsync on the loop (no writer thread)": [fsync_on_loop]}
    res["step_p50_us_sync_writes"] = interleaved(rounds, sync_variants, step(True))
    for conc in (1, 16):
        res[f"steps_per_s_sync_writes_c{conc}"] = interleaved(
            rounds, sync_variants, tput(True, conc), higher_is_better=True
        )
    commit_variants = {"baseline": [], "fast path, no commit since snapshot": [commit_fast_path]}
    for n, reps in commits:

        def commit_n(n: int = n, reps: int = reps) -> float:
            return asyncio.run(commit_ms(False, n, reps))

        res[f"commit_ms_{n}"] = interleaved(rounds, commit_variants, commit_n)
    res["machine"]["load_average_end"] = load_average()

    for title, columns, body in tables(res):
        out.table(title, columns, body)
    write_result(out, output, res)
    return 0


def tables(res: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    """One table per metric: each variant's best round, its change, every round."""
    return [
        (
            metric,
            ["variant", "best", "Δ vs baseline", "runs"],
            [
                [k, v["best"], v["change_vs_baseline"], " ".join(f"{x:.0f}" for x in v["runs"])]
                for k, v in table.items()
            ],
        )
        for metric, table in res.items()
        if isinstance(table, dict) and "baseline" in table
    ]


def markdown(res: dict[str, Any]) -> str:
    return "\n\n".join(
        f"{title}\n\n{md_table(columns, body)}" for title, columns, body in tables(res)
    )


if __name__ == "__main__":
    sys.exit(main())
