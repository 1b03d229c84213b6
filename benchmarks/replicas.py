"""Replica benchmark: step latency and throughput through gRPC against ``agenttx serve``
subprocesses, on SQLite (one server) and on PostgreSQL (one server, and three replicas on one
database with the client spreading calls over them).

Run from the repository root, with PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth;
``AGENTTX_BENCH_PG`` overrides the admin URL)::

    .venv/bin/python -m benchmarks.replicas            # full run, ~15 minutes on 2 cores
    .venv/bin/python -m benchmarks.replicas --quick    # smoke run, about a minute
    .venv/bin/python -m benchmarks.replicas --only pg-3 # one setup; the file keeps the others
    .venv/bin/python -m benchmarks.replicas --markdown # print the results file as Markdown

Prints a table and writes ``benchmarks/results/replicas.json`` (machine, date, PostgreSQL
settings, every round; a ``--quick`` run writes only to ``--output``). Setups, each on fresh
storage:

- ``sqlite-1``: one server, its default store (SQLite in the data directory, WAL,
  ``synchronous=NORMAL``).
- ``pg-3``: three servers on one new PostgreSQL database; the client sends call *i* to
  replica *i mod 3* (round-robin over calls, so consecutive steps of one transaction land
  on different replicas — every step finds the transaction moved by another replica).
- ``pg-3-sticky``: the same three servers, but each transaction keeps to one replica
  (transactions round-robin): what the hops cost.
- ``pg-1``: the same database, every call to the first of those servers (the other two
  serve nothing; their background tasks poll every few seconds): one server on PostgreSQL.
  Sharing the servers keeps all pools within PostgreSQL's default 100 connections.

Measurements (client-side wall time, including gRPC over loopback):

- ``step``: ``ExecuteStep kv.put`` one call at a time in one transaction: warm-up calls, then
  ``--steps`` timed ones (500; a distinct key per step); p50 / mean / p99.
- ``throughput``: 512 transactions × (``BeginTransaction``, 20 ``ExecuteStep kv.put``,
  ``CommitTransaction``) run by 16 and 64 concurrent client tasks; steps/s = 10,240 / wall
  time (begins and commits included, no conflicts: every key is distinct). The servers keep
  their default PostgreSQL pools (``pool_size`` 8 query connections, ``lock_pool_size`` 16
  transaction-lock connections each), so a server works on at most 16 transactions at once
  and further calls queue for a lock connection.
- ``cpu_us_per_step`` (around each latency round; the median round is reported): CPU time of
  this client process, of the setup's servers, and of its database's PostgreSQL backends,
  divided by the steps sent; read from ``/proc`` (10 ms ticks: a few per cent over 600
  steps). The same around each throughput round (per step, begins and commits included),
  with "cores busy" = CPU per step × steps/s: how much of the machine the run used.
- ``pg_floor_us`` (once per round): one ``SELECT 1`` and one single-row autocommit ``INSERT``
  through async psycopg (as the store uses it): a PostgreSQL round trip, and one with a WAL
  flush.

All setups are served at once and measured in turn, round by round, the order rotating every
round, so a shared machine's changing load hits each alike. Every figure is the best of
``--rounds`` rounds (default 3, 1 with ``--quick``); all rounds and the load average before
each are in the JSON. Servers log at ``warning`` (no per-call log line) with metrics off.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    agenttx_command,
    bench_parser,
    finish_machine,
    free_port,
    load_average,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    stats_us,
    write_result,
)

RESULTS = RESULTS_DIR / "replicas.json"
ADMIN_URL = os.environ.get("AGENTTX_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SETUPS = ("sqlite-1", "pg-1", "pg-3", "pg-3-sticky")
CONCURRENCY = (16, 64)
START_TIMEOUT_S = 30.0
LABELS = {
    "sqlite-1": "SQLite, 1 server",
    "pg-1": "PostgreSQL, 1 server",
    "pg-3": "PostgreSQL, 3 replicas, calls round-robin",
    "pg-3-sticky": "PostgreSQL, 3 replicas, one replica per transaction",
}


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    address: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(data_dir: Path, store: str | None) -> Server:
    data_dir.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    args = ["serve", "--listen-addr", address, "--data-dir", str(data_dir)]
    args += ["--metrics-addr", "off", "--log-level", "warning"]
    if store:
        args += ["--store", store]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTTX_")}
    log = data_dir.with_suffix(".log")
    with log.open("wb") as f:
        proc = subprocess.Popen(agenttx_command(*args), env=env, stdout=f, stderr=subprocess.STDOUT)
    return Server(proc, address, log)


def wait_serving(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            with contextlib.suppress(grpc.RpcError):
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if server.proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"agenttx serve did not start:\n{server.log.read_text()}")
            time.sleep(0.05)


@contextlib.contextmanager
def cluster(store: str, n: int) -> Iterator[tuple[list[Server], str]]:
    """``n`` servers on fresh storage (``sqlite``: one, its own file; ``postgres``: one new
    database shared by all), serving; stopped and dropped afterwards."""
    base = Path(os.environ.get("AGENTTX_BENCH_DIR", tempfile.gettempdir()))
    root = Path(tempfile.mkdtemp(prefix=f"agenttx-bench-{store}-", dir=base))
    db = ""
    servers: list[Server] = []
    try:
        if store == "sqlite":
            servers.append(start_server(root / "server-0", None))
        else:
            db = f"agenttx_bench_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(ADMIN_URL, autocommit=True) as c:
                c.execute(f'CREATE DATABASE "{db}"')
            url = ADMIN_URL.rsplit("/", 1)[0] + f"/{db}"
            servers += [start_server(root / f"server-{i}", url) for i in range(n)]
        for s in servers:
            wait_serving(s)
        yield servers, db
    finally:
        for s in servers:
            s.stop()
        if db:
            with psycopg.connect(ADMIN_URL, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- client


class Client:
    """grpc.aio stubs, one channel per server. ``sticky``: a transaction's calls go to the
    server its begin went to; otherwise every call goes to the next server in turn."""

    def __init__(self, servers: list[Server], sticky: bool) -> None:
        self.channels = [grpc.aio.insecure_channel(s.address) for s in servers]
        self.stubs = [pb_grpc.AgentTxServiceStub(c) for c in self.channels]
        self.sticky = sticky
        self._next = itertools.cycle(range(len(self.stubs)))

    def pick(self) -> int:
        return next(self._next)

    async def call(self, server: int, method: str, request: Any) -> Any:
        return await getattr(self.stubs[server], method)(request)

    async def close(self) -> None:
        for c in self.channels:
            await c.close()


def put(tx: str, step: int, key: str) -> Any:
    return pb.ExecuteStepRequest(
        transaction_id=tx,
        step_id=step,
        tool_name="kv.put",
        arguments_json=json.dumps({"key": key, "value": step}),
    )


async def step_latency(client: Client, steps: int, warm: int, tag: str) -> list[int]:
    """ExecuteStep kv.put, one at a time in one transaction; per-call wall time in ns."""
    home = client.pick()
    begun = await client.call(home, "BeginTransaction", pb.BeginTransactionRequest(agent_id="b"))
    tx = begun.transaction_id
    samples: list[int] = []
    for n in range(1, warm + steps + 1):
        server = home if client.sticky else client.pick()
        request = put(tx, n, f"{tag}/{n}")
        t0 = time.perf_counter_ns()
        reply = await client.call(server, "ExecuteStep", request)
        elapsed = time.perf_counter_ns() - t0
        if reply.status != pb.STEP_STATUS_SUCCESS:
            raise RuntimeError(reply.clean_hint)
        if n > warm:
            samples.append(elapsed)
    await client.call(home, "CommitTransaction", pb.CommitTransactionRequest(transaction_id=tx))
    return samples


async def throughput(
    client: Client, transactions: int, steps: int, concurrency: int, tag: str
) -> float:
    """Wall seconds for ``transactions`` × (begin, ``steps`` kv.put, commit)."""
    todo = iter(range(transactions))

    async def worker() -> None:
        for t in todo:
            home = client.pick()

            def server(home: int = home) -> int:
                return home if client.sticky else client.pick()

            begun = await client.call(
                server(), "BeginTransaction", pb.BeginTransactionRequest(agent_id="bench")
            )
            tx = begun.transaction_id
            for s in range(1, steps + 1):
                reply = await client.call(server(), "ExecuteStep", put(tx, s, f"{tag}/{t}/{s}"))
                if reply.status != pb.STEP_STATUS_SUCCESS:
                    raise RuntimeError(reply.clean_hint)
            done = await client.call(
                server(), "CommitTransaction", pb.CommitTransactionRequest(transaction_id=tx)
            )
            if not done.committed:
                raise RuntimeError(f"{tx} did not commit")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


def step_stats(samples: list[int]) -> dict[str, Any]:
    """p50/mean/p99 …, and the p50 of the first and the last 100 steps: a transaction that
    moves between replicas is reloaded with all its steps on every hop."""
    out: dict[str, Any] = stats_us(samples)
    out["p50_first_100"] = stats_us(samples[:100])["p50"]
    out["p50_last_100"] = stats_us(samples[-100:])["p50"]
    return out


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc), 0 if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_times(servers: list[Server], db: str) -> dict[str, float]:
    """CPU seconds so far: this client process, the servers, and (PostgreSQL) the database's
    backends (the servers' pooled connections, which live for the whole run)."""
    out = {
        "client": time.process_time(),
        "servers": sum(_proc_cpu_s(s.proc.pid) for s in servers),
    }
    if db:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            pids = [
                r[0]
                for r in c.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (db,)
                ).fetchall()
            ]
        out["postgres"] = sum(_proc_cpu_s(p) for p in pids)
    return out


async def bench_all(
    setups: dict[str, tuple[list[Server], str]], *, quick: bool, rounds: int, steps: int
) -> dict[str, Any]:
    """Every setup, measured in turn, round by round (the order rotates every round), so the
    shared machine's changing load hits each alike. Per setup: the best latency round (lowest
    p50) and the best throughput round; every round is kept."""
    transactions, per_tx = (64, 20) if quick else (512, 20)
    warm = 50 if quick else 100
    names = list(setups)
    clients = {n: Client(servers, n == "pg-3-sticky") for n, (servers, _) in setups.items()}

    def rotated(r: int) -> list[str]:
        k = r % len(names)
        return names[k:] + names[:k]

    lat: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    cpu: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    floors: list[dict[str, Any]] = []
    loads: list[list[float]] = []
    try:
        for r in range(rounds):
            loads.append(load_average())
            for n in rotated(r):
                servers, db = setups[n]
                before = cpu_times(servers, db)
                samples = await step_latency(clients[n], steps, warm, f"{n}/lat{r}")
                after = cpu_times(servers, db)
                lat[n].append(step_stats(samples))
                cpu[n].append(
                    {k: (after[k] - before.get(k, 0.0)) / (warm + steps) * 1e6 for k in after}
                )
            if any(db for _, db in setups.values()):
                floors.append(await pg_floor(200 if quick else 1000))
        tput: dict[str, dict[int, list[float]]] = {n: {} for n in names}
        tcpu: dict[str, dict[int, list[dict[str, float]]]] = {n: {} for n in names}
        for conc in CONCURRENCY:
            for n in names:  # warm-up at full concurrency: pools grow to what rounds use
                await throughput(clients[n], conc, per_tx, conc, f"{n}/warm{conc}")
            for r in range(rounds):
                loads.append(load_average())
                for n in rotated(r):
                    servers, db = setups[n]
                    before = cpu_times(servers, db)
                    seconds = await throughput(
                        clients[n], transactions, per_tx, conc, f"{n}/c{conc}r{r}"
                    )
                    after = cpu_times(servers, db)
                    tput[n].setdefault(conc, []).append(seconds)
                    tcpu[n].setdefault(conc, []).append(
                        {
                            k: (after[k] - before.get(k, 0.0)) / (transactions * per_tx) * 1e6
                            for k in after
                        }
                    )
    finally:
        for client in clients.values():
            await client.close()

    out: dict[str, Any] = {"setups": {}, "load_average_rounds": loads}
    for n in names:
        best = dict(min(lat[n], key=lambda x: x["p50"]))
        best["p50_rounds"] = [x["p50"] for x in lat[n]]
        result: dict[str, Any] = {
            "servers": len(setups[n][0]),
            # The median round: CPU time barely depends on the load, the tick is 10 ms.
            "cpu_us_per_step": {k: statistics.median(c[k] for c in cpu[n]) for k in cpu[n][0]},
            "cpu_us_per_step_rounds": cpu[n],
            "step_us": best,
            "throughput": {"transactions": transactions, "steps_per_transaction": per_tx},
        }
        for conc, times in tput[n].items():
            result["throughput"][str(conc)] = {
                "seconds": min(times),
                "steps_per_s": transactions * per_tx / min(times),
                "tx_per_s": transactions / min(times),
                "steps_per_s_rounds": [transactions * per_tx / t for t in times],
                # CPU per step (begins and commits included), median round
                "cpu_us_per_step": {
                    k: statistics.median(c[k] for c in tcpu[n][conc]) for k in tcpu[n][conc][0]
                },
            }
        out["setups"][n] = result
    if floors:
        out["pg_floor_us"] = {
            k: dict(
                min((f[k] for f in floors), key=lambda x: x["p50"]),
                p50_rounds=[f[k]["p50"] for f in floors],
            )
            for k in floors[0]
        }
    return out


async def pg_floor(n: int) -> dict[str, Any]:
    """What one PostgreSQL round trip and one durable single-row commit cost from Python
    (async psycopg, as the store uses it), on a scratch database."""
    db = f"agenttx_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}"')
    try:
        url = ADMIN_URL.rsplit("/", 1)[0] + f"/{db}"
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
            await c.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)")
            out: dict[str, Any] = {}
            for name, query in (
                ("select_1", "SELECT 1"),
                ("insert_commit", "INSERT INTO t VALUES (%s, 'x')"),
            ):
                samples = []
                for i in range(n + 100):
                    t0 = time.perf_counter_ns()
                    if "%s" in query:
                        await c.execute(query, (hash((name, i)),))
                    else:
                        await c.execute(query)
                    if i >= 100:
                        samples.append(time.perf_counter_ns() - t0)
                out[name] = stats_us(samples)
            return out
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


# --------------------------------------------------------------------------- report


def postgres_info() -> dict[str, Any]:
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            info: dict[str, Any] = {"version": c.execute("SHOW server_version").fetchone()[0]}
            for name in ("fsync", "synchronous_commit", "shared_buffers", "max_connections"):
                info[name] = c.execute(f"SHOW {name}").fetchone()[0]
            return info
    except psycopg.Error as exc:
        return {"error": str(exc)}


COLUMNS = [
    "setup",
    "step p50 µs",
    "mean µs",
    "p99 µs",
    *(f"steps/s @{c}" for c in CONCURRENCY),
]
DETAIL_COLUMNS = [
    "setup",
    "p50 steps 1-100 µs",
    "p50 last 100 µs",
    "CPU µs/step: client",
    "server(s)",
    "PostgreSQL",
]


def rows(res: dict[str, Any]) -> list[list[Any]]:
    out = []
    for setup in SETUPS:
        r = res.get("setups", {}).get(setup)
        if r is None:
            continue
        lat = r["step_us"]
        tput = r["throughput"]
        out.append(
            [
                LABELS[setup],
                lat["p50"],
                lat["mean"],
                lat["p99"],
                *(tput[str(c)]["steps_per_s"] for c in CONCURRENCY),
            ]
        )
    return out


CPU_COLUMNS = [
    "setup",
    "clients",
    "CPU µs/step: client",
    "server(s)",
    "PostgreSQL",
    "total",
    "cores busy",
]


def cpu_rows(res: dict[str, Any]) -> list[list[Any]]:
    """Throughput runs: CPU per step and how many of the machine's cores that keeps busy."""
    out = []
    for setup in SETUPS:
        r = res.get("setups", {}).get(setup)
        if r is None:
            continue
        for conc in CONCURRENCY:
            t = r["throughput"].get(str(conc), {})
            cpu = t.get("cpu_us_per_step")
            if not cpu:
                continue
            total = sum(cpu.values())
            out.append(
                [
                    LABELS[setup],
                    conc,
                    *(cpu.get(k, "–") for k in ("client", "servers", "postgres")),
                    total,
                    round(total * t["steps_per_s"] / 1e6, 2),
                ]
            )
    return out


def detail_rows(res: dict[str, Any]) -> list[list[Any]]:
    out = []
    for setup in SETUPS:
        r = res.get("setups", {}).get(setup)
        if r is None:
            continue
        cpu = r.get("cpu_us_per_step", {})
        out.append(
            [
                LABELS[setup],
                r["step_us"]["p50_first_100"],
                r["step_us"]["p50_last_100"],
                *(cpu.get(k, "–") for k in ("client", "servers", "postgres")),
            ]
        )
    floor = res.get("pg_floor_us", {})
    for name, label in (
        ("select_1", "PostgreSQL `SELECT 1`"),
        ("insert_commit", "PostgreSQL 1-row INSERT commit"),
    ):
        if name in floor:
            out.append([f"{label} (floor)", floor[name]["p50"], "", "", "", ""])
    return out


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    return str(v)


def markdown(res: dict[str, Any]) -> str:
    return "\n\n".join(
        md_table(columns, body, cell=_cell, align_right=True)
        for columns, body in (
            (COLUMNS, rows(res)),
            (DETAIL_COLUMNS, detail_rows(res)),
            (CPU_COLUMNS, cpu_rows(res)),
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ap.add_argument("--steps", type=int, default=None, help="timed latency steps (500)")
    ap.add_argument(
        "--only",
        action="append",
        choices=SETUPS,
        help="run only this setup (repeatable); the file keeps the other setups' results",
    )
    ns = ap.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: servers stopped, scratch databases dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    output = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or RESULTS)))
        return 0
    rounds = rounds_of(ns)
    steps = ns.steps or (200 if ns.quick else 500)
    out = Out()
    res: dict[str, Any] = {
        "machine": machine_info(),
        "postgres": postgres_info(),
        "quick": ns.quick,
        "rounds": rounds,
        "setups": {},
    }
    old = read_result(output) if ns.only and output is not None else {}
    if old:  # keep the other setups' results (and their machine)
        res["setups"] = old.get("setups", {})
        res["earlier_runs"] = {k: old["machine"] for k in old.get("setups", {}) if k not in ns.only}
    started = time.perf_counter()
    selected = [n for n in SETUPS if n in (ns.only or SETUPS)]
    with contextlib.ExitStack() as stack:
        setups: dict[str, tuple[list[Server], str]] = {}
        if "sqlite-1" in selected:
            out.note("[dim]starting 1 server on SQLite …[/dim]")
            setups["sqlite-1"] = stack.enter_context(cluster("sqlite", 1))
        pg = [n for n in selected if n != "sqlite-1"]
        if pg:
            # One database and its servers for every PostgreSQL setup: "pg-1" sends all its
            # calls to the first server (the others stay idle), so that every server's
            # pools fit PostgreSQL's default 100 connections at once.
            n = 1 if pg == ["pg-1"] else 3
            out.note(f"[dim]starting {n} server(s) on PostgreSQL …[/dim]")
            servers, db = stack.enter_context(cluster("postgres", n))
            for name in pg:
                setups[name] = (servers[:1] if name == "pg-1" else servers, db)
        out.note(f"[dim]measuring {', '.join(selected)}, {rounds} round(s) each …[/dim]")
        measured = asyncio.run(
            bench_all(
                {name: setups[name] for name in selected},
                quick=ns.quick,
                rounds=rounds,
                steps=steps,
            )
        )
    res["setups"].update(measured["setups"])
    res["load_average_rounds"] = measured["load_average_rounds"]
    if "pg_floor_us" in measured:
        res["pg_floor_us"] = measured["pg_floor_us"]
    finish_machine(res, started)
    out.table(
        f"gRPC step latency and throughput ({rounds} round(s), best kept)", COLUMNS, rows(res)
    )
    out.table("Where the step time goes", DETAIL_COLUMNS, detail_rows(res))
    out.table("CPU per step under load (throughput runs)", CPU_COLUMNS, cpu_rows(res))
    write_result(out, output, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
