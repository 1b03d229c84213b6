"""The embedded 10-step run against the storage floor it stands on (issue 24), in one run.

Run from the repository root::

    .venv/bin/python -m benchmarks.run_floor            # full run, ~1 min, writes run_floor.json
    .venv/bin/python -m benchmarks.run_floor --quick    # smoke run, ~15 s
    .venv/bin/python -m benchmarks.ab run_floor --bench-from current --before main \\
        --after HEAD --rounds 4 -- --quick               # two commits, interleaved (ABBA)

- **The run**: on an embedded ``agenttx.Engine`` over a SQLite file, ``begin``, ten
  ``kv.put`` steps, ``commit`` — twelve durable writes (one SQLite transaction each).
- **The floor**: twelve small ``sqlite3`` transactions (``BEGIN IMMEDIATE``; insert one short
  row; ``COMMIT``) on a WAL file in the same directory at the same ``synchronous`` level: what
  twelve durable writes cost with nothing around them.
- **Interleaved**: each sample is one run and one group of twelve, their order alternating
  from sample to sample, so the machine's load touches both alike; a round is a fresh engine
  and a fresh floor file. The ratio is taken per round (run p50 / floor p50) and the median
  of the rounds is the headline; every round is kept in the JSON. The same ratio of this
  thread's CPU time is printed beside it: on a loaded machine a sample's wall time also holds
  the time other processes had the core, its CPU time (mostly) not.
- **What a commit writes**: after the timed samples, the WAL is emptied
  (``wal_checkpoint(TRUNCATE)`` from a second connection), a few more runs go through, and
  the WAL's frame headers are read: frames per commit (begin, each step, the commit), and the
  b-tree each frame's page belongs to (``dbstat``). With ``strace`` on the machine it is
  attached to this process around a few more runs and floor groups, counting ``pwrite64`` and
  ``fdatasync`` calls (SQLite writes a WAL frame as two ``pwrite64``: header, then page).

At both durabilities: default (WAL, ``synchronous=NORMAL``) and ``sync_writes=True``
(``FULL``: one ``fdatasync`` per commit).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import agenttx
from benchmarks.engine import DURABILITIES, open_engine
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
    run_sections,
    scratch,
    stats_us,
    target_rows,
    targets_section,
    write_result,
)

RESULTS = RESULTS_DIR / "run_floor.json"
SECTIONS = ("latency", "writes")
STEPS = 10  # kv.put steps per run: with begin and commit, twelve durable writes
FLOOR_TXNS = STEPS + 2
# The targets (24): run p50 / floor p50 per durability, and WAL frames per step commit.
RATIO_TARGET = {"default": 5.0, "sync_writes": 1.15}
FRAMES_PER_STEP_TARGET = 5.0
_WAL_HEADER = 32
_FRAME_HEADER = 24


# --------------------------------------------------------------------------- the two workloads


async def one_run(engine: agenttx.Engine, tag: str) -> None:
    """Begin, ten ``kv.put`` steps, commit."""
    tx = (await engine.begin(agent_id="bench")).transaction_id
    for s in range(1, STEPS + 1):
        res = await engine.execute_step(tx, s, "kv.put", {"key": f"{tag}/k{s}", "value": s})
        if res.status is not agenttx.StepStatus.SUCCESS:
            raise RuntimeError(f"step failed: {res.clean_hint}")
    if not (await engine.commit(tx)).committed:
        raise RuntimeError("commit failed")


def open_floor(path: Path, sync: bool) -> sqlite3.Connection:
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
    c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT NOT NULL)")
    return c


def floor_group(c: sqlite3.Connection, tag: str) -> None:
    """Twelve small transactions, one row each."""
    for i in range(FLOOR_TXNS):
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"{tag}.{i}", '{"value":1}'))
        c.execute("COMMIT")


# --------------------------------------------------------------------------- latency


async def _latency_round(sync: bool, n: int, warm: int) -> dict[str, Any]:
    with scratch("runfloor") as d:
        engine = await open_engine(d, sync)
        c = open_floor(d / "floor.db", sync)
        # Wall time (the measure), and this thread's CPU time beside it: on a loaded machine
        # a sample's wall time also holds the time other processes had the core.
        wall: dict[str, list[int]] = {"run": [], "floor": []}
        cpu: dict[str, list[int]] = {"run": [], "floor": []}
        clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
        try:
            for i in range(n + warm):
                tag = f"r{i}"
                for part in ("run", "floor") if i % 2 == 0 else ("floor", "run"):
                    t0, c0 = clock(), cpu_clock()
                    if part == "run":
                        await one_run(engine, tag)
                    else:
                        floor_group(c, tag)
                    t1, c1 = clock(), cpu_clock()
                    if i >= warm:
                        wall[part].append(t1 - t0)
                        cpu[part].append(c1 - c0)
        finally:
            c.close()
            await engine.close()
    run, floor = stats_us(wall["run"]), stats_us(wall["floor"])
    run_cpu, floor_cpu = stats_us(cpu["run"]), stats_us(cpu["floor"])
    return {
        "run": run,
        "floor": floor,
        "ratio_p50": run["p50"] / floor["p50"],
        "ratio_mean": run["mean"] / floor["mean"],
        "cpu": {"run": {"p50": run_cpu["p50"]}, "floor": {"p50": floor_cpu["p50"]}},
        "ratio_cpu_p50": run_cpu["p50"] / floor_cpu["p50"],
    }


def bench_latency(quick: bool, rounds: int) -> dict[str, Any]:
    n, warm = (100, 20) if quick else (400, 40)
    out: dict[str, Any] = {"runs_per_round": n, "warmup": warm, "rounds": rounds}
    for name, sync in DURABILITIES:
        got = [asyncio.run(_latency_round(sync, n, warm)) for _ in range(rounds)]
        # The round whose ratio is the median one stands for the durability (its run and
        # floor shared that round's load); every round's figures are kept beside it.
        by_ratio = sorted(got, key=lambda r: r["ratio_p50"])
        middle = by_ratio[(len(by_ratio) - 1) // 2]
        out[name] = {
            **middle,
            "ratio_p50_median": statistics.median(r["ratio_p50"] for r in got),
            "ratio_cpu_p50_median": statistics.median(r["ratio_cpu_p50"] for r in got),
            "ratio_p50_rounds": [r["ratio_p50"] for r in got],
            "run_p50_rounds": [r["run"]["p50"] for r in got],
            "floor_p50_rounds": [r["floor"]["p50"] for r in got],
        }
    return out


# --------------------------------------------------------------------------- writes


def wal_commits(wal: Path) -> list[list[int]]:
    """The page numbers of the frames of each committed transaction in a WAL file, in order
    (a frame whose salts differ from the header's is left over from before a reset: the end)."""
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < _WAL_HEADER:
        return []
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    commits: list[list[int]] = []
    pages: list[int] = []
    off = _WAL_HEADER
    while off + _FRAME_HEADER + page_size <= len(data):
        pgno, db_size = struct.unpack(">II", data[off : off + 8])
        if data[off + 8 : off + 16] != salts:
            break
        pages.append(pgno)
        if db_size:  # a commit frame: the transaction's last
            commits.append(pages)
            pages = []
        off += _FRAME_HEADER + page_size
    return commits


def btree_names(db: Path) -> dict[int, str]:
    """Page number → the table or index it belongs to ("" without the dbstat table)."""
    c = sqlite3.connect(db)
    try:
        return {int(p): str(n) for n, p in c.execute("SELECT name, pageno FROM dbstat")}
    except sqlite3.Error:
        return {}
    finally:
        c.close()


def _empty_wal(db: Path) -> None:
    c = sqlite3.connect(db)
    try:
        busy = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise RuntimeError(f"could not empty the WAL of {db}: busy")
    finally:
        c.close()


class SyscallCount:
    """``strace -c`` attached to this process (every thread) while the block runs; ``counts``
    is then syscall name → calls, or None when strace is missing or may not attach."""

    CALLS = "pwrite64,fdatasync,fsync"

    def __init__(self) -> None:
        self.counts: dict[str, int] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="agenttx-strace-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SyscallCount:
        strace = shutil.which("strace")
        if strace is None:
            return self
        log, summary = self._dir / "stderr", self._dir / "summary"
        with log.open("wb") as err:
            self._proc = subprocess.Popen(
                [
                    strace,
                    "-f",
                    "-c",
                    "-e",
                    f"trace={self.CALLS}",
                    "-o",
                    str(summary),
                    "-p",
                    str(os.getpid()),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.monotonic() + 10
        while b"attached" not in log.read_bytes():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stop()  # could not attach (ptrace not allowed): not measured
                return self
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._stop()
            summary = self._dir / "summary"
            counts: dict[str, int] = {}
            with contextlib.suppress(OSError):
                for line in summary.read_text().splitlines():
                    parts = line.split()
                    if len(parts) >= 5 and parts[-1] in self.CALLS.split(","):
                        counts[parts[-1]] = int(parts[3])
            self.counts = {name: counts.get(name, 0) for name in self.CALLS.split(",")}
        shutil.rmtree(self._dir, ignore_errors=True)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # detaches and writes the summary
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _per(counts: dict[str, int] | None, n: int) -> dict[str, float] | str:
    if counts is None:
        return "not measured (no strace, or it may not attach)"
    return {name: v / n for name, v in counts.items()}


async def _writes(sync: bool, runs: int) -> dict[str, Any]:
    with scratch("runwrites") as d:
        db = d / "agenttx.db"
        engine = await open_engine(d, sync)
        c = open_floor(d / "floor.db", sync)
        try:
            for i in range(20):  # warm: the tables have a few levels, as in the timed runs
                await one_run(engine, f"w{i}")
                floor_group(c, f"w{i}")
            store: Any = engine.store
            _empty_wal(db)
            before = int(store.commits)
            for i in range(runs):
                await one_run(engine, f"f{i}")
            committed = int(store.commits) - before
            commits = wal_commits(d / "agenttx.db-wal")
            names = btree_names(db)
            _empty_wal(d / "floor.db")
            for i in range(runs):
                floor_group(c, f"f{i}")
            floor_commits = wal_commits(d / "floor.db-wal")
            with SyscallCount() as run_calls:
                for i in range(runs):
                    await one_run(engine, f"s{i}")
            with SyscallCount() as floor_calls:
                for i in range(runs):
                    floor_group(c, f"s{i}")
        finally:
            c.close()
            await engine.close()
    if committed != len(commits) or len(commits) != runs * FLOOR_TXNS:
        raise RuntimeError(
            f"{len(commits)} commits in the WAL, {committed} by the store, expected "
            f"{runs * FLOOR_TXNS}: the WAL was reset meanwhile or something else wrote"
        )
    per_run = [commits[i : i + FLOOR_TXNS] for i in range(0, len(commits), FLOOR_TXNS)]
    kinds = {
        "begin": [r[0] for r in per_run],
        "step": [cm for r in per_run for cm in r[1:-1]],
        "commit": [r[-1] for r in per_run],
    }
    frames = {k: sum(map(len, v)) / len(v) for k, v in kinds.items()}
    pages: dict[str, dict[str, float]] = {}
    for k, v in kinds.items():
        count = collections.Counter(names.get(p, "other") for cm in v for p in cm)
        pages[k] = {name: n / len(v) for name, n in count.most_common()}
    return {
        "runs": runs,
        "commits_per_run": committed / runs,
        "run": {
            "frames_per_run": sum(map(len, commits)) / runs,
            "frames_per_commit": frames,
            "pages_by_btree": pages,
            "syscalls_per_run": _per(run_calls.counts, runs),
        },
        "floor": {
            "frames_per_run": sum(map(len, floor_commits)) / runs,
            "syscalls_per_run": _per(floor_calls.counts, runs),
        },
    }


def bench_writes(quick: bool) -> dict[str, Any]:
    runs = 4 if quick else 8  # under sync_writes the WAL is checkpointed at 1,000 frames
    return {name: asyncio.run(_writes(sync, runs)) for name, sync in DURABILITIES}


# --------------------------------------------------------------------------- report


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    t: list[dict[str, Any]] = []
    lat = res.get("latency")
    if lat:
        for name, _ in DURABILITIES:
            bound, got = RATIO_TARGET[name], lat[name]["ratio_p50_median"]
            t.append(
                {
                    "target": f"10-step run p50 ≤ {bound}× 12 raw SQLite transactions ({name})",
                    "bound": bound,
                    "measured": got,
                    "unit": "×",
                    "met": got <= bound,
                }
            )
    w = res.get("writes")
    if w:
        for name, _ in DURABILITIES:
            got = w[name]["run"]["frames_per_commit"]["step"]
            t.append(
                {
                    "target": f"WAL frames per step commit ≤ {FRAMES_PER_STEP_TARGET:g} ({name})",
                    "bound": FRAMES_PER_STEP_TARGET,
                    "measured": got,
                    "unit": "frames",
                    "met": got <= FRAMES_PER_STEP_TARGET,
                }
            )
        calls = w["sync_writes"]["run"]["syscalls_per_run"]
        if isinstance(calls, dict):
            syncs = calls["fdatasync"] + calls["fsync"]
            t.append(
                {
                    "target": f"fsyncs per run = {FLOOR_TXNS} (sync_writes)",
                    "bound": float(FLOOR_TXNS),
                    "measured": syncs,
                    "unit": "fsyncs",
                    "met": syncs <= FLOOR_TXNS,
                }
            )
    return t


def _latency_rows(lat: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, _ in DURABILITIES:
        v = lat[name]
        rows.append(
            [
                name,
                v["run"]["p50"],
                v["floor"]["p50"],
                f"{v['ratio_p50_median']:.2f}×",
                " ".join(f"{r:.2f}" for r in v["ratio_p50_rounds"]),
                f"{v['ratio_mean']:.2f}×",
                f"{v['ratio_cpu_p50_median']:.2f}×",
            ]
        )
    return rows


_LATENCY_COLUMNS = [
    "durability",
    "run p50 µs",
    "12 txns p50 µs",
    "ratio (median round)",
    "ratio per round",
    "ratio of means",
    "CPU-time ratio",
]


def _writes_rows(w: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, _ in DURABILITIES:
        v = w[name]
        f = v["run"]["frames_per_commit"]
        calls, fcalls = v["run"]["syscalls_per_run"], v["floor"]["syscalls_per_run"]

        def show(c: Any, key: str) -> Any:
            return c[key] if isinstance(c, dict) else "—"

        rows.append(
            [
                name,
                v["run"]["frames_per_run"],
                f["begin"],
                f["step"],
                f["commit"],
                v["floor"]["frames_per_run"],
                show(calls, "pwrite64"),
                show(fcalls, "pwrite64"),
                show(calls, "fdatasync"),
                show(fcalls, "fdatasync"),
            ]
        )
    return rows


_WRITES_COLUMNS = [
    "durability",
    "frames/run",
    "begin",
    "step",
    "commit",
    "floor frames/run",
    "pwrite64/run",
    "floor pwrite64",
    "fdatasync/run",
    "floor fdatasync",
]


def _pages_rows(w: dict[str, Any]) -> list[list[Any]]:
    pages = w["default"]["run"]["pages_by_btree"]
    return [[kind, ", ".join(f"{n} {v:.2f}" for n, v in by.items())] for kind, by in pages.items()]


def report(out: Out, res: dict[str, Any]) -> None:
    m = res.get("machine", {})
    out.note(
        f"[bold]machine[/bold]: {m.get('cpu')} · {m.get('cores')} cores · Python "
        f"{m.get('python')} · SQLite {m.get('sqlite')} · {m.get('date')} · load "
        f"{m.get('load_average_start')} → {m.get('load_average_end')}"
    )
    if "latency" in res:
        out.table(
            "10-step run vs 12 raw SQLite transactions, interleaved",
            _LATENCY_COLUMNS,
            _latency_rows(res["latency"]),
        )
    if "writes" in res:
        out.table(
            "WAL frames per commit, syscalls per run", _WRITES_COLUMNS, _writes_rows(res["writes"])
        )
        out.table(
            "Pages written per commit by b-tree (default)", ["commit", "pages"],
            _pages_rows(res["writes"]),
        )  # fmt: skip
    if res.get("targets"):
        out.table(
            "Targets",
            ["target", "bound", "measured", "unit", "met"],
            target_rows(res["targets"], "unit", md=False),
        )


def markdown(res: dict[str, Any]) -> str:
    parts: list[str] = []
    if "latency" in res:
        parts.append(
            "10-step run vs 12 raw SQLite transactions, interleaved\n\n"
            + md_table(_LATENCY_COLUMNS, _latency_rows(res["latency"]))
        )
    if "writes" in res:
        parts.append(
            "WAL frames per commit, syscalls per run\n\n"
            + md_table(_WRITES_COLUMNS, _writes_rows(res["writes"]))
        )
        parts.append(
            "Pages written per commit by b-tree (default)\n\n"
            + md_table(["commit", "pages"], _pages_rows(res["writes"]))
        )
    if res.get("targets"):
        parts.append(targets_section(res["targets"], "unit"))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ap.add_argument("--only", action="append", choices=SECTIONS, help="run only this section")
    ns = ap.parse_args(argv)
    output = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or RESULTS)))
        return 0
    selected = ns.only or list(SECTIONS)
    rounds = rounds_of(ns, full=5)
    out = Out()
    res: dict[str, Any] = read_result(output) if ns.only and output is not None else {}
    res["machine"] = machine_info()
    res["quick"] = ns.quick
    started = time.perf_counter()
    run_sections(
        out,
        res,
        selected,
        {
            "latency": lambda: bench_latency(ns.quick, rounds),
            "writes": lambda: bench_writes(ns.quick),
        },
    )
    finish_machine(res, started)
    res["targets"] = targets(res)
    report(out, res)
    write_result(out, output, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
