"""What every benchmark script shares, so each script holds only its workloads and layout.

- **Samples and stats**: ``stats_us``/``stats_ms`` turn timed samples (nanoseconds) into
  n, p50, mean, p90, p99, min, max; ``best_round`` keeps the least disturbed of repeated rounds
  (lowest p50) and lists every round's p50 beside it.
- **Sections**: ``run_sections`` runs the selected named sections in order, notes each, and
  records its wall time under ``seconds``.
- **Tables**: ``Out`` prints terminal tables (through rich when installed); ``md_table`` makes
  the Markdown tables of each result's detail page (``benchmarks/results/<name>.md``, which
  ``docs/benchmarks.md`` summarises); both format numbers with ``fmt``.
- **Results**: one JSON file per benchmark in ``benchmarks/results/`` (history lives in git).
  ``write_result`` writes it with the machine, date and commit (``machine_info``) and with
  every machine-local path made portable (``portable_path``), so a result never names
  ``/work/…``, ``/tmp/…`` or a home directory. A ``--quick`` run writes only when given an
  output path: a smoke run never replaces a measured result.
- **Command line**: ``bench_parser`` gives every script ``--quick``, ``--rounds``,
  ``--output`` and ``--markdown`` with the same meaning.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import agenttx

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Distributions whose versions go into every result when installed (the comparison systems).
PACKAGES = ("dbos", "langgraph", "langgraph-checkpoint-sqlite", "pydantic")


# --------------------------------------------------------------------------- samples and stats


def stats_us(samples_ns: Sequence[int], extra: Sequence[int] = ()) -> dict[str, float]:
    """n and p50/mean/p90/p99/min/max in microseconds (nearest-rank percentiles), and a
    ``p<k>`` for each percentile in ``extra``."""
    s = sorted(samples_ns)
    n = len(s)

    def pct(p: float) -> float:
        return s[min(n - 1, round(p / 100 * (n - 1)))] / 1e3

    return {
        "n": n,
        "p50": pct(50),
        "mean": statistics.fmean(s) / 1e3,
        "p90": pct(90),
        "p99": pct(99),
        "min": s[0] / 1e3,
        "max": s[-1] / 1e3,
        **{f"p{k}": pct(k) for k in extra},
    }


def stats_ms(samples_ns: Sequence[int]) -> dict[str, float]:
    """``stats_us`` in milliseconds."""
    return {k: (v / 1e3 if k != "n" else v) for k, v in stats_us(samples_ns).items()}


def best_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the lowest p50 (on a shared machine the least disturbed one), with
    every round's p50 under ``p50_rounds``."""
    best = dict(min(rounds, key=lambda r: r["p50"]))
    best["p50_rounds"] = [r["p50"] for r in rounds]
    return best


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A temporary directory on the same disk as the repository (not a tmpfs), removed after;
    ``AGENTTX_BENCH_DIR`` chooses where."""
    base = Path(os.environ.get("AGENTTX_BENCH_DIR", tempfile.gettempdir()))
    path = Path(tempfile.mkdtemp(prefix=f"agenttx-bench-{name}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    """A port nothing listens on now (a server started on it a moment later may still meet a
    clash; it then fails to start with its own error)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agenttx_command(*args: str) -> list[str]:
    """The installed ``agenttx`` script beside this interpreter, or the CLI through it."""
    script = Path(sys.executable).with_name("agenttx")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from agenttx.cli import main; main()", *args]


# --------------------------------------------------------------------------- machine and commit


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _path_prefixes() -> list[tuple[str, str]]:
    """Machine-local directories and what a result says instead, longest first, so the most
    specific one wins (the repository may itself sit under the temporary directory)."""
    pairs = [(str(ROOT), "")]
    for key in ("purelib", "platlib"):
        pairs.append((sysconfig.get_paths()[key], "<site-packages>"))
    pairs.append((sysconfig.get_paths()["stdlib"], "<stdlib>"))
    source = Path(agenttx.__file__).resolve().parent.parent
    if ROOT not in source.parents:  # an agenttx copy outside the repository
        pairs.append((str(source), "<src>"))
    pairs.append((tempfile.gettempdir(), "<tmp>"))
    pairs.append((str(Path.home()), "~"))
    return sorted(set(pairs), key=lambda p: -len(p[0]))


def portable_path(path: str) -> str:
    """``path`` without this machine's directories: relative to the repository when inside
    it, else under ``<site-packages>``, ``<stdlib>``, ``<src>`` (an agenttx copy elsewhere),
    ``<tmp>`` or ``~``. Anything else is returned as it is."""
    for prefix, name in _path_prefixes():
        if path == prefix:
            return name or "."
        if path.startswith(prefix + os.sep):
            rest = path[len(prefix) + 1 :]
            return f"{name}/{rest}" if name else rest
    return path


def portable(value: Any) -> Any:
    """``value`` (JSON data) with every machine-local path in a string made portable."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and os.sep in value:
        for prefix, name in _path_prefixes():
            if prefix + os.sep in value:
                value = value.replace(prefix + os.sep, f"{name}/" if name else "")
    return value


def git_state() -> str:
    """The commit measured (short hash, ``(src modified)`` when ``src/`` has changes); for a
    copy of the sources outside this repository, the commit its ``COMMIT`` file names."""
    source = Path(agenttx.__file__).resolve().parent
    if ROOT not in source.parents:  # a copy of src/ on PYTHONPATH, e.g. a `git archive`
        stamp = source.parent.parent / "COMMIT"
        commit = stamp.read_text().strip() if stamp.exists() else "unknown commit"
        return f"{commit} (a copy of the sources)"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (src modified)' if dirty else ''}"


def machine_info(packages: Sequence[str] = PACKAGES) -> dict[str, Any]:
    """The machine, the software and the commit a result was measured on, and when."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_gib = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    versions: dict[str, str] = {}
    for dist in packages:
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[dist] = version(dist)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "agenttx": agenttx.__version__,
        "agenttx_source": portable_path(str(Path(agenttx.__file__).parent)),
        "git": git_state(),
        "packages": versions,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_average_start": load_average(),
    }


# --------------------------------------------------------------------------- tables


def fmt(v: Any) -> str:
    """A table cell: floats to 3 significant-ish digits, thousands separated."""
    if isinstance(v, float):
        if v >= 1000:
            return f"{v:,.0f}"
        if v >= 100:
            return f"{v:.1f}"
        if v >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


class Out:
    """Notes and tables on the terminal, through rich when it is there, plain text otherwise."""

    def __init__(self) -> None:
        try:
            from rich.console import Console

            self.console: Any = Console(width=None if sys.stdout.isatty() else 120)
        except ImportError:  # pragma: no cover
            self.console = None

    def note(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)
        else:
            print(text)

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        cells = [[fmt(c) for c in row] for row in rows]
        if self.console is not None:
            from rich.table import Table

            t = Table(title=title, title_justify="left")
            for i, c in enumerate(columns):
                t.add_column(c, justify="left" if i == 0 else "right")
            for row in cells:
                t.add_row(*row)
            self.console.print(t)
            return
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        print(f"\n{title}")
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def md_table(
    columns: list[str],
    rows: list[list[Any]],
    *,
    cell: Callable[[Any], str] = fmt,
    align_right: bool = False,
) -> str:
    """A Markdown table, cells through ``cell``; ``align_right`` right-aligns every column
    but the first."""
    rule = "|---|" + "---:|" * (len(columns) - 1) if align_right else "|" + "---|" * len(columns)
    lines = ["| " + " | ".join(columns) + " |", rule]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def target_rows(targets: list[dict[str, Any]], detail: str, *, md: bool) -> list[list[Any]]:
    """One row per target: target, bound, measured, its ``detail`` column, met or not."""
    missed = "**not met**" if md else "NOT met"
    return [
        [t["target"], t["bound"], t["measured"], t[detail], "met" if t["met"] else missed]
        for t in targets
    ]


def targets_section(targets: list[dict[str, Any]], detail: str) -> str:
    """A results page's "Targets" table: each target's row (``target_rows``), in Markdown."""
    return "Targets\n\n" + md_table(
        ["target", "bound", "measured", detail, "status"],
        target_rows(targets, detail, md=True),
    )


def short_source(filename: str) -> str:
    """A profiled function's file, short: from the package name on for our sources and
    installed packages, from the module on for the standard library."""
    stdlib = f"/lib/python{sys.version_info.major}.{sys.version_info.minor}/"
    for marker in ("/src/", "site-packages/", stdlib):
        if marker in filename:
            return filename.split(marker)[-1]
    return portable_path(filename)


def top_function_rows(
    top: list[dict[str, Any]], per: str, pct: str, *, md: bool
) -> list[list[Any]]:
    """The 15 functions with the most self time: name, calls and self µs per ``per``, %."""
    return [
        [
            f"`{f['function']}`" if md else f["function"],
            f[f"calls_per_{per}"],
            f[f"self_us_per_{per}"],
            f[pct],
        ]
        for f in top[:15]
    ]


# --------------------------------------------------------------------------- profiles

# Self time grouped by where it is spent: (area, test on (file, function, is_builtin)); a
# script keeps its own table for its workload, and the first match wins. Both profilers'
# names are handled: cProfile reports C functions as file "~" and "<method 'execute' of
# 'sqlite3.Connection' objects>", pyinstrument as "<built-in>" and "Connection.execute".
AreaRule = tuple[str, Callable[[str, str, bool], bool]]


def area_of(rules: Sequence[AreaRule], filename: str, func: str) -> str:
    """The first area of ``rules`` a profiled function belongs to, else ``other``."""
    builtin = filename in ("~", "<built-in>") or filename.startswith("<")
    for name, match in rules:
        if match(filename, func, builtin):
            return name
    return "other"


def sampled_self_times(root: Any) -> Iterator[tuple[str, int, str, float]]:
    """(file, line, function, self seconds) of every real frame in a pyinstrument tree: its
    time minus its real children's."""
    stack = [root]
    while stack:
        f = stack.pop()
        real = [c for c in f.children if not c.is_synthetic_leaf]
        self_time = f.time - sum(c.time for c in real)
        if self_time > 0 and not f.is_synthetic:
            yield f.file_path or "<built-in>", f.line_no, f.function or "", self_time
        stack.extend(real)


# --------------------------------------------------------------------------- runs and results


def bench_parser(description: str, default_output: Path) -> argparse.ArgumentParser:
    """The options every benchmark has; a script adds its own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer samples, 1 round")
    ap.add_argument(
        "--rounds", type=int, default=None, help="rounds, best kept (default 3, 1 with --quick)"
    )
    ap.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"results file (default {portable_path(str(default_output))}; "
        "a --quick run writes only when this is given)",
    )
    ap.add_argument(
        "--markdown",
        action="store_true",
        help="run nothing: print the results file as Markdown tables (see benchmarks/results/)",
    )
    ap.set_defaults(default_output=default_output)
    return ap


def rounds_of(ns: argparse.Namespace, full: int = 3) -> int:
    """``--rounds``, else 1 for a quick run and ``full`` otherwise."""
    return int(ns.rounds or (1 if ns.quick else full))


def output_of(ns: argparse.Namespace) -> Path | None:
    """Where this run writes: ``--output``, else the default file unless the run is quick."""
    if ns.output is not None:
        return Path(ns.output)
    return None if ns.quick else Path(ns.default_output)


def read_result(path: Path) -> dict[str, Any]:
    """The results file's data, or ``{}`` when it is missing or not JSON."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            return data
    return {}


def run_sections(
    out: Out,
    res: dict[str, Any],
    selected: Sequence[str],
    runners: dict[str, Callable[[], Any]],
) -> None:
    """Run each selected section in ``runners``' order into ``res[name]`` and record its wall
    time in ``res["seconds"][name]``."""
    for name, run in runners.items():
        if name in selected:
            t0 = time.perf_counter()
            out.note(f"[dim]running {name} …[/dim]")
            res[name] = run()
            res.setdefault("seconds", {})[name] = round(time.perf_counter() - t0, 2)


def finish_machine(res: dict[str, Any], started: float) -> None:
    """Close the run's machine record: load at the end and total seconds."""
    res["machine"]["load_average_end"] = load_average()
    res["machine"]["seconds_total"] = round(time.perf_counter() - started, 1)


def write_result(out: Out, path: Path | None, res: dict[str, Any]) -> None:
    """Write ``res`` as the benchmark's JSON result at ``path`` (nothing when ``None``), every
    machine-local path made portable."""
    if path is None:
        out.note("[dim]quick run: no results file written (give --output to keep it)[/dim]")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(portable(res), indent=2, ensure_ascii=False) + "\n")
    out.note(f"wrote {path}")
