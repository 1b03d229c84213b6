"""What-if experiments: how much proposed engine changes would save, measured by patching the
engine in this process (nothing in ``src/`` is edited).

Run: ``.venv/bin/python -m benchmarks.engine_whatif [--rounds N]``. Each experiment and the
baseline run interleaved, in shuffled order, ``--rounds`` times; the table reports the best
round of each (the least disturbed by other work on a shared machine). Results go to
``benchmarks/results/engine_whatif.json``.

The patches are stand-ins, not the proposed code: "graph off" drops the dependency graph
entirely (a lazy graph would keep it, built only when a failure asks for a root cause);
"no asyncio.timeout" removes the step timeout (the proposal keeps it for tools that can block).
They bound the gain; they are not safe to ship as they are. They name engine internals, so
they go stale when those move: a patch whose target is missing is reported and skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.engine import (
    Out,
    _bulk_tx,
    machine_info,
    open_engine,
    run_throughput,
    scratch,
    step_loop,
)

RESULTS = Path(__file__).resolve().parent / "results" / "engine_whatif.json"

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
    try:
        for e in experiments:
            e()
        yield
    finally:
        _unpatch()


# --------------------------------------------------------------------------- the patches

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_ENCODE_NAN = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class _JsonWithCachedEncoder:
    """``json`` as the engine modules use it, ``dumps`` through one reused encoder."""

    loads = staticmethod(json.loads)
    JSONDecodeError = json.JSONDecodeError

    @staticmethod
    def dumps(value: Any, **kw: Any) -> str:
        return _ENCODE(value) if kw.get("allow_nan") is False else _ENCODE_NAN(value)


def reuse_json_encoder() -> None:
    """json.dumps(..., separators=…, ensure_ascii=False) builds a JSONEncoder per call."""
    from agenttx.core import limits, runtime, steps
    from agenttx.store import sqlite

    _patch(steps, "dumps_json", _ENCODE)
    _patch(sqlite, "_dumps", _ENCODE_NAN)
    _patch(runtime, "json", _JsonWithCachedEncoder)
    _patch(limits, "json", _JsonWithCachedEncoder)


def graph_off() -> None:
    """Upper bound of a lazy dependency graph: no graph work on the success path."""
    from agenttx.core.graph import DependencyGraph

    _patch(DependencyGraph, "add_step", lambda self, *a, **k: [])


class _NoTimeout:
    async def __aenter__(self) -> _NoTimeout:
        return self

    async def __aexit__(self, *exc: object) -> bool:
        return False


def no_step_timeout() -> None:
    """Upper bound of skipping asyncio.timeout for in-process tools (kv.*, record.*)."""
    # steps.py calls asyncio.timeout through the module, so this patches every caller in
    # the process; on the step path only _run_tool uses it.
    _patch(asyncio, "timeout", lambda _t: _NoTimeout())


def eager_flush() -> None:
    """Run a write unit at once instead of via call_soon + a loop turn (no batching)."""
    from agenttx.store import sqlite_writer

    def run(self: Any, unit: Callable[[sqlite3.Connection], Any]) -> Any:
        async def now() -> Any:
            with self._lock:
                value, exc = sqlite_writer._execute_batch(self._conn, [unit])[0]
            if exc is not None:
                raise exc
            return value

        return now()

    _patch(sqlite_writer.GroupCommitWriter, "run", run)


def fsync_on_loop() -> None:
    """sync_writes without the writer thread: the FULL commit runs inline on the loop."""
    from agenttx.store import sqlite_writer

    init = sqlite_writer.GroupCommitWriter.__init__

    def inline(self: Any, conn: sqlite3.Connection, *, threaded: bool) -> None:
        init(self, conn, threaded=False)

    _patch(sqlite_writer.GroupCommitWriter, "__init__", inline)


def set_based_commit_check() -> None:
    """Commit validation in one statement over json_each instead of one SELECT per key."""
    from agenttx.store import sqlite
    from agenttx.store.contract import CommitOutcome, CommitPlan, VersionCheck

    async def commit(self: Any, plan: CommitPlan) -> CommitOutcome:
        tx_id, tenant = plan.on_success.tx_id, plan.tenant
        pairs = json.dumps([[c.key, c.max_version] for c in plan.checks])

        def unit(c: sqlite3.Connection) -> CommitOutcome:
            conflicts: list[VersionCheck] = []
            if plan.checks:
                rows = c.execute(
                    "SELECT j.key FROM json_each(?) AS j WHERE EXISTS (SELECT 1 FROM kv "
                    "WHERE kv.tenant = ? AND kv.key = j.value ->> 0 AND kv.version > "
                    "j.value ->> 1)",
                    (pairs, tenant),
                ).fetchall()
                if rows:
                    bad = {int(r[0]) for r in rows}
                    conflicts = [ch for i, ch in enumerate(plan.checks) if i in bad]
            if conflicts:
                revision = sqlite._apply_update(c, plan.on_conflict)
                return CommitOutcome(False, 0, revision, conflicts, [])
            revision = sqlite._apply_update(c, plan.on_success)
            version = 0
            if plan.writes:
                version = c.execute(
                    "UPDATE meta SET value = value + 1 WHERE name = 'commit_seq' RETURNING value"
                ).fetchone()[0]
                c.executemany(
                    "INSERT INTO kv (tenant, key, version, value) VALUES (?,?,?,?)",
                    [(tenant, k, version, v) for k, v in plan.writes.items()],
                )
            if plan.effects:
                raise NotImplementedError("experiment covers commits without effects")
            c.execute("DELETE FROM undo WHERE tx_id = ?", (tx_id,))
            return CommitOutcome(True, version, revision, [], [])

        outcome: CommitOutcome = await self._write(unit)
        return outcome

    _patch(sqlite.SqliteStore, "commit", commit)


EXPERIMENTS: dict[str, list[Callable[[], None]]] = {
    "baseline": [],
    "reuse JSON encoder": [reuse_json_encoder],
    "graph off (lazy graph bound)": [graph_off],
    "no asyncio.timeout (kv.*)": [no_step_timeout],
    "eager flush (no loop turn)": [eager_flush],
    "encoder + graph + timeout": [reuse_json_encoder, graph_off, no_step_timeout],
    "all four above": [reuse_json_encoder, graph_off, no_step_timeout, eager_flush],
}


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
            except LookupError as exc:
                print(f"skipped {name}: {exc}", file=sys.stderr)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output", type=Path, default=RESULTS)
    ns = ap.parse_args(argv)
    out = Out()
    res: dict[str, Any] = {"machine": machine_info(), "rounds": ns.rounds}

    def step(sync: bool) -> Callable[[], float]:
        return lambda: asyncio.run(step_p50(sync, 2_000))

    def tput(sync: bool, conc: int) -> Callable[[], float]:
        return lambda: asyncio.run(steps_per_s(sync, conc, 256))

    res["step_p50_us_default"] = interleaved(ns.rounds, EXPERIMENTS, step(False))
    fast = {k: EXPERIMENTS[k] for k in ("baseline", "eager flush (no loop turn)", "all four above")}
    fast["encoder + graph + timeout"] = EXPERIMENTS["encoder + graph + timeout"]
    for conc in (1, 16):
        res[f"steps_per_s_default_c{conc}"] = interleaved(
            ns.rounds, fast, tput(False, conc), higher_is_better=True
        )
    sync_variants = {"baseline": [], "fsync on the loop (no writer thread)": [fsync_on_loop]}
    res["step_p50_us_sync_writes"] = interleaved(ns.rounds, sync_variants, step(True))
    for conc in (1, 16):
        res[f"steps_per_s_sync_writes_c{conc}"] = interleaved(
            ns.rounds, sync_variants, tput(True, conc), higher_is_better=True
        )
    commit_variants = {"baseline": [], "set-based commit check": [set_based_commit_check]}
    for n, reps in ((1_000, 20), (10_000, 4)):

        def commit_n(n: int = n, reps: int = reps) -> float:
            return asyncio.run(commit_ms(False, n, reps))

        res[f"commit_ms_{n}"] = interleaved(ns.rounds, commit_variants, commit_n)
    res["machine"]["load_average_end"] = machine_info()["load_average_start"]

    for metric, table in res.items():
        if not isinstance(table, dict) or "baseline" not in table:
            continue
        out.table(
            metric,
            ["variant", "best", "Δ vs baseline", "runs"],
            [
                [k, v["best"], v["change_vs_baseline"], " ".join(f"{x:.0f}" for x in v["runs"])]
                for k, v in table.items()
            ],
        )
    ns.output.parent.mkdir(parents=True, exist_ok=True)
    ns.output.write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n")
    out.note(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
