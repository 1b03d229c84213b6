"""AgentTx against DBOS and LangGraph on one workflow, one at a time and 16 at once (issue 24).

Run from the repository root::

    .venv/bin/pip install -r benchmarks/requirements.txt   # the peers: DBOS, LangGraph
    .venv/bin/python -m benchmarks.peers            # full run, ~6 min, writes peers.json
    .venv/bin/python -m benchmarks.peers --quick    # smoke run, ~30 s, writes only to --output
    .venv/bin/python -m benchmarks.peers --system agenttx --mode c16 --durability default \\
        --rounds 20                                 # one part alone (for a profiler); no file

**The workflow** is the engine benchmark's ``compare``: 10 durable writes, then commit. AgentTx:
``begin``, 10 ``execute_step(kv.put)``, ``commit``. DBOS 3.4: a ``@DBOS.workflow`` calling a
``@DBOS.step`` 10 times, SQLite system database. LangGraph 1.2: a ``StateGraph`` of 10 chained
nodes, each writing one key, a SQLite checkpointer, ``durability="sync"`` (each super-step's
checkpoint written before the next runs, as an AgentTx step is durable before it returns).
All on a SQLite file in WAL mode at the same ``synchronous`` level: default (``NORMAL``) and
``sync_writes`` (``FULL``: an fsync per commit).

**Two modes**, each through the interface a user of the system would use:

- ``sequential``: ``benchmarks.engine``'s compare unchanged (runs one after the other, p50 ms
  per run); the ratio is the peer's p50 over AgentTx's.
- ``c16``: 16 workflows in flight at once, ``WORKFLOWS`` in all; steps/s = workflows × 10 /
  wall time (starts and commits included). AgentTx: 16 asyncio tasks on one embedded
  ``Engine``. Each peer in both of its forms, as documented: DBOS ``threads`` (workflows
  started with ``DBOS.start_workflow``, which runs them on DBOS's thread pool, 16 handles
  outstanding) and ``async`` (an ``async`` workflow started with ``DBOS.start_workflow_async``
  on the caller's loop, 16 outstanding); LangGraph ``threads`` (``batch`` with
  ``max_concurrency=16`` on ``SqliteSaver``, a thread pool) and ``async`` (``abatch`` with
  ``max_concurrency=16`` on ``AsyncSqliteSaver``, distinct ``thread_id`` per run). The ratio
  is AgentTx's steps/s over the peer's faster form in that round.

**Interleaved**: a round runs each mode's systems in an order rotated from round to round
(A B C, B C A, C A B …) so a drifting load touches all alike; every measurement on a fresh
file, after an untimed warm-up. Ratios are taken per round and the median round is the
headline; every round is kept in the JSON, with each c16 measurement's process CPU time per
step (all threads) beside its wall time. A peer that is not installed is reported as such.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.engine import (
    DURABILITIES,
    agenttx_compare,
    dbos_launched,
    dbos_workflows,
    dbos_workload,
    langgraph_graph,
    langgraph_workload,
    open_engine,
    synchronous_pragma,
)
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    finish_machine,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    scratch,
    target_rows,
    targets_section,
    write_result,
)
from benchmarks.run_floor import one_run

RESULTS = RESULTS_DIR / "peers.json"
PEERS = ("dbos", "langgraph")
SYSTEMS = ("agenttx", *PEERS)
MODES = ("sequential", "c16")
CONCURRENCY = 16
STEPS = 10
# Issue 24's targets, AgentTx's advantage over each peer at the default durability: the same
# bounds for one workflow at a time (p50 ratio) and for 16 at once (steps/s ratio).
TARGET = {"dbos": 15.0, "langgraph": 8.0}
NOT_INSTALLED = {"status": "not installed"}


# --------------------------------------------------------------------------- c16 workloads

Measured = tuple[float, float]  # (wall seconds, process CPU seconds) of the timed part


def _rate(workflows: int, measured: Measured) -> dict[str, Any]:
    wall, cpu = measured
    steps = workflows * STEPS
    return {
        "status": "ok",
        "workflows": workflows,
        "seconds": wall,
        "steps_per_s": steps / wall,
        "cpu_us_per_step": cpu / steps * 1e6,
    }


def _timed(run: Callable[[], object]) -> Measured:
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


async def _timed_async(run: Callable[[], Awaitable[object]]) -> Measured:
    t0, c0 = time.perf_counter(), time.process_time()
    await run()
    return time.perf_counter() - t0, time.process_time() - c0


async def agenttx_c16(sync: bool, workflows: int) -> dict[str, Any]:
    """16 asyncio tasks on one embedded engine, each running its next workflow when its last
    one committed, until ``workflows`` are done."""
    with scratch("peers-agenttx") as d:
        engine = await open_engine(d, sync)
        try:

            async def window(tag: str, n: int) -> None:
                todo = iter(range(n))

                async def worker() -> None:
                    for r in todo:  # one shared iterator: each run taken once
                        await one_run(engine, f"{tag}{r}")

                await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))

            await window("warm", CONCURRENCY)
            measured = await _timed_async(lambda: window("run", workflows))
        finally:
            await engine.close()
    return _rate(workflows, measured)


def _dbos_window(start: Callable[[int], Any], wait: Callable[[Any], int], n: int) -> None:
    """``n`` workflows started with ``start``, at most 16 outstanding: the oldest is waited
    for before the next starts (all take the same time, so the window stays full)."""
    handles: collections.deque[Any] = collections.deque()
    for r in range(n):
        if len(handles) == CONCURRENCY:
            _check_dbos(wait(handles.popleft()))
        handles.append(start(r))
    while handles:
        _check_dbos(wait(handles.popleft()))


def _check_dbos(result: int) -> None:
    if result != STEPS:
        raise RuntimeError(f"a DBOS workflow returned {result!r}, not {STEPS}")


def dbos_c16_threads(sync: bool, workflows: int) -> dict[str, Any]:
    try:
        wf = dbos_workflows()["workflow"]
    except ImportError:
        return NOT_INSTALLED
    with scratch("peers-dbos") as d, dbos_launched(d, sync) as DBOS:

        def window(base: int, n: int) -> None:
            _dbos_window(lambda r: DBOS.start_workflow(wf, base + r), lambda h: h.get_result(), n)

        window(0, CONCURRENCY)  # warm
        measured = _timed(lambda: window(CONCURRENCY, workflows))
    return _rate(workflows, measured)


def dbos_c16_async(sync: bool, workflows: int) -> dict[str, Any]:
    try:
        wf = dbos_workflows()["workflow_async"]
    except ImportError:
        return NOT_INSTALLED
    with scratch("peers-dbos-async") as d, dbos_launched(d, sync) as DBOS:

        async def window(base: int, n: int) -> None:
            handles: collections.deque[Any] = collections.deque()
            for r in range(n):
                if len(handles) == CONCURRENCY:
                    _check_dbos(await handles.popleft().get_result())
                handles.append(await DBOS.start_workflow_async(wf, base + r))
            while handles:
                _check_dbos(await handles.popleft().get_result())

        async def main() -> Measured:
            await window(0, CONCURRENCY)  # warm
            return await _timed_async(lambda: window(CONCURRENCY, workflows))

        measured = asyncio.run(main())
    return _rate(workflows, measured)


def _langgraph_batch(base: int, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The inputs and configs of ``n`` runs, each its own ``thread_id``; LangGraph's batch
    reads ``max_concurrency`` from the first config."""
    inputs: list[dict[str, Any]] = [{"kv": {}} for _ in range(n)]
    configs: list[dict[str, Any]] = [
        {"configurable": {"thread_id": f"run-{base + r}"}, "max_concurrency": CONCURRENCY}
        for r in range(n)
    ]
    return inputs, configs


def _check_langgraph(outs: list[Any]) -> None:
    bad = [o for o in outs if not isinstance(o, dict) or len(o.get("kv", {})) != STEPS]
    if bad:
        raise RuntimeError(f"{len(bad)} LangGraph runs did not write {STEPS} keys: {bad[0]!r}")


def langgraph_c16_threads(sync: bool, workflows: int) -> dict[str, Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        graph = langgraph_graph()
    except ImportError:
        return NOT_INSTALLED
    with scratch("peers-langgraph") as d:
        # check_same_thread=False: SqliteSaver serialises its use of the connection with a
        # lock, so batch's threads may share it (its docstring says as much).
        conn = sqlite3.connect(d / "langgraph.db", check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()  # sets journal_mode=WAL
            conn.execute(synchronous_pragma(sync))
            app = graph.compile(checkpointer=saver)

            def window(base: int, n: int) -> None:
                inputs, configs = _langgraph_batch(base, n)
                _check_langgraph(app.batch(inputs, configs, durability="sync"))

            window(0, CONCURRENCY)  # warm
            measured = _timed(lambda: window(CONCURRENCY, workflows))
        finally:
            conn.close()
    return _rate(workflows, measured)


def langgraph_c16_async(sync: bool, workflows: int) -> dict[str, Any]:
    try:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        graph = langgraph_graph()
    except ImportError:
        return NOT_INSTALLED

    async def main(path: Path) -> Measured:
        async with aiosqlite.connect(path) as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()  # sets journal_mode=WAL
            await conn.execute(synchronous_pragma(sync))
            app = graph.compile(checkpointer=saver)

            async def window(base: int, n: int) -> None:
                inputs, configs = _langgraph_batch(base, n)
                _check_langgraph(await app.abatch(inputs, configs, durability="sync"))

            await window(0, CONCURRENCY)  # warm
            return await _timed_async(lambda: window(CONCURRENCY, workflows))

    with scratch("peers-langgraph-async") as d:
        measured = asyncio.run(main(d / "langgraph.db"))
    return _rate(workflows, measured)


# A c16 entry per system and form, in the order the first round runs them.
C16: dict[str, Callable[[bool, int], dict[str, Any]]] = {
    "agenttx": lambda sync, n: asyncio.run(agenttx_c16(sync, n)),
    "dbos.threads": dbos_c16_threads,
    "dbos.async": dbos_c16_async,
    "langgraph.threads": langgraph_c16_threads,
    "langgraph.async": langgraph_c16_async,
}
SEQUENTIAL: dict[str, Callable[[bool, int, int], dict[str, Any]]] = {
    "agenttx": lambda sync, runs, warm: asyncio.run(agenttx_compare(sync, runs, warm)),
    "dbos": dbos_workload,
    "langgraph": langgraph_workload,
}


# --------------------------------------------------------------------------- rounds


def rotated(names: list[str], i: int) -> list[str]:
    """``names`` started at its ``i``-th (mod its length): round i's running order."""
    k = i % len(names) if names else 0
    return names[k:] + names[:k]


def _system(entry: str) -> str:
    return entry.split(".")[0]


def _ok(v: dict[str, Any] | None) -> bool:
    return v is not None and v.get("status") == "ok"


def round_ratios(rnd: dict[str, Any]) -> dict[str, dict[str, float]]:
    """One round's ratios: sequential, each peer's p50 over AgentTx's; c16, AgentTx's
    steps/s over the peer's faster form (``c16``) and over each form (``c16_forms``)."""
    out: dict[str, dict[str, float]] = {"sequential": {}, "c16": {}, "c16_forms": {}}
    seq, c16 = rnd.get("sequential", {}), rnd.get("c16", {})
    ours = seq.get("agenttx")
    for peer in PEERS:
        if _ok(ours) and _ok(seq.get(peer)):
            out["sequential"][peer] = seq[peer]["p50"] / ours["p50"]
    ours = c16.get("agenttx")
    if _ok(ours):
        for peer in PEERS:
            forms = {k: v for k, v in c16.items() if _system(k) == peer and _ok(v)}
            for k, v in forms.items():
                out["c16_forms"][k] = ours["steps_per_s"] / v["steps_per_s"]
            if forms:
                best = max(v["steps_per_s"] for v in forms.values())
                out["c16"][peer] = ours["steps_per_s"] / best
    return out


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Across the rounds: the median of each ratio, and of each measurement's headline."""
    med: dict[str, Any] = {"ratios": {}, "sequential_p50_ms": {}, "c16_steps_per_s": {}}
    for kind in ("sequential", "c16", "c16_forms"):
        names = sorted({k for r in rounds for k in r["ratios"][kind]})
        med["ratios"][kind] = {
            k: statistics.median(r["ratios"][kind][k] for r in rounds if k in r["ratios"][kind])
            for k in names
        }
        med["ratios"][f"{kind}_rounds"] = {
            k: [r["ratios"][kind].get(k) for r in rounds] for k in names
        }
    for mode, key, field in (
        ("sequential", "sequential_p50_ms", "p50"),
        ("c16", "c16_steps_per_s", "steps_per_s"),
    ):
        names = sorted({k for r in rounds for k, v in r.get(mode, {}).items() if _ok(v)})
        for k in names:
            got = [r[mode][k][field] for r in rounds if _ok(r.get(mode, {}).get(k))]
            med[key][k] = {"median": statistics.median(got), "rounds": got}
    cpu = {}
    for k in sorted({k for r in rounds for k in r.get("c16", {})}):
        got = [r["c16"][k]["cpu_us_per_step"] for r in rounds if _ok(r["c16"].get(k))]
        if got:
            cpu[k] = statistics.median(got)
    med["c16_cpu_us_per_step"] = cpu
    return med


def run(
    rounds: int,
    quick: bool,
    systems: list[str],
    modes: list[str],
    durabilities: list[str],
    out: Out,
) -> dict[str, Any]:
    workflows = 32 if quick else 160
    runs, warm = (20, 3) if quick else (100, 10)
    res: dict[str, Any] = {
        "workflow": f"{STEPS} writes then commit",
        "c16": {"concurrency": CONCURRENCY, "workflows": workflows},
        "sequential": {"runs": runs, "warmup": warm},
        "rounds": rounds,
    }
    seq_names = [s for s in SEQUENTIAL if s in systems]
    c16_names = [s for s in C16 if _system(s) in systems]
    for name, _ in DURABILITIES:
        if name in durabilities:
            res[name] = {"rounds": []}
    for i in range(rounds):
        for name, sync in DURABILITIES:
            if name not in durabilities:
                continue
            rnd: dict[str, Any] = {"order": {}}
            if "sequential" in modes:
                order = rotated(seq_names, i)
                rnd["order"]["sequential"] = order
                rnd["sequential"] = {s: SEQUENTIAL[s](sync, runs, warm) for s in order}
            if "c16" in modes:
                order = rotated(c16_names, i)
                rnd["order"]["c16"] = order
                rnd["c16"] = {s: C16[s](sync, workflows) for s in order}
            rnd["ratios"] = round_ratios(rnd)
            res[name]["rounds"].append(rnd)
            out.note(f"[dim]round {i + 1}/{rounds} · {name}: {_round_line(rnd)}[/dim]")
    for name, _ in DURABILITIES:
        if name in res:
            res[name]["median"] = _medians(res[name]["rounds"])
    return res


def _round_line(rnd: dict[str, Any]) -> str:
    parts = []
    for k, v in rnd.get("c16", {}).items():
        parts.append(f"{k} {v['steps_per_s']:,.0f}/s" if _ok(v) else f"{k} {v['status']}")
    for kind in ("sequential", "c16"):
        for peer, x in rnd["ratios"][kind].items():
            parts.append(f"{kind} ×{peer} {x:.1f}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- report


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    t: list[dict[str, Any]] = []
    med = res.get("default", {}).get("median")
    if not med:
        return t
    for kind, what in (
        ("sequential", "one workflow at a time, p50"),
        ("c16", "16 workflows at once, steps/s"),
    ):
        for peer in PEERS:
            got = med["ratios"][kind].get(peer)
            if got is None:
                continue
            bound = TARGET[peer]
            t.append(
                {
                    "target": f"AgentTx ≥ {bound:g}× {peer}, {what} (default, median round)",
                    "bound": bound,
                    "measured": got,
                    "unit": "×",
                    "met": got >= bound,
                }
            )
    return t


def _status(res: dict[str, Any], name: str, mode: str, entry: str) -> str:
    for rnd in res[name]["rounds"]:
        v = rnd.get(mode, {}).get(entry)
        if v is not None and not _ok(v):
            return str(v["status"])
    return "not run"


def _c16_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, _ in DURABILITIES:
        if name not in res:
            continue
        med = res[name]["median"]
        for entry in C16:
            got = med["c16_steps_per_s"].get(entry)
            if got is None:
                if any(entry in r.get("c16", {}) for r in res[name]["rounds"]):
                    rows.append([f"{entry} · {name}", _status(res, name, "c16", entry), "", ""])
                continue
            x = med["ratios"]["c16_forms"].get(entry)
            rows.append(
                [
                    f"{entry} · {name}",
                    got["median"],
                    " ".join(f"{v:,.0f}" for v in got["rounds"]),
                    med["c16_cpu_us_per_step"].get(entry, ""),
                    f"{x:.1f}×" if x else "",
                ]
            )
    return rows


_C16_COLUMNS = [
    "system · durability",
    "steps/s (median)",
    "steps/s per round",
    "CPU µs/step",
    "AgentTx ×",
]


def _seq_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, _ in DURABILITIES:
        if name not in res:
            continue
        med = res[name]["median"]
        for entry in SEQUENTIAL:
            got = med["sequential_p50_ms"].get(entry)
            if got is None:
                if any(entry in r.get("sequential", {}) for r in res[name]["rounds"]):
                    rows.append([f"{entry} · {name}", _status(res, name, "sequential", entry)])
                continue
            x = med["ratios"]["sequential"].get(entry)
            rows.append(
                [
                    f"{entry} · {name}",
                    got["median"],
                    " ".join(f"{v:.2f}" for v in got["rounds"]),
                    f"{x:.1f}×" if x else "",
                ]
            )
    return [r + [""] * (4 - len(r)) for r in rows]


_SEQ_COLUMNS = ["system · durability", "p50 ms (median)", "p50 ms per round", "× AgentTx"]


def _ratio_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, _ in DURABILITIES:
        if name not in res:
            continue
        r = res[name]["median"]["ratios"]
        for kind, label in (("sequential", "one at a time"), ("c16", "16 at once")):
            for peer in PEERS:
                if peer in r[kind]:
                    rounds = " ".join(f"{x:.1f}" for x in r[f"{kind}_rounds"][peer] if x)
                    rows.append([f"vs {peer}, {label} · {name}", f"{r[kind][peer]:.1f}×", rounds])
    return rows


_RATIO_COLUMNS = ["AgentTx's advantage", "median round", "per round"]


def _sections(res: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    c16 = res.get("c16", {})
    seq = res.get("sequential", {})
    return [
        (
            "AgentTx's advantage (peer's time / ours; at c16 over the peer's faster form)",
            _RATIO_COLUMNS,
            _ratio_rows(res),
        ),
        (
            f"{c16.get('concurrency')} workflows at once, {c16.get('workflows')} in all "
            "(10 writes + commit each): steps/s",
            _C16_COLUMNS,
            _c16_rows(res),
        ),
        (
            f"One workflow at a time ({seq.get('runs')} runs a round): ms per run",
            _SEQ_COLUMNS,
            _seq_rows(res),
        ),
    ]


def report(out: Out, res: dict[str, Any]) -> None:
    m = res.get("machine", {})
    out.note(
        f"[bold]machine[/bold]: {m.get('cpu')} · {m.get('cores')} cores · Python "
        f"{m.get('python')} · SQLite {m.get('sqlite')} · {m.get('date')} · load "
        f"{m.get('load_average_start')} → {m.get('load_average_end')} · "
        f"{res.get('rounds')} rounds, interleaved"
    )
    for title, columns, rows in _sections(res):
        if rows:
            out.table(title, columns, rows)
    if res.get("targets"):
        out.table(
            "Targets",
            ["target", "bound", "measured", "unit", "met"],
            target_rows(res["targets"], "unit", md=False),
        )


def markdown(res: dict[str, Any]) -> str:
    parts = [f"{t}\n\n{md_table(c, r)}" for t, c, r in _sections(res) if r]
    if res.get("targets"):
        parts.append(targets_section(res["targets"], "unit"))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ap.add_argument("--system", action="append", choices=SYSTEMS, help="run only this system")
    ap.add_argument("--mode", action="append", choices=MODES, help="run only this mode")
    ap.add_argument(
        "--durability",
        action="append",
        choices=[n for n, _ in DURABILITIES],
        help="run only this durability",
    )
    ns = ap.parse_args(argv)
    # A run of some parts writes only where --output says: it never replaces the full result.
    partial = bool(ns.system or ns.mode or ns.durability)
    output = ns.output if partial else output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or RESULTS)))
        return 0
    out = Out()
    started = time.perf_counter()
    machine = machine_info()
    res = run(
        rounds_of(ns, full=5),
        ns.quick,
        ns.system or list(SYSTEMS),
        ns.mode or list(MODES),
        ns.durability or [n for n, _ in DURABILITIES],
        out,
    )
    res = {"machine": machine, "quick": ns.quick, **res}
    finish_machine(res, started)
    res["targets"] = targets(res)
    report(out, res)
    if partial and output is None:
        out.note("[dim]a run of some parts: no results file written (give --output)[/dim]")
    else:
        write_result(out, output, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
