"""History benchmark: reading a long history through the client, and what it costs others.

Run from the repository root::

    .venv/bin/python -m benchmarks.history            # full run, a few minutes
    .venv/bin/python -m benchmarks.history --quick    # smoke run
    .venv/bin/python -m benchmarks.ab history --before A --after B --rounds 4 -- --quick

``agenttx serve`` (defaults, warning-level log) runs in a subprocess on SQLite, or with
``--store pg`` on a fresh database of the PostgreSQL at ``AGENTTX_BENCH_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, the server the database is made on; it is
dropped after the run). The project's own client (``AgentTxClient``) drives it, as a user's
program would. Per round, one
transaction gets ``--steps`` ``kv.put`` steps of a ~10 KB value of many small objects (300
steps: ~3 MB of arguments and as much output, what is slowest to parse and encode per byte;
set-up, not timed). Then, while a second client on its own channel calls ``GetTransaction``
on a one-step transaction over and over (the *probe*, as the hostile-input tests run it):

- ``get.cold``: the first ``get_transaction`` of the history (its dependency graph is rebuilt
  from the rows: the first read of a revision), one sample per round;
- ``get.warm``: ``get_transaction`` again (the graph's edges are cached per revision);
- ``list.warm``: ``list_steps`` pages of 500 records;
- ``get.next``: ``get_transaction`` right after one more step (a new revision: what a
  dashboard or ``agenttx tx watch`` following a live transaction reads), a step then a read,
  ``reads`` times; the step is not timed;
- ``get.rewound``: ``get_transaction`` right after a rollback of the last step (a rewind: the
  graph kept for the transaction no longer matches its live steps), ``reads`` times;
- ``probe``: the probe's calls meanwhile (its p50 and worst: how long another client waited).

The floor beside them, in the same round: ``probe.idle``, the probe's calls with no history
read running. Times are milliseconds of wall time; the least disturbed round is kept
(``best_round``). Writes ``benchmarks/results/history.json``: the figures under the store's
name (``sqlite``, ``postgresql``), each with its own run's commit, date and load (``run``); a
run of one store keeps the other's figures in the file.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agenttx.client import AgentTxClient
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    agenttx_command,
    bench_parser,
    best_round,
    finish_machine,
    free_port,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    scratch,
    stats_ms,
    write_result,
)

RESULTS = RESULTS_DIR / "history.json"
ADMIN_URL = os.environ.get("AGENTTX_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
# --store: the key its figures sit under (not "postgres": benchmarks.ab reads a top-level
# "postgres" as the server's description, not as figures).
STORES = {"sqlite": "sqlite", "pg": "postgresql"}
VALUE = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(250)]


@contextmanager
def pg_database() -> Iterator[str]:
    """The URL of a new, empty database on ``ADMIN_URL``'s server, dropped when the block ends
    (after the server using it stopped)."""
    import psycopg

    name = f"agenttx_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(ADMIN_URL)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_version() -> str:
    """The version of the PostgreSQL server the run used (bookkeeping, not a figure)."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        row = c.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


@contextmanager
def served(data_dir: Path, store_url: str | None = None) -> Iterator[str]:
    """``agenttx serve`` on a free port until the block ends (on ``store_url``, else SQLite
    in ``data_dir``); yields its address."""
    address = f"127.0.0.1:{free_port()}"
    log = (data_dir.parent / "serve.log").open("wb")
    store = ["--store", store_url] if store_url else []
    proc = subprocess.Popen(
        agenttx_command(
            "serve",
            "--data-dir",
            str(data_dir),
            *store,
            "--listen-addr",
            address,
            "--metrics-addr",
            "off",
            "--log-level",
            "warning",
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        with AgentTxClient(address, timeout=2) as client:
            while True:
                try:
                    client.health()
                    break
                except Exception:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"agenttx serve did not start: see {log.name}") from None
                    time.sleep(0.2)
        yield address
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


class Probe:
    """Another client calling ``get_transaction`` on a one-step transaction in a loop."""

    def __init__(self, address: str) -> None:
        self.client = AgentTxClient(address, timeout=60)
        tx = self.client.begin(agent_id="probe").transaction_id
        self.client.execute_step(tx, 1, "kv.put", {"key": "probe", "value": 1})
        self.tx = tx
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter_ns()
            self.client.get_transaction(self.tx)
            self.samples.append(time.perf_counter_ns() - t0)
            time.sleep(0.005)

    @contextmanager
    def running(self) -> Iterator[list[int]]:
        """The probe runs while the block does; yields its samples (filled when it ends)."""
        found: list[int] = []
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        time.sleep(0.02)
        try:
            yield found
        finally:
            time.sleep(0.02)
            self._stop.set()
            self._thread.join(60)
            found.extend(self.samples)

    def close(self) -> None:
        self.client.close()


def _timed(fn: Callable[[], Any]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _with_worst(samples: list[int]) -> dict[str, float]:
    st = stats_ms(samples)
    st["worst"] = st["max"]
    return st


def one_round(address: str, steps: int, reads: int) -> dict[str, Any]:
    with AgentTxClient(address, timeout=120) as client:
        tx = client.begin(agent_id="history").transaction_id
        for n in range(1, steps + 1):
            client.execute_step(tx, n, "kv.put", {"key": f"k{n}", "value": VALUE})
        probe = Probe(address)
        try:
            with probe.running() as idle:
                time.sleep(0.5)
            with probe.running() as cold_probe:
                cold = [_timed(lambda: client.get_transaction(tx))]
            get_probe: list[int] = []
            warm: list[int] = []
            for _ in range(reads):
                with probe.running() as p:
                    warm.append(_timed(lambda: client.get_transaction(tx)))
                get_probe.extend(p)
            list_probe: list[int] = []
            pages: list[int] = []
            for _ in range(reads):
                with probe.running() as p:
                    pages.append(_timed(lambda: client.list_steps(tx, page_size=500)))
                list_probe.extend(p)
            next_probe: list[int] = []
            after_step: list[int] = []
            for n in range(steps + 1, steps + 1 + reads):
                client.execute_step(tx, n, "kv.put", {"key": f"k{n}", "value": VALUE})
                with probe.running() as p:
                    after_step.append(_timed(lambda: client.get_transaction(tx)))
                next_probe.extend(p)
            rewound_probe: list[int] = []
            rewound: list[int] = []
            top = steps + reads
            for _ in range(reads):  # a rollback of the last step, then a read
                client.rollback(tx, to_step=top)
                top -= 1
                with probe.running() as p:
                    rewound.append(_timed(lambda: client.get_transaction(tx)))
                rewound_probe.extend(p)
        finally:
            probe.close()
        client.rollback(tx)
    return {
        "get_cold": stats_ms(cold),
        "get_warm": stats_ms(warm),
        "list_warm": stats_ms(pages),
        "get_next": stats_ms(after_step),
        "get_rewound": stats_ms(rewound),
        "probe_idle": _with_worst(idle),
        "probe_cold": _with_worst(cold_probe),
        "probe_get": _with_worst(get_probe),
        "probe_list": _with_worst(list_probe),
        "probe_next": _with_worst(next_probe),
        "probe_rewound": _with_worst(rewound_probe),
        # best_round ranks rounds by this: the warm read's median
        "p50": stats_ms(warm)["p50"],
    }


ROWS = (
    ("get_transaction, first read (graph rebuilt)", "get_cold"),
    ("get_transaction, again", "get_warm"),
    ("list_steps, 500 a page", "list_warm"),
    ("get_transaction after one more step", "get_next"),
    ("get_transaction after a rollback of the last step", "get_rewound"),
    ("probe, nothing else running (floor)", "probe_idle"),
    ("probe, during the first read", "probe_cold"),
    ("probe, during get_transaction", "probe_get"),
    ("probe, during list_steps", "probe_list"),
    ("probe, during the read after a step", "probe_next"),
    ("probe, during the read after a rollback", "probe_rewound"),
)


def rows(res: dict[str, Any], store: str = "sqlite") -> list[list[Any]]:
    r = res.get(STORES[store], {})
    return [[label, r[key]["n"], r[key]["p50"], r[key]["max"]] for label, key in ROWS if key in r]


def markdown(res: dict[str, Any], store: str = "sqlite") -> str:
    return md_table(["call (ms)", "n", "p50", "worst"], rows(res, store), align_right=True)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS)
    ap.add_argument("--steps", type=int, default=300, help="steps in the long history")
    ap.add_argument(
        "--store",
        choices=sorted(STORES),
        default="sqlite",
        help="the server's store: sqlite (a file in a scratch directory) or pg (a fresh "
        "database on AGENTTX_BENCH_PG's server, dropped after; default sqlite)",
    )
    ns = ap.parse_args(argv)
    out = Out()
    key = STORES[ns.store]
    path = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(Path(ns.output or RESULTS)), ns.store))
        return 0
    started = time.perf_counter()
    # One file for both stores: the other store's figures stay as its own run left them.
    kept = read_result(path) if path is not None else {}
    res: dict[str, Any] = {"machine": machine_info(), "steps": ns.steps}
    res.update({k: v for k, v in kept.items() if k in STORES.values() and k != key})
    run: dict[str, Any] = {k: res["machine"][k] for k in ("git", "date", "load_average_start")}
    reads = 3 if ns.quick else 10
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(scratch("history"))
        url = None
        if ns.store == "pg":
            run["postgres_version"] = postgres_version()
            url = stack.enter_context(pg_database())
        address = stack.enter_context(served(tmp / "data", url))
        res[key] = best_round([one_round(address, ns.steps, reads) for _ in range(rounds_of(ns))])
    res[key]["run"] = run | {"steps": ns.steps}
    finish_machine(res, started)
    out.table(
        f"A history of {ns.steps} steps (~{ns.steps * 22 // 1000} MB) read through the client"
        f" ({key})",
        ["call (ms)", "n", "p50", "worst"],
        rows(res, ns.store),
    )
    write_result(out, path, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
