"""A/B benchmark: one benchmark module at two git revisions, interleaved, in one run.

Run from the repository root::

    .venv/bin/python -m benchmarks.ab engine --before 96fdf9b --after main --rounds 5 \\
        -- --quick --only floor --only store --only step
    .venv/bin/python -m benchmarks.ab replicas --rounds 4 -- --quick --steps 300
    .venv/bin/python -m benchmarks.ab engine --markdown    # print the results file as Markdown
    .venv/bin/python -m benchmarks.ab surfaces --bench-from current --venv \\
        --before 6d19024 --after HEAD --rounds 6 -- --quick

Everything after ``--`` goes to the benchmark module unchanged (default ``--quick``); ab.py
always adds ``--output`` (a file in its scratch directory) so every run writes its JSON.

How a run is made, and why:

- **Two checkouts.** Each side is a detached ``git worktree`` of its revision in a temporary
  directory outside the repository, removed afterwards. A side whose revision has no
  committed generated gRPC code (the layout before the redesign) gets it from its own
  ``scripts/gen_proto.py`` first.
- **One interpreter.** Both sides run under this interpreter (the worktree's ``.venv``), from
  their checkout (so ``benchmarks`` is theirs) with ``PYTHONPATH=<checkout>/src`` (so
  ``agenttx`` is theirs: ``PYTHONPATH`` comes before the editable install's ``.pth`` entry).
  Before the first round, each side's ``agenttx.__file__`` and ``benchmarks.__file__`` are
  checked to lie in its checkout; the run stops otherwise.
- **Or one venv a side** (``--venv``): each checkout gets its own ``make .venv/.installed``
  and its runs use that interpreter, so whatever the module starts (``agenttx serve``, the
  ``agenttx`` script beside the interpreter) is the side's own install.
- **This tree's script** (``--bench-from current``): for a benchmark newer than a side, both
  sides run this tree's module (``benchmarks`` from here, ``agenttx`` from the side's
  checkout), so the two measure alike; it must use only API both sides have. Each checkout
  gets a ``COMMIT`` file, which the harness reports as the commit measured.
- **Interleaved rounds.** Round 1 runs A then B, round 2 B then A, and so on (ABBA), so a
  load that drifts during the run touches both sides alike and neither always runs first.
  Each round is one whole run of the module (with ``--quick``, one inner round).
- **Figures by name.** Every numeric leaf of a run's JSON whose key is a headline statistic
  (``p50``, ``steps_per_s``, bytes per transaction, CPU µs per step) is a figure, named by
  its path (``step.default.p50``); bookkeeping (machine, targets, section seconds, profiles)
  is not. Figures are compared where both sides report the same name: the harness refactor
  kept the result layout, so old and new scripts name the same measurement alike.
- **Noise.** Per figure and side: the median of the rounds, and the spread (max − min) /
  median. A difference is *beyond noise* when a rank test on the rounds says so: the exact
  two-sided Mann–Whitney p-value of the two sides' rounds is below 0.01 (``ALPHA``). Ranks
  ask nothing of the shape of the noise (a shared machine's is skewed: a busy moment only
  slows), and with 5 rounds a side p < 0.01 happens only when the sides do not overlap at
  all. Over ~30 figures about one in three A/B runs flags a figure by chance; read a flag
  together with its ratio and spread.
- **Ratios within a side** (``--ratio NAME=NUM/DEN``, repeatable; the engine has its
  target's step/store by default): computed per round from the same run, then the median
  over rounds, so both parts of a ratio share their round's load.

Writes ``benchmarks/results/ab_<module>.json`` (one file per A/B'd benchmark; no
machine-local path) with both commits, every round's figures, the order, and the load
average before each run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    RESULTS_DIR,
    ROOT,
    Out,
    finish_machine,
    load_average,
    machine_info,
    md_table,
    portable_path,
    read_result,
    write_result,
)

# Leaf keys that are a measured figure. Lower is better for all but the rates.
FIGURE_KEYS = {
    "p50",
    "p95",
    "worst",
    "steps_per_s",
    "heap_bytes_per_tx",
    "rss_bytes_per_tx",
    "server_xacts_per_step",  # pg_steps: PostgreSQL's committed transactions
    "server_xacts_per_run",
}
HIGHER_IS_BETTER = {"steps_per_s"}
# A difference is beyond noise below this p-value of the rank test (module docstring).
ALPHA = 0.01
# CPU time per step, under a parent of this name (replicas: client, servers, postgres).
CPU_PARENT = "cpu_us_per_step"
# Top-level parts of a result that describe the run, not the code measured.
NOT_FIGURES = {
    "machine",
    "targets",
    "seconds",
    "profile",
    "earlier_runs",
    "load_average_rounds",
    "postgres",
}
# Ratios within one run that a target is stated in, per benchmark (name -> numerator,
# denominator); more with --ratio.
DEFAULT_RATIOS: dict[str, dict[str, tuple[str, str]]] = {
    "engine": {
        "step/store (default)": ("step.default.p50", "store.default.p50"),
        "step/store (sync_writes)": ("step.sync_writes.p50", "store.sync_writes.p50"),
        # the store write with the step's audit record: what the default step writes
        "step/store+audit (default)": ("step.default.p50", "store.default_audited.p50"),
        "step/store+audit (sync_writes)": ("step.sync_writes.p50", "store.sync_writes_audited.p50"),
        "step/floor (default)": ("step.default.p50", "floor.default.p50"),
    },
    "mcp": {
        # The target (issue 24): run_step kv.put p50 <= 1.10x the no-op tool's, same server.
        "stdio kv.put/no-op": ("stdio.run_step_kv_put_us.p50", "stdio.noop_us.p50"),
        "HTTP kv.put/no-op": ("http.run_step_kv_put_us.p50", "http.noop_us.p50"),
    },
    # Issue 24: the 10-step run over twelve raw SQLite transactions, sampled side by side.
    "run_floor": {
        "run/12 txns (default)": ("latency.default.run.p50", "latency.default.floor.p50"),
        "run/12 txns (sync_writes)": (
            "latency.sync_writes.run.p50",
            "latency.sync_writes.floor.p50",
        ),
        # the same in CPU time (a loaded machine's wall time holds other processes' turns)
        "run/12 txns CPU (default)": (
            "latency.default.cpu.run.p50",
            "latency.default.cpu.floor.p50",
        ),
    },
    "grpc_loopback": {
        "step/echo (served)": (
            "stacks.served.latency.step.p50",
            "stacks.served.latency.echo.p50",
        ),
        "step/echo (bare)": ("stacks.bare.latency.step.p50", "stacks.bare.latency.echo.p50"),
        # The target (issue 24): a 10-step run through our client <= 1.7x twelve no-op RPCs
        # through it (only where the script has its client_run section).
        "client run/12 no-ops (served)": (
            "stacks.served.client_run.run.p50",
            "stacks.served.client_run.noop.p50",
        ),
        "client run/12 no-ops (bare)": (
            "stacks.bare.client_run.run.p50",
            "stacks.bare.client_run.noop.p50",
        ),
    },
}


# --------------------------------------------------------------------------- figures


def figures(result: dict[str, Any]) -> dict[str, float]:
    """Every figure of one run's JSON, by dotted path."""
    found: dict[str, float] = {}

    def walk(value: Any, path: list[str]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, str(k)])
        elif isinstance(value, bool) or not isinstance(value, int | float):
            return
        elif path[-1] in FIGURE_KEYS or (len(path) > 1 and path[-2] == CPU_PARENT):
            found[".".join(path)] = float(value)

    for key, value in result.items():
        if key not in NOT_FIGURES:
            walk(value, [key])
    return found


def higher_is_better(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in HIGHER_IS_BETTER


def spread(values: Sequence[float]) -> float:
    """(max − min) / median of one side's rounds: how much this run's own noise moves it."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Exact two-sided p-value of the Mann–Whitney U test (ties count one half; the exact
    null distribution assumes none, which timed floats almost never have)."""
    m, n = len(a), len(b)
    u = sum(1.0 if y > x else 0.5 if y == x else 0.0 for x in a for y in b)
    # ways[k] = arrangements of m a's and n b's with U = k, built one sample at a time:
    # ways(i, j, k) = ways(i - 1, j, k - j) + ways(i, j - 1, k).
    table = [[[1] + [0] * (i * j) for j in range(n + 1)] for i in range(m + 1)]
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            row = table[i][j]
            for k in range(i * j + 1):
                left = table[i - 1][j]
                up = table[i][j - 1]
                row[k] = (left[k - j] if 0 <= k - j < len(left) else 0) + (
                    up[k] if k < len(up) else 0
                )
    ways = table[m][n]
    total = math.comb(m + n, m)
    extreme = min(u, m * n - u)  # the distribution is symmetric about m·n/2
    tail = sum(ways[k] for k in range(math.floor(extreme) + 1))
    return min(1.0, 2 * tail / total)


def verdict(name: str, a: Sequence[float], b: Sequence[float]) -> str:
    """``better`` / ``worse`` (B against A) when the rank test says so, else ``noise``."""
    if mann_whitney_p(a, b) >= ALPHA:
        return "noise"
    above = statistics.median(b) > statistics.median(a)
    return "better" if above == higher_is_better(name) else "worse"


def compare(
    runs: dict[str, list[dict[str, float]]], ratios: dict[str, tuple[str, str]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per figure and per ratio: both sides' rounds and medians, B/A, spreads, verdict. A
    figure or ratio that only one side reports in every round (a workload one revision
    lacks) gets that side's rounds and median and the verdict ``<side> only``."""

    def rounds_of(side: str, value: Any) -> list[float] | None:
        got = [value(r) for r in runs[side]]
        return None if any(v is None for v in got) else got

    def entry(name: str, value: Any) -> dict[str, Any] | None:
        a, b = rounds_of("before", value), rounds_of("after", value)
        if a and b:
            return _row(name, a, b)
        if a or b:
            side, got = ("before", a) if a else ("after", b)
            return _one_side(name, side, got or [])
        return None

    names = sorted(set().union(*runs["before"], *runs["after"]))
    table = {
        name: row
        for name in names
        if (row := entry(name, lambda r, name=name: r.get(name))) is not None
    }

    def ratio(num: str, den: str) -> Any:
        return lambda r: r[num] / r[den] if r.get(num) is not None and r.get(den) else None

    derived: dict[str, Any] = {}
    for label, (num, den) in ratios.items():
        row = entry(label, ratio(num, den))
        if row is not None:
            derived[label] = {"numerator": num, "denominator": den, **row}
    return table, derived


def _one_side(name: str, side: str, values: list[float]) -> dict[str, Any]:
    other = "after" if side == "before" else "before"
    return {
        "better": "higher" if higher_is_better(name) else "lower",
        side: values,
        other: [],
        f"{side}_median": statistics.median(values),
        f"{other}_median": None,
        "ratio": None,
        f"spread_{side}": spread(values),
        f"spread_{other}": None,
        "p_value": None,
        "verdict": f"{side} only",
    }


def _row(name: str, a: list[float], b: list[float]) -> dict[str, Any]:
    ma, mb = statistics.median(a), statistics.median(b)
    return {
        "better": "higher" if higher_is_better(name) else "lower",
        "before": a,
        "after": b,
        "before_median": ma,
        "after_median": mb,
        "ratio": mb / ma if ma else None,
        "spread_before": spread(a),
        "spread_after": spread(b),
        "p_value": mann_whitney_p(a, b),
        "verdict": verdict(name, a, b),
    }


# --------------------------------------------------------------------------- checkouts


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Side:
    """One revision, checked out in its own temporary worktree."""

    label: str  # "before" or "after"
    rev: str  # as given (a branch, tag or hash)
    commit: str = ""  # the full hash it resolved to when the run started
    subject: str = ""
    checkout: Path = field(default_factory=Path)
    probe: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable  # the side's own venv's with --venv
    bench_from: Path | None = None  # where ``benchmarks`` comes from; None: the checkout

    @property
    def cwd(self) -> Path:
        return self.bench_from or self.checkout

    def env(self) -> dict[str, str]:
        # The side's src/ before everything else on the path; AGENTTX_* settings of the
        # caller's shell would change what is measured, so none is passed on.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTTX_")}
        env["PYTHONPATH"] = str(self.checkout / "src")
        env.pop("PYTHONSAFEPATH", None)  # -m must find the side's benchmarks in its cwd
        return env


def check_out(side: Side, base: Path, out: Out, *, venv: bool) -> None:
    side.commit = git("rev-parse", "--verify", f"{side.rev}^{{commit}}")
    side.subject = git("log", "-1", "--format=%s", side.commit)
    side.checkout = base / side.label
    git("worktree", "add", "--detach", "--quiet", str(side.checkout), side.commit)
    (side.checkout / "COMMIT").write_text(side.commit[:7] + "\n")
    if venv:
        out.note(f"[dim]{side.label}: make .venv/.installed in its checkout[/dim]")
        subprocess.run(
            ["make", ".venv/.installed"], cwd=side.checkout, check=True, capture_output=True
        )
        side.python = str(side.checkout / ".venv" / "bin" / "python")
    committed_wire = git("ls-files", "--", "src/*_pb2.py", cwd=side.checkout)
    if not committed_wire:
        # Before the redesign the gRPC code was generated by the build, not committed.
        out.note(f"[dim]{side.label}: generating its gRPC code (scripts/gen_proto.py)[/dim]")
        subprocess.run(
            [side.python, "scripts/gen_proto.py"],
            cwd=side.checkout,
            env=side.env(),
            check=True,
            capture_output=True,
        )
    probe = subprocess.run(
        [
            side.python,
            "-c",
            "import json, agenttx, benchmarks; "
            "print(json.dumps({'agenttx': agenttx.__file__, 'benchmarks': benchmarks.__file__}))",
        ],
        cwd=side.cwd,
        env=side.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    side.probe = json.loads(probe.stdout)
    for what, path in side.probe.items():
        expected = side.cwd if what == "benchmarks" else side.checkout
        if expected.resolve() not in Path(path).resolve().parents:
            raise SystemExit(
                f"{side.label} ({side.rev}): {what} imports from {path}, not from "
                f"{expected}; the comparison would measure the wrong code"
            )


def remove_checkouts(sides: Sequence[Side]) -> None:
    for side in sides:
        if side.checkout != Path() and side.checkout.exists():
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(side.checkout)],
                cwd=ROOT,
                capture_output=True,
            )
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


# --------------------------------------------------------------------------- rounds


def order(rounds: int) -> Iterator[tuple[int, int]]:
    """(round, side index) in ABBA order: A B, B A, A B …"""
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            yield r, i


def run_once(
    side: Side, module: str, args: Sequence[str], output: Path, log: Path
) -> dict[str, Any]:
    command = [side.python, "-m", f"benchmarks.{module}", *args, "--output", str(output)]
    with log.open("ab") as f:
        done = subprocess.run(
            command, cwd=side.cwd, env=side.env(), stdout=f, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise SystemExit(
            f"{side.label} ({side.rev}) benchmarks.{module} exited {done.returncode}:\n"
            + "\n".join(tail)
        )
    return read_result(output)


# --------------------------------------------------------------------------- report


def cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def table_rows(rows: dict[str, Any], *, md: bool) -> list[list[Any]]:
    flag = {"worse": "**worse**"} if md else {}

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.0f}"

    return [
        [
            f"`{name}`" if md else name,
            cell(r["before_median"]) if r["before_median"] is not None else "–",
            cell(r["after_median"]) if r["after_median"] is not None else "–",
            f"{r['ratio']:.2f}×" if r["ratio"] is not None else "–",
            f"{pct(r['spread_before'])} / {pct(r['spread_after'])} %",
            f"{r['p_value']:.3f}" if r["p_value"] is not None else "–",
            flag.get(r["verdict"], r["verdict"]),
        ]
        for name, r in rows.items()
    ]


COLUMNS = [
    "figure",
    "before (median)",
    "after (median)",
    "after/before",
    "spread A / B",
    "p",
    "verdict",
]


def markdown(res: dict[str, Any]) -> str:
    sides = res["sides"]
    loads = res["load_average_runs"]
    head = (
        f"`benchmarks.{res['benchmark']}` {' '.join(res['benchmark_args'])}, "
        f"{res['rounds']} rounds a side, interleaved ABBA; "
        f"before `{sides['before']['commit'][:7]}`, after `{sides['after']['commit'][:7]}`; "
        f"{res['machine']['date']}; load average {min(loads)}–{max(loads)} "
        "(1 min, before each run)"
    )
    parts = [head, md_table(COLUMNS, table_rows(res["figures"], md=True), cell=str)]
    if res.get("ratios"):
        parts.append(md_table(COLUMNS, table_rows(res["ratios"], md=True), cell=str))
    return "\n\n".join(parts)


def report(out: Out, res: dict[str, Any]) -> None:
    out.table(f"{res['benchmark']}: before vs after", COLUMNS, table_rows(res["figures"], md=False))
    if res.get("ratios"):
        out.table("ratios within a run", COLUMNS, table_rows(res["ratios"], md=False))
    worse = [n for n, r in res["figures"].items() if r["verdict"] == "worse"]
    out.note(f"beyond noise and worse: {', '.join(worse) if worse else 'none'}")


# --------------------------------------------------------------------------- main


def parse(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    inner = ["--quick"]
    if "--" in argv:
        cut = argv.index("--")
        argv, inner = argv[:cut], argv[cut + 1 :]
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("benchmark", help="module under benchmarks/ (engine, replicas, grpc_loopback)")
    ap.add_argument("--before", default="96fdf9b", help="revision A (default 96fdf9b)")
    ap.add_argument("--after", default="main", help="revision B (default main)")
    ap.add_argument("--rounds", type=int, default=5, help="runs a side, interleaved (default 5)")
    ap.add_argument(
        "--ratio",
        action="append",
        default=[],
        metavar="NAME=NUM/DEN",
        help="a ratio of two figures within each run, e.g. step/store=step.default.p50/"
        "store.default.p50 (repeatable)",
    )
    ap.add_argument(
        "--bench-from",
        choices=("side", "current"),
        default="side",
        help="run each side's own benchmark module (default) or this tree's against both",
    )
    ap.add_argument("--venv", action="store_true", help="one venv a side, made in its checkout")
    ap.add_argument("--output", type=Path, default=None, help="default results/ab_<module>.json")
    ap.add_argument("--markdown", action="store_true", help="run nothing: print the file")
    ns = ap.parse_args(argv)
    ns.inner = inner
    if ns.output is None:
        ns.output = RESULTS_DIR / f"ab_{ns.benchmark}.json"
    if ns.rounds < 2 and not ns.markdown:
        ap.error("--rounds must be at least 2: one round a side shows no noise")
    if not ns.markdown and not (ROOT / "benchmarks" / f"{ns.benchmark}.py").exists():
        ap.error(f"no benchmark module benchmarks/{ns.benchmark}.py")
    if any(a == "--output" or a.startswith("--output=") for a in inner):
        ap.error("ab.py chooses each run's --output itself")
    ns.ratios = dict(DEFAULT_RATIOS.get(ns.benchmark, {}))
    for spec in ns.ratio:
        name, sep, frac = spec.partition("=")
        num, sep2, den = frac.partition("/")
        if not (sep and sep2 and name and num and den):
            ap.error(f"--ratio {spec!r}: expected NAME=NUMERATOR/DENOMINATOR")
        ns.ratios[name] = (num, den)
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    if ns.markdown:
        print(markdown(read_result(ns.output)))
        return 0
    out = Out()
    bench_from = ROOT if ns.bench_from == "current" else None
    sides = [
        Side(label, rev, bench_from=bench_from)
        for label, rev in (("before", ns.before), ("after", ns.after))
    ]
    res: dict[str, Any] = {
        "benchmark": ns.benchmark,
        "benchmark_args": ns.inner,
        "benchmark_from": ns.bench_from,
        "venv_per_side": ns.venv,
        "rounds": ns.rounds,
        "machine": machine_info(),
        "noise_rule": (
            f"beyond noise iff the exact two-sided Mann-Whitney p of the rounds < {ALPHA}; "
            "spread = (max - min) / median of a side's rounds"
        ),
    }
    # The harness records the commit of the code that runs; here that is ab.py's own, not
    # either side's (those are under "sides").
    res["machine"]["ab_script_git"] = res["machine"].pop("git", "unknown")
    started = time.perf_counter()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    order_run: list[str] = []
    loads: list[float] = []
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    sections: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    base = Path(tempfile.mkdtemp(prefix="agenttx-ab-"))
    try:
        for side in sides:
            check_out(side, base, out, venv=ns.venv)
            out.note(f"{side.label}: {side.commit[:10]} {side.subject}")
        for r, i in order(ns.rounds):
            side = sides[i]
            loads.append(load_average()[0] if load_average() else float("nan"))
            t0 = time.perf_counter()
            result = run_once(
                side,
                ns.benchmark,
                ns.inner,
                base / f"{side.label}-{r}.json",
                base / f"{side.label}.log",
            )
            seconds[side.label].append(round(time.perf_counter() - t0, 1))
            runs[side.label].append(figures(result))
            # Wall time is no figure (it counts set-up and samples), but a side whose sections
            # take much longer is a lead worth following.
            sections[side.label].append(result.get("seconds", {}))
            order_run.append(side.label)
            out.note(
                f"[dim]round {r + 1}/{ns.rounds} {side.label}: {seconds[side.label][-1]} s, "
                f"load {loads[-1]}[/dim]"
            )
        # The result is written before the checkouts go: removing two venvs takes a while.
        res["sides"] = {
            s.label: {
                "rev": s.rev,
                "commit": s.commit,
                "subject": s.subject,
                "agenttx": portable_path(s.probe.get("agenttx", "")),
            }
            for s in sides
        }
        res["order"] = order_run
        res["load_average_runs"] = loads
        res["seconds_per_run"] = seconds
        res["section_seconds"] = sections
        # A figure only one side reports (a workload added or renamed) stays in the table with
        # that side's median, rather than being dropped.
        res["figures"], res["ratios"] = compare(runs, ns.ratios)
        for label, (num, den) in ns.ratios.items():
            if label not in res["ratios"]:
                out.note(f"ratio {label!r}: {num} or {den} is in no run of either side")
        finish_machine(res, started)
        report(out, res)
        write_result(out, ns.output, res)
    finally:
        remove_checkouts(sides)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
