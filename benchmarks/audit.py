"""Audit chain benchmark: what the chain costs a step, measured in one run, interleaved.

Run from the repository root::

    .venv/bin/python -m benchmarks.audit            # full run, about a minute
    .venv/bin/python -m benchmarks.audit --quick    # smoke run
    .venv/bin/python -m benchmarks.audit --pg postgresql://postgres@127.0.0.1:5432/postgres

Two engines are open side by side in one process, on two stores of the same kind: one with the
audit chain (the default) and one without (``Engine.open(audit_chain=False)``). The timed work
is ``execute_step(tx, n, "kv.put", {key, value})``, a new transaction every 1,000 steps (begin
and commit not timed), in blocks of ``--block`` steps that alternate between the two engines
(ABBA order, so neither always runs first or second, and a burst of load on the machine hits
both). Each engine gets a warm-up block first. Sections, each a durability or backend:

- ``sqlite``: SQLite at the default durability (``synchronous=NORMAL``);
- ``sqlite_sync``: SQLite with ``sync_writes=True`` (``synchronous=FULL``, an fsync a commit);
- ``postgres``: with ``--pg ADMIN_URL``, two fresh databases on that server (dropped after).

``--only SECTION`` (repeatable) runs only those sections.

Per section: each side's step latency (µs; p50, mean, p90, p99), the p50 and mean ratios
with/without (the issue's target: p50 at most 1.15), and the ratio of each ABBA round's p50s
(its spread says how much of the difference is noise). A step's record is pending until the
transaction's next write with records (``docs/audit.md``, "Batched step records"): one step
in 32 chains the batch, and a commit chains what is left, so the mean and the commit are
reported too — ``commit``: the latency of committing a transaction of ``--commit-steps``
kv.put steps (default 16, about the pending records a commit finds on average), in ABBA
blocks after the step blocks. Writes ``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agenttx
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    finish_machine,
    machine_info,
    md_table,
    output_of,
    scratch,
    stats_us,
    write_result,
)

TARGET_RATIO = 1.15
PER_TX = 1_000


class StepRunner:
    """One engine's step loop, resumable block by block."""

    def __init__(self, engine: agenttx.Engine, tag: str) -> None:
        self.engine = engine
        self.tag = tag
        self.tx = ""
        self.step = 1
        self.i = 0
        self.samples: list[int] = []
        self.rounds: list[list[int]] = []

    async def block(self, n: int, *, timed: bool = True) -> None:
        clock = time.perf_counter_ns
        this: list[int] = []
        for _ in range(n):
            if not self.tx or self.step > PER_TX:
                if self.tx:
                    await self.engine.commit(self.tx)
                self.tx = (await self.engine.begin(agent_id="bench")).transaction_id
                self.step = 1
            args = {"key": f"{self.tag}/{self.i}", "value": self.i}
            t0 = clock()
            res = await self.engine.execute_step(self.tx, self.step, "kv.put", args)
            t1 = clock()
            if res.status is not agenttx.StepStatus.SUCCESS:
                raise RuntimeError(f"step failed: {res.clean_hint}")
            this.append(t1 - t0)
            self.step += 1
            self.i += 1
        if timed:
            self.samples.extend(this)
            self.rounds.append(this)

    async def commits(self, n: int, steps: int) -> list[int]:
        """``n`` transactions of ``steps`` kv.put steps each; each commit's latency (ns)."""
        clock = time.perf_counter_ns
        out: list[int] = []
        for _ in range(n):
            tx = (await self.engine.begin(agent_id="bench")).transaction_id
            for step in range(1, steps + 1):
                args = {"key": f"{self.tag}/{self.i}", "value": self.i}
                await self.engine.execute_step(tx, step, "kv.put", args)
                self.i += 1
            t0 = clock()
            done = await self.engine.commit(tx)
            out.append(clock() - t0)
            if not done.committed:
                raise RuntimeError("commit conflicted")
        return out


async def interleaved(urls: tuple[str, str], root: Path, blocks: int, block: int,
                      commit_steps: int, **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    """The two engines (with, without) on ``urls``, ``blocks`` ABBA blocks each of steps,
    then of commits."""
    kw = {"background": False, "fs_root": root / "files", "outbox_path": root / "o.jsonl"}
    with_chain = await agenttx.Engine.open(urls[0], **kw, **kwargs)
    without = await agenttx.Engine.open(urls[1], audit_chain=False, **kw, **kwargs)
    try:
        a, b = StepRunner(with_chain, "a"), StepRunner(without, "b")
        await a.block(block, timed=False)
        await b.block(block, timed=False)
        for r in range(blocks):
            first, second = (a, b) if r % 4 in (0, 3) else (b, a)  # ABBA
            await first.block(block)
            await second.block(block)
        tx = a.tx
        v = await with_chain.verify_audit(tx)
        assert v.ok, v.reason  # the timed chain is a real one
        ca: list[int] = []
        cb: list[int] = []
        per_block = max(block // (4 * commit_steps), 4)
        for r in range(blocks):
            first, second = (a, b) if r % 4 in (0, 3) else (b, a)
            for side in (first, second):
                got = await side.commits(per_block, commit_steps)
                (ca if side is a else cb).extend(got)
    finally:
        await with_chain.close()
        await without.close()
    sa, sb = stats_us(a.samples), stats_us(b.samples)
    ka, kb = stats_us(ca), stats_us(cb)
    per_round = [
        statistics.median(x) / statistics.median(y) for x, y in zip(a.rounds, b.rounds, strict=True)
    ]
    return {
        "blocks": blocks,
        "block": block,
        "with_chain": sa,
        "without_chain": sb,
        "p50_ratio": round(sa["p50"] / sb["p50"], 4),
        "mean_ratio": round(sa["mean"] / sb["mean"], 4),
        "round_p50_ratios": [round(x, 4) for x in per_round],
        "target_ratio": TARGET_RATIO,
        "met": sa["p50"] / sb["p50"] <= TARGET_RATIO,
        "chain_records_checked": v.records,
        "commit": {
            "steps_per_tx": commit_steps,
            "with_chain": ka,
            "without_chain": kb,
            "p50_ratio": round(ka["p50"] / kb["p50"], 4),
        },
    }


@contextlib.asynccontextmanager
async def pg_pair(admin_url: str) -> AsyncIterator[tuple[str, str]]:
    import psycopg

    names = [f"agenttx_bench_audit_{uuid.uuid4().hex[:8]}_{s}" for s in "ab"]
    base = admin_url.rsplit("/", 1)[0]
    with psycopg.connect(admin_url, autocommit=True) as c:
        for n in names:
            c.execute(f'CREATE DATABASE "{n}"')
    try:
        yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as c:
            for n in names:
                c.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')


async def main_async(argv: list[str]) -> int:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS_DIR / "audit.json")
    ap.add_argument("--block", type=int, default=None, help="steps per block (default 500)")
    ap.add_argument("--blocks", type=int, default=None, help="blocks per side (default 16)")
    ap.add_argument("--pg", default=None, help="a PostgreSQL admin URL: add the postgres section")
    ap.add_argument(
        "--commit-steps", type=int, default=16, help="steps of each timed commit's transaction"
    )
    ap.add_argument(
        "--only", action="append", default=None, choices=("sqlite", "sqlite_sync", "postgres"),
        help="run only this section (repeatable; postgres needs --pg)",
    )  # fmt: skip
    ap.add_argument("--md", dest="markdown_out", action="store_true", help="print Markdown")
    ns = ap.parse_args(argv)
    out = Out()
    if ns.markdown:
        out.note("no markdown tables for this benchmark; read benchmarks/results/audit.json")
        return 0
    block = ns.block or (200 if ns.quick else 500)
    blocks = ns.blocks or (4 if ns.quick else 16)
    started = time.perf_counter()
    res: dict[str, Any] = {"machine": machine_info(), "quick": ns.quick}
    for name, sync in (("sqlite", False), ("sqlite_sync", True)):
        if ns.only and name not in ns.only:
            continue
        out.note(f"[dim]running {name} …[/dim]")
        with scratch(f"audit-{name}") as d:
            urls = (f"sqlite:///{d / 'with.db'}", f"sqlite:///{d / 'without.db'}")
            b = max(block // 5, 40) if sync else block  # an fsync a step: fewer samples
            res[name] = await interleaved(urls, d, blocks, b, ns.commit_steps, sync_writes=sync)
    if ns.pg and (not ns.only or "postgres" in ns.only):
        out.note("[dim]running postgres …[/dim]")
        with scratch("audit-pg") as d:
            async with pg_pair(ns.pg) as urls:
                res["postgres"] = await interleaved(
                    urls, d, blocks, max(block // 5, 40), ns.commit_steps
                )
    finish_machine(res, started)
    sections = [(name, r) for name, r in res.items() if isinstance(r, dict) and "p50_ratio" in r]
    rows = [
        [
            name,
            r["with_chain"]["p50"],
            r["without_chain"]["p50"],
            r["p50_ratio"],
            f"{min(r['round_p50_ratios']):.3f}–{max(r['round_p50_ratios']):.3f}",
            "yes" if r["met"] else "NO",
            r["with_chain"]["mean"],
            r["without_chain"]["mean"],
            r["mean_ratio"],
        ]
        for name, r in sections
    ]
    header = ["section", "p50 with (µs)", "p50 without (µs)", "ratio", "round ratios", "≤ 1.15",
              "mean with", "mean without", "mean ratio"]  # fmt: skip
    commits = [
        [
            name,
            r["commit"]["steps_per_tx"],
            r["commit"]["with_chain"]["p50"],
            r["commit"]["without_chain"]["p50"],
            r["commit"]["p50_ratio"],
        ]
        for name, r in sections
    ]
    commit_header = ["section", "steps a tx", "commit p50 with (µs)", "without (µs)", "ratio"]
    if ns.markdown_out:
        out.note(md_table(header, rows))
        out.note(md_table(commit_header, commits))
    else:
        out.table("step latency with the audit chain vs without", header, rows)
        out.table("commit latency with the audit chain vs without", commit_header, commits)
    write_result(out, output_of(ns), res)
    return 0


def main() -> int:
    return asyncio.run(main_async(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
