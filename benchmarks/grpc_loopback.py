"""gRPC benchmark: ``ExecuteStep`` (``kv.put``) over loopback beside a no-op RPC of the same size.

Run from the repository root::

    .venv/bin/python -m benchmarks.grpc_loopback              # full run, ~10 minutes
    .venv/bin/python -m benchmarks.grpc_loopback --quick      # smoke run, ~1 minute
    .venv/bin/python -m benchmarks.grpc_loopback --inprocess  # client and server on one loop
    .venv/bin/python -m benchmarks.grpc_loopback --markdown   # the results file as Markdown

Prints tables and writes ``benchmarks/results/grpc.json`` (``--inprocess``:
``grpc-inprocess.json``) with the machine it ran on; a ``--quick`` run writes only to
``--output``. Stats, tables and the results file come from ``benchmarks.harness``.

The server is AgentTx's own stack with one addition made here, not in ``src/``: a second tiny
service on the same ``grpc.aio`` server object, ``bench.Echo/Echo``, which takes bytes and
returns bytes without touching the engine. Its request and reply are exactly as long as a
serialised ``ExecuteStepRequest`` for ``kv.put`` and its ``ExecuteStepResponse``, so the
difference between the two calls is what the transaction layer adds to the transport. A
``bench.Control`` service (CPU clocks, profiler start/stop, shutdown) is used only between
timed blocks.

Server stacks (``--stack``, repeatable; default ``served`` and ``bare``), each in its own
child process (``python -m benchmarks.grpc_loopback --serve``) so the client and the server have
separate event loops:

- ``served``: exactly what ``agenttx serve`` runs with its defaults — ``agenttx.server.start``:
  the engine on SQLite (``sync_writes`` off), the ``CallObserver`` interceptor feeding the
  Prometheus metrics, one INFO log line per call (written to a file in the data directory),
  the metrics endpoint, health and reflection, and (from `fb85812` on) the 1 ms interpreter
  switch interval `agenttx serve` sets first (`core.offload.share_interpreter_promptly`).
- ``served-warning`` (only with ``--stack served-warning``): the same with
  ``--log-level warning``, so no line per call: ``served`` minus this is the call log's cost.
- ``bare``: ``build_server(engine)`` without interceptors and without call logging: the floor
  of the adapter itself.

A stack name ending in ``+uvloop`` (``--stack served+uvloop``) runs that server's event loop
on uvloop, a what-if (uvloop must be importable: ``pip install --target DIR uvloop`` and
``PYTHONPATH=DIR``).

All stacks of a run are served at once, one child process each, and measured side by side:
latency blocks rotate through the stacks, throughput rounds alternate between them, so a
change in the (shared) machine's load hits every stack alike. ``--inprocess`` runs them one
after the other instead. ``--wait-quiet SECONDS`` first waits for the load average to drop.

Sections, per stack (``--no-throughput``, ``--no-profile`` skip theirs):

- ``latency``: one channel, sequential calls. 500 warm-up steps and echoes, then 5,000 timed
  ``ExecuteStep(kv.put)`` and 5,000 timed echoes in alternating blocks of 100 (the order
  flips every block), a new transaction every 1,000 steps (begin and commit not timed). Keys
  are fixed-width so every request has the same length. Also the CPU time per call of the
  server process, of its event-loop thread and of the client process, and the cores other
  processes used meanwhile (machine busy time from ``/proc/stat`` minus ours).
- ``throughput``: 512 transactions × (begin, 20 ``kv.put``, commit) run by 1/4/16/64 tasks on
  one channel (steps/s = 10,240 / wall), then the same number of RPCs (22 per "transaction")
  through the echo for context (calls/s); with the CPU used by each side during the run.
- ``client run``: the project's own client (``AsyncAgentTxClient``, which sends a
  ``request_id`` with every mutating call): 10-step runs (``client.transaction()``: begin, 10
  ``kv.put``, commit), each timed whole, beside groups of 12 no-op RPCs (``client.health()``,
  answered by the health service without touching the engine) through the same client and
  channel, alternating. The target (issue 24): a run ≤ 1.7× twelve no-op RPCs (p50).
- ``profile``: 1,000 sequential steps (one transaction), then 1,000 echoes, under cProfile
  and pyinstrument in the server process (event-loop thread only); self time per call
  grouped by area (gRPC, protobuf, asyncio, logging, metrics, engine, SQLite …), and the
  difference step − echo, beside the loop thread's measured CPU per call.

Latency and throughput run ``--rounds`` times (3, 1 with ``--quick``); the round with the
lowest step p50 (highest steps/s) is kept and every round's figures are in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

import grpc

from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from benchmarks.harness import (
    RESULTS_DIR,
    ROOT,
    AreaRule,
    Out,
    area_of,
    bench_parser,
    finish_machine,
    load_average,
    machine_info,
    md_table,
    output_of,
    read_result,
    rounds_of,
    sampled_self_times,
    scratch,
    short_source,
    stats_us,
    target_rows,
    targets_section,
    top_function_rows,
    write_result,
)

RESULTS = RESULTS_DIR / "grpc.json"
RESULTS_INPROCESS = RESULTS_DIR / "grpc-inprocess.json"

STACKS = ("served", "served-warning", "bare")
DEFAULT_STACKS = ("served", "bare")
CONCURRENCY = (1, 4, 16, 64)
ECHO_SERVICE = "bench.Echo"
CONTROL_SERVICE = "bench.Control"
ECHO_PATH = f"/{ECHO_SERVICE}/Echo"

# The reference's published gRPC loopback figures (Rust, Ryzen 5 5600H, 12 threads).
REF_GRPC = {"p50": 348.0, "mean": 506.0, "p99": 884.0}
# The targets.
TARGET_RATIO_P50 = 1.25  # kv.put step p50 ≤ 1.25 × the no-op RPC's p50
TARGET_CLIENT_RUN = 1.7  # issue 24: a 10-step client run ≤ 1.7 × 12 no-op RPCs (was 1.5)
CLIENT_RUN_STEPS = 10
TARGET_SCALING = 3.0  # steps/s at 16 tasks ≥ 3 × steps/s at 1 task

ROUNDS = {"n": 3}


# --------------------------------------------------------------------------- server side


class BenchServer:
    """One ``grpc.aio`` server: AgentTx (stack ``served`` or ``bare``) + echo + control."""

    def __init__(self, stack: str, data_dir: Path, sync_writes: bool = False) -> None:
        if stack not in STACKS:
            raise ValueError(f"stack must be one of {STACKS}, got {stack!r}")
        self.stack = stack
        self.data_dir = data_dir
        self.sync_writes = sync_writes
        self.echo_reply = b""
        self.stopped = asyncio.Event()
        self.server: Any = None
        self._running: Any = None  # agenttx.server.RunningServer (served)
        self._engine: Any = None  # agenttx.Engine (bare)
        self._log: Any = None
        self._profiler: Any = None
        self._profiler_kind = ""
        self._profile_t0 = 0.0

    async def start(self) -> int:
        """Start serving on 127.0.0.1 (a free port); returns the port."""
        stack = self.stack
        if stack.startswith("served"):
            from prometheus_client import disable_created_metrics

            from agenttx import logs
            from agenttx.server import ServeConfig, start

            # As `agenttx serve` with its defaults: text logs at INFO (one line per call);
            # stderr is a file here so the child's output cannot block on a full pipe.
            self._log = open(self.data_dir / "server.log", "a", encoding="utf-8")  # noqa: ASYNC230, SIM115
            level = "warning" if stack == "served-warning" else "info"
            logs.configure("text", level, stream=self._log)
            disable_created_metrics()  # type: ignore[no-untyped-call]
            self._running = await start(
                ServeConfig(
                    listen_addr="127.0.0.1:0",
                    data_dir=self.data_dir,
                    sync_writes=self.sync_writes,
                    metrics_addr="127.0.0.1:0",
                    grace_s=1.0,
                )
            )
            self.server = self._running.grpc_server
            # grpc.aio looks generic handlers up per call, so these may join after start().
            self.server.add_generic_rpc_handlers(self._handlers())
            return int(self._running.address.rpartition(":")[2])
        from agenttx import Engine
        from agenttx.api.grpc.server import build_server, mark_serving

        self._engine = await Engine.open(
            f"sqlite:///{self.data_dir / 'agenttx.db'}", sync_writes=self.sync_writes
        )
        self.server = build_server(self._engine)
        self.server.add_generic_rpc_handlers(self._handlers())
        port = int(self.server.add_insecure_port("127.0.0.1:0"))
        await self.server.start()
        await mark_serving(self.server, True)
        return port

    async def stop(self) -> None:
        if self._running is not None:
            await self._running.stop(1.0)
        else:
            await self.server.stop(1.0)
            await self._engine.close()
        if self._log is not None:
            self._log.close()

    def _handlers(self) -> tuple[Any, ...]:
        def control(fn: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> Any:
            async def handler(request: bytes, context: Any) -> bytes:
                return json.dumps(await fn(json.loads(request or b"{}"))).encode()

            return grpc.unary_unary_rpc_method_handler(handler)

        return (
            grpc.method_handlers_generic_handler(
                ECHO_SERVICE, {"Echo": grpc.unary_unary_rpc_method_handler(self._echo)}
            ),
            grpc.method_handlers_generic_handler(
                CONTROL_SERVICE,
                {
                    "Configure": control(self._configure),
                    "Cpu": control(self._cpu),
                    "ProfileStart": control(self._profile_start),
                    "ProfileStop": control(self._profile_stop),
                    "Stop": control(self._stop),
                },
            ),
        )

    async def _echo(self, request: bytes, context: Any) -> bytes:
        return self.echo_reply

    async def _configure(self, req: dict[str, Any]) -> dict[str, Any]:
        self.echo_reply = b"\x00" * int(req["echo_response_bytes"])
        return {"pid": os.getpid()}

    async def _cpu(self, req: dict[str, Any]) -> dict[str, Any]:
        # Runs on the event-loop thread: thread_time() is the loop's own CPU; process_time()
        # adds gRPC's C-core threads and any SQLite writer thread.
        return {
            "process_s": time.process_time(),
            "loop_thread_s": time.thread_time(),
            "threads": len(os.listdir("/proc/self/task"))
            if Path("/proc/self/task").exists()
            else 0,
        }

    async def _profile_start(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req.get("profiler", "cprofile")
        if kind == "pyinstrument":
            try:
                from pyinstrument import Profiler
            except ImportError:
                return {"ok": False, "error": "pyinstrument not installed"}
            self._profiler = Profiler(interval=0.0001, async_mode="disabled")
            self._profiler.start()
        else:
            self._profiler = cProfile.Profile()
            self._profiler.enable()
        self._profiler_kind = kind
        self._profile_t0 = time.perf_counter()
        return {"ok": True}

    async def _profile_stop(self, req: dict[str, Any]) -> dict[str, Any]:
        prof, self._profiler = self._profiler, None
        if prof is None:
            return {"ok": False, "error": "no profiler running"}
        wall = time.perf_counter() - self._profile_t0
        calls = int(req["calls"])
        if self._profiler_kind == "pyinstrument":
            prof.stop()
            root = prof.last_session.root_frame() if prof.last_session else None
            areas, funcs = _sampled(root) if root is not None else ({}, {})
        else:
            prof.disable()
            areas, funcs = _cprofile_areas(prof)
        return {"ok": True, **_summary(areas, funcs, calls, wall)}

    async def _stop(self, req: dict[str, Any]) -> dict[str, Any]:
        self.stopped.set()
        return {"ok": True}


def run_child(stack: str, data_dir: Path, sync_writes: bool, use_uvloop: bool) -> None:
    if stack.startswith("served"):
        # As `agenttx serve` does first (a revision from before it did runs without it).
        with contextlib.suppress(ImportError):
            from agenttx.core.offload import share_interpreter_promptly

            share_interpreter_promptly()
    if use_uvloop:
        import importlib

        importlib.import_module("uvloop").run(serve_child(stack, data_dir, sync_writes))
    else:
        asyncio.run(serve_child(stack, data_dir, sync_writes))


async def serve_child(stack: str, data_dir: Path, sync_writes: bool) -> None:
    """``--serve``: print ``{"port": …}`` on stdout, serve until Stop, SIGTERM or stdin EOF."""
    import signal

    srv = BenchServer(stack, data_dir, sync_writes)
    port = await srv.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, srv.stopped.set)
    stdin = sys.stdin.fileno()

    def on_stdin() -> None:  # the parent went away: do not outlive it
        if not os.read(stdin, 4096):
            loop.remove_reader(stdin)
            srv.stopped.set()

    loop.add_reader(stdin, on_stdin)
    print(json.dumps({"port": port, "pid": os.getpid()}), flush=True)
    await srv.stopped.wait()
    await asyncio.sleep(0.05)  # let the Stop reply leave
    await srv.stop()


# --------------------------------------------------------------------------- profiles

# Self time grouped by area: (area, test on (file, function, is_builtin)); the first match
# wins. cProfile names C functions as file "~" and "<method 'run' of '_contextvars.Context'
# objects>", pyinstrument as "<built-in>" and "Context.run". Neither sees gRPC's Cython
# coroutines (the server's RPC handling): their time lands in the nearest profiled caller,
# which is the C ``Context.run`` the event loop uses to step every task.
IDLE = "idle: waiting in epoll for the next call"
# Where a served call's loop time goes (``benchmarks.harness.area_of``); the first match wins.
_AREAS: list[AreaRule] = [
    (
        IDLE,
        lambda f, fn, b: (b and "poll" in fn) or (f.endswith("selectors.py") and fn == "select"),
    ),
    (
        "SQLite (C: execute, commit)",
        lambda f, fn, b: b and any(x in fn for x in ("sqlite3", "Connection.", "Cursor.")),
    ),
    (
        "task steps: C Task/Context.run + gRPC Cython server code",
        lambda f, fn, b: b and ("_contextvars" in fn or "Context.run" in fn),
    ),
    (
        "protobuf (upb C + python)",
        lambda f, fn, b: "google/protobuf" in f or (b and ("upb" in fn or "Message." in fn)),
    ),
    (
        "gRPC Python layer (grpc/aio, cygrpc calls)",
        lambda f, fn, b: "/grpc/" in f or "/grpc_" in f or (b and "grpc" in fn),
    ),
    (
        "logging: one INFO line per call (logging, agenttx/logs.py, write)",
        lambda f, fn, b: (
            "/logging/" in f
            or f.endswith("agenttx/logs.py")
            or (b and any(x in fn for x in ("_io.", "TextIOWrapper", "BufferedWriter")))
        ),
    ),
    (
        "metrics: CallObserver + prometheus_client",
        lambda f, fn, b: "prometheus_client" in f or f.endswith("api/metrics.py"),
    ),
    ("servicer (api/grpc/server.py)", lambda f, fn, b: f.endswith("api/grpc/server.py")),
    ("json", lambda f, fn, b: "/json/" in f or (b and "json" in fn.lower())),
    (
        "asyncio event loop (Python + C helpers)",
        lambda f, fn, b: (
            "/asyncio/" in f
            or "selectors" in f
            or (
                b
                and any(
                    x in fn for x in ("_asyncio", "socket", "Future", "Task", "call_soon", "select")
                )
            )
        ),
    ),
    ("engine step pipeline (core/steps.py)", lambda f, fn, b: f.endswith("core/steps.py")),
    ("engine, other (core/*.py)", lambda f, fn, b: "/agenttx/core/" in f),
    ("store (store/*.py, Python side)", lambda f, fn, b: "/agenttx/store/" in f),
    ("tools (kv.put, tool context)", lambda f, fn, b: "/agenttx/tools/" in f),
    ("agenttx, other", lambda f, fn, b: "/agenttx/" in f),
    ("benchmark echo/control handlers", lambda f, fn, b: "benchmarks/" in f),
    (
        "stdlib, other",
        lambda f, fn, b: "/lib/python3" in f and "site-packages" not in f,
    ),
    ("builtins, other (isinstance, dict ops, time …)", lambda f, fn, b: b),
]


def _area(filename: str, func: str) -> str:
    return area_of(_AREAS, filename, func)


# Per function: [self seconds, calls (cProfile only), area].
Funcs = dict[str, list[Any]]


def _cprofile_areas(prof: cProfile.Profile) -> tuple[dict[str, float], Funcs]:
    st = pstats.Stats(prof)
    areas: dict[str, float] = {}
    funcs: Funcs = {}
    for (filename, line, func), (_cc, nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        a = _area(filename, func)
        areas[a] = areas.get(a, 0.0) + tt
        entry = funcs.setdefault(f"{short_source(filename)}:{line}({func})", [0.0, 0, a])
        entry[0] += tt
        entry[1] += nc
    return areas, funcs


def _sampled(frame: Any) -> tuple[dict[str, float], Funcs]:
    """Self time per area and per function from a pyinstrument frame tree."""
    areas: dict[str, float] = {}
    funcs: Funcs = {}
    for path, line, function, self_time in sampled_self_times(frame):
        a = _area(path, function)
        areas[a] = areas.get(a, 0.0) + self_time
        entry = funcs.setdefault(f"{short_source(path)}:{line}({function})", [0.0, 0, a])
        entry[0] += self_time
    return areas, funcs


def _summary(areas: dict[str, float], funcs: Funcs, calls: int, wall: float) -> dict[str, Any]:
    idle = areas.pop(IDLE, 0.0)
    busy = sum(areas.values())
    top = sorted(((k, v) for k, v in funcs.items() if v[2] != IDLE), key=lambda kv: -kv[1][0])
    return {
        "calls": calls,
        "wall_us_per_call": wall / calls * 1e6,
        "busy_us_per_call": busy / calls * 1e6,
        "idle_us_per_call": idle / calls * 1e6,
        "areas": {
            k: {"us_per_call": v / calls * 1e6, "pct": 100 * v / busy if busy else 0.0}
            for k, v in sorted(areas.items(), key=lambda kv: -kv[1])
        },
        "top_self": [
            {
                "function": k,
                "area": a,
                "self_us_per_call": t / calls * 1e6,
                "calls_per_call": n / calls,
                "pct": 100 * t / busy if busy else 0.0,
            }
            for k, (t, n, a) in top[:40]
        ],
    }


# --------------------------------------------------------------------------- client side


class Client:
    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.AgentTxServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.echo = self.channel.unary_unary(ECHO_PATH)
        self._control = {
            m: self.channel.unary_unary(f"/{CONTROL_SERVICE}/{m}")
            for m in ("Configure", "Cpu", "ProfileStart", "ProfileStop", "Stop")
        }
        self.echo_request = b""

    async def control(self, method: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = await self._control[method](json.dumps(payload or {}).encode(), timeout=60)
        return json.loads(reply)  # type: ignore[no-any-return]

    async def begin(self) -> str:
        r = await self.stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="bench"))
        return str(r.transaction_id)

    async def commit(self, tx: str) -> None:
        r = await self.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
        if not r.committed:
            raise RuntimeError(f"commit of {tx} failed: {r}")

    async def close(self) -> None:
        await self.channel.close()


def step_request(tx: str, step: int, key: int) -> pb.ExecuteStepRequest:
    # Fixed-width keys and values: every request (and reply) of a run has the same length.
    return pb.ExecuteStepRequest(
        transaction_id=tx,
        step_id=step,
        tool_name="kv.put",
        arguments_json=f'{{"key":"bench/{key:08d}","value":{key % 1_000_000 + 1_000_000}}}',
    )


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def system_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, all processes) since boot."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / _TICK  # all but idle and iowait


class Cpu:
    """CPU seconds used by the server (process, loop thread), this client process and the
    whole machine while a body runs: the rest is other people's load (the machine is shared)."""

    def __init__(self) -> None:
        self.server_process = self.server_loop = self.client = 0.0
        self.system = self.wall = 0.0

    async def measure(self, client: Client, body: Callable[[], Awaitable[Any]]) -> Any:
        a = await client.control("Cpu")
        s0, w0, c0 = system_busy_s(), time.perf_counter(), time.process_time()
        result = await body()
        c1, w1, s1 = time.process_time(), time.perf_counter(), system_busy_s()
        b = await client.control("Cpu")
        self.server_process += b["process_s"] - a["process_s"]
        self.server_loop += b["loop_thread_s"] - a["loop_thread_s"]
        self.client += c1 - c0
        self.system += s1 - s0
        self.wall += w1 - w0
        return result

    def other_cores(self, inprocess: bool) -> float:
        """Average cores used by other processes (clock ticks: ±1 tick per measurement)."""
        ours = self.server_process + (0.0 if inprocess else self.client)
        return max(0.0, self.system - ours) / self.wall if self.wall else 0.0

    def per_call_us(self, calls: int, inprocess: bool) -> dict[str, Any]:
        return {
            "server_process_us": self.server_process / calls * 1e6,
            "server_loop_thread_us": self.server_loop / calls * 1e6,
            # In-process the client is the server's process: counted there already.
            "client_process_us": None if inprocess else self.client / calls * 1e6,
        }


# --------------------------------------------------------------------------- latency


class LatencyRun:
    """One round of the sequential loop against one server: blocks of ``block`` steps or
    ``block`` echoes, a new transaction every ``per_tx`` steps (between blocks, not timed)."""

    def __init__(self, client: Client, block: int, per_tx: int, inprocess: bool, key0: int) -> None:
        self.client, self.block, self.per_tx, self.inprocess = client, block, per_tx, inprocess
        self.key0 = self.key = key0
        self.tx = ""
        self.step = 1
        self.step_ns: list[int] = []
        self.echo_ns: list[int] = []
        self.req_bytes: list[int] = []
        self.resp_bytes: list[int] = []
        self.cpu = {"step": Cpu(), "echo": Cpu()}

    async def run_block(self, kind: str, timed: bool = True) -> None:
        if not self.tx or self.step + self.block - 1 > self.per_tx:
            if self.tx:
                await self.client.commit(self.tx)
            self.tx, self.step = await self.client.begin(), 1
        body = self._steps if kind == "step" else self._echoes
        if timed:
            await self.cpu[kind].measure(self.client, lambda: body(True))
        else:
            await body(False)

    async def _steps(self, timed: bool) -> None:
        clock, stub = time.perf_counter_ns, self.client.stub
        out = self.step_ns
        for _ in range(self.block):
            req = step_request(self.tx, self.step, self.key)
            t0 = clock()
            resp = await stub.ExecuteStep(req)
            t1 = clock()
            if resp.status != pb.STEP_STATUS_SUCCESS:
                raise RuntimeError(f"step failed: {resp.clean_hint}")
            if timed:
                out.append(t1 - t0)
                self.req_bytes.append(req.ByteSize())
                self.resp_bytes.append(resp.ByteSize())
            self.step += 1
            self.key += 1

    async def _echoes(self, timed: bool) -> None:
        clock, payload, call = time.perf_counter_ns, self.client.echo_request, self.client.echo
        out = self.echo_ns
        for _ in range(self.block):
            t0 = clock()
            await call(payload)
            t1 = clock()
            if timed:
                out.append(t1 - t0)

    async def finish(self) -> dict[str, Any]:
        await self.client.commit(self.tx)
        step, echo = stats_us(self.step_ns), stats_us(self.echo_ns)
        both = Cpu()
        for c in self.cpu.values():
            both.server_process += c.server_process
            both.client += c.client
            both.system += c.system
            both.wall += c.wall
        rq, rs = self.req_bytes, self.resp_bytes
        return {
            "other_load_cores": both.other_cores(self.inprocess),
            "step": step,
            "echo": echo,
            "ratio_p50": step["p50"] / echo["p50"],
            "ratio_mean": step["mean"] / echo["mean"],
            "delta_p50_us": step["p50"] - echo["p50"],
            "cpu_per_call": {
                k: c.per_call_us(len(self.step_ns if k == "step" else self.echo_ns), self.inprocess)
                for k, c in self.cpu.items()
            },
            "payload_bytes": {
                "step_request_mean": sum(rq) / len(rq),
                "step_request_range": [min(rq), max(rq)],
                "step_response_mean": sum(rs) / len(rs),
                "step_response_range": [min(rs), max(rs)],
                "echo_request": len(self.client.echo_request),
            },
            "keys_used": self.key - self.key0,
        }


async def latency_rounds(
    clients: dict[str, Client], n: int, warm: int, block: int, inprocess: bool, key: int
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """``ROUNDS`` rounds; in each, every stack's blocks are interleaved with every other's
    (the stack order rotates and step/echo alternate), so a change in the machine's load
    hits all of them alike."""
    stacks = list(clients)
    rounds: dict[str, list[dict[str, Any]]] = {st: [] for st in stacks}
    for _ in range(ROUNDS["n"]):
        runs = {st: LatencyRun(clients[st], block, 1_000, inprocess, key) for st in stacks}
        for _b in range(max(1, warm // block)):
            for st in stacks:
                await runs[st].run_block("step", timed=False)
                await runs[st].run_block("echo", timed=False)
        for b in range(n // block):
            order = stacks[b % len(stacks) :] + stacks[: b % len(stacks)]
            kinds = ("step", "echo") if b % 2 == 0 else ("echo", "step")
            for st in order:
                for kind in kinds:
                    await runs[st].run_block(kind)
        for st in stacks:
            r = await runs[st].finish()
            rounds[st].append(r)
            key = max(key, runs[st].key) + 10
    return rounds, key


# --------------------------------------------------------------------------- throughput


async def _run_tasks(conc: int, jobs: int, job: Callable[[int], Awaitable[None]]) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for j in range(jobs):
        queue.put_nowait(j)

    async def worker() -> None:
        while True:
            try:
                j = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await job(j)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return time.perf_counter() - t0


async def throughput_round(
    client: Client, transactions: int, steps: int, conc: int, key0: int, inprocess: bool
) -> dict[str, Any]:
    stub = client.stub

    def tx_job(first_key: int) -> Callable[[int], Awaitable[None]]:
        async def job(j: int) -> None:
            tx = await client.begin()
            base = first_key + j * steps
            for s in range(1, steps + 1):
                r = await stub.ExecuteStep(step_request(tx, s, base + s))
                if r.status != pb.STEP_STATUS_SUCCESS:
                    raise RuntimeError(r.clean_hint)
            await client.commit(tx)

        return job

    rpcs_per_tx = steps + 2

    async def echo_job(j: int) -> None:
        payload, call = client.echo_request, client.echo
        for _ in range(rpcs_per_tx):
            await call(payload)

    # A short warm-up at this concurrency (new connections' streams, task churn), not timed.
    await _run_tasks(min(conc, 8), 8, tx_job(key0))
    out: dict[str, Any] = {}
    for kind, job, work in (
        ("step", tx_job(key0 + 8 * steps + 10), transactions * steps),
        ("echo", echo_job, transactions * rpcs_per_tx),
    ):
        cpu = Cpu()

        async def body(job: Callable[[int], Awaitable[None]] = job) -> float:
            return await _run_tasks(conc, transactions, job)

        seconds = await cpu.measure(client, body)
        rpcs = transactions * rpcs_per_tx
        out[kind] = {
            "seconds": seconds,
            "per_s": work / seconds,  # steps/s for step, calls/s for echo
            "rpcs_per_s": rpcs / seconds,
            "server_process_cpu_util": cpu.server_process / seconds,
            "server_loop_thread_util": cpu.server_loop / seconds,
            "client_cpu_util": None if inprocess else cpu.client / seconds,
            "other_load_cores": cpu.other_cores(inprocess),
        }
    return out


# --------------------------------------------------------------------------- client run


async def client_run_round(address: str, runs: int, key0: int) -> dict[str, Any]:
    """``runs`` 10-step runs through ``AsyncAgentTxClient`` and as many groups of 12 health
    RPCs through the same client, alternating (the first of each not timed)."""
    from agenttx.client import AsyncAgentTxClient

    clock = time.perf_counter_ns
    run_ns: list[int] = []
    noop_ns: list[int] = []
    # Each call of a run on its own (begin, a step, commit, one no-op): where a run's time
    # over twelve no-ops goes.
    call_ns: dict[str, list[int]] = {"begin": [], "step": [], "commit": [], "noop": []}
    rpcs = CLIENT_RUN_STEPS + 2  # begin, the steps, commit
    async with AsyncAgentTxClient(address, timeout=60) as client:
        key = key0
        for i in range(runs + 1):
            steps: list[int] = []
            t0 = clock()
            async with client.transaction(agent_id="bench") as tx:
                begun = clock()
                for _ in range(CLIENT_RUN_STEPS):
                    s0 = clock()
                    await tx.step("kv.put", {"key": f"run/{key:08d}", "value": key})
                    steps.append(clock() - s0)
                    key += 1
                stepped = clock()
            t1 = clock()
            noops: list[int] = []
            for _ in range(rpcs):
                n0 = clock()
                await client.health()
                noops.append(clock() - n0)
            t2 = clock()
            if i:
                run_ns.append(t1 - t0)
                noop_ns.append(t2 - t1)
                call_ns["begin"].append(begun - t0)
                call_ns["step"] += steps
                call_ns["commit"].append(t1 - stepped)
                call_ns["noop"] += noops
    run, noop = stats_us(run_ns), stats_us(noop_ns)
    per_call = {k: stats_us(v)["p50"] for k, v in call_ns.items()}
    return {
        "runs": runs,
        "steps_per_run": CLIENT_RUN_STEPS,
        "noop_rpcs_per_group": rpcs,
        "run": run,
        "noop": noop,
        "ratio_p50": run["p50"] / noop["p50"],
        # p50 µs of each call; over one no-op, what each call adds (a run adds the sum).
        "call_p50_us": per_call,
        "call_over_noop_us": {
            k: round(v - per_call["noop"], 1) for k, v in per_call.items() if k != "noop"
        },
        "keys_used": key - key0,
    }


# --------------------------------------------------------------------------- profile


async def profile_server(client: Client, n: int, profilers: list[str], key0: int) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": n}
    for prof in profilers:
        res: dict[str, Any] = {}
        for kind in ("step", "echo"):
            tx = await client.begin() if kind == "step" else ""
            ok = await client.control("ProfileStart", {"profiler": prof})
            if not ok.get("ok"):
                res = {"error": ok.get("error")}
                break
            cpu = Cpu()

            async def body(kind: str = kind, tx: str = tx, key0: int = key0) -> float:
                t0 = time.perf_counter()
                if kind == "step":
                    for s in range(1, n + 1):
                        await client.stub.ExecuteStep(step_request(tx, s, key0 + s))
                else:
                    for _ in range(n):
                        await client.echo(client.echo_request)
                return time.perf_counter() - t0

            wall = await cpu.measure(client, body)
            summary = await client.control("ProfileStop", {"calls": n})
            summary["client_wall_us_per_call"] = wall / n * 1e6
            summary["loop_thread_cpu_us_per_call"] = cpu.server_loop / n * 1e6
            res[kind] = summary
            if kind == "step":
                await client.commit(tx)
                key0 += n
        if "step" in res and "echo" in res:
            names = list(dict.fromkeys([*res["step"]["areas"], *res["echo"]["areas"]]))
            res["delta_areas"] = {
                a: res["step"]["areas"].get(a, {}).get("us_per_call", 0.0)
                - res["echo"]["areas"].get(a, {}).get("us_per_call", 0.0)
                for a in names
            }
        out[prof] = res
    return out


# --------------------------------------------------------------------------- orchestration


@contextlib.asynccontextmanager
async def server_at(stack: str, data_dir: Path, inprocess: bool, sync: bool) -> AsyncIterator[str]:
    """A running bench server (child process unless ``inprocess``); yields its address."""
    base, uvloop = stack.removesuffix("+uvloop"), stack.endswith("+uvloop")
    if inprocess:
        if uvloop:
            raise SystemExit("+uvloop stacks need a child process (drop --inprocess)")
        srv = BenchServer(stack, data_dir, sync)
        port = await srv.start()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            await srv.stop()
        return
    err_path = data_dir / "child.stderr"
    cmd = [
        "-m",
        "benchmarks.grpc_loopback",
        "--serve",
        "--stack",
        base,
        "--data-dir",
        str(data_dir),
    ]
    cmd += ["--sync-writes"] if sync else []
    cmd += ["--server-uvloop"] if uvloop else []
    with err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *cmd, cwd=ROOT, stdin=PIPE, stdout=PIPE, stderr=err
        )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            await proc.wait()
            tail = err_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"bench server did not start:\n{tail}")
        yield f"127.0.0.1:{json.loads(line)['port']}"
    finally:
        proc.stdin.close()  # the child stops on EOF
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.terminate()
            await proc.wait()


async def setup_client(client: Client) -> dict[str, int]:
    """Make the echo's payloads as long as a real step's request and reply."""
    tx = await client.begin()
    probe = step_request(tx, 500, 0)
    client.echo_request = b"\x00" * probe.ByteSize()
    probe.step_id = 1
    reply = await client.stub.ExecuteStep(probe)
    await client.commit(tx)
    reply.next_step_id, reply.revision = 501, 501  # as at step 500: same varint lengths
    await client.control("Configure", {"echo_response_bytes": reply.ByteSize()})
    return {"echo_request": len(client.echo_request), "echo_response": reply.ByteSize()}


async def run_group(
    stacks: list[str], ns: argparse.Namespace, out: Out
) -> dict[str, dict[str, Any]]:
    """All ``stacks`` served at once (one process each), measured side by side."""
    quick = ns.quick
    n = ns.samples or (1_000 if quick else 5_000)
    warm = 100 if quick else 500
    transactions = 64 if quick else 512
    prof_calls = 500 if quick else 1_000
    server = "in-process" if ns.inprocess else "child process"
    res: dict[str, dict[str, Any]] = {st: {"stack": st, "server": server} for st in stacks}
    clients: dict[str, Client] = {}
    dirs: dict[str, Path] = {}
    async with contextlib.AsyncExitStack() as es:
        for st in stacks:
            dirs[st] = es.enter_context(scratch(f"grpc-{st}"))
            address = await es.enter_async_context(
                server_at(st, dirs[st], ns.inprocess, ns.sync_writes)
            )
            clients[st] = Client(address)
            es.push_async_callback(clients[st].close)
            res[st]["payload_bytes"] = await setup_client(clients[st])
            res[st]["load_before"] = load_average()
        key = 1_000
        names = ", ".join(stacks)
        out.note(f"[dim]latency: {ROUNDS['n']} × {n:,} steps + echoes, {names} interleaved …[/dim]")
        t0 = time.perf_counter()
        rounds, key = await latency_rounds(clients, n, warm, ns.block, ns.inprocess, key)
        for st in stacks:
            best = dict(min(rounds[st], key=lambda r: r["step"]["p50"]))
            best["rounds"] = [
                {
                    "step_p50": r["step"]["p50"],
                    "echo_p50": r["echo"]["p50"],
                    "ratio_p50": r["ratio_p50"],
                    "step_mean": r["step"]["mean"],
                    "echo_mean": r["echo"]["mean"],
                    "other_load_cores": r["other_load_cores"],
                }
                for r in rounds[st]
            ]
            # The median round's ratio: less flattering than the best round's when noisy.
            ratios = sorted(r["ratio_p50"] for r in rounds[st])
            best["ratio_p50_median_round"] = ratios[len(ratios) // 2]
            best.update(samples=n, warmup=warm, block=ns.block, steps_per_transaction=1_000)
            res[st]["latency"] = best
        res[stacks[0]]["latency_seconds"] = round(time.perf_counter() - t0, 1)
        out.note(
            "[dim]client runs: 10-step runs vs 12 no-op RPCs through AsyncAgentTxClient …[/dim]"
        )
        for st in stacks:
            cr = [
                await client_run_round(clients[st].address, 50 if quick else 200, key + 50_000 * r)
                for r in range(ROUNDS["n"])
            ]
            best = dict(min(cr, key=lambda r: r["ratio_p50"]))
            best["ratio_p50_rounds"] = [r["ratio_p50"] for r in cr]
            res[st]["client_run"] = best
        key += 50_000 * ROUNDS["n"]
        tputs: dict[str, dict[str, Any]] = {
            st: {"transactions": transactions, "steps_per_transaction": 20} for st in stacks
        }
        if not ns.no_throughput:
            out.note("[dim]throughput …[/dim]")
        for conc in () if ns.no_throughput else CONCURRENCY:
            rs: dict[str, list[dict[str, Any]]] = {st: [] for st in stacks}
            for _ in range(ROUNDS["n"]):
                for st in stacks:
                    rs[st].append(
                        await throughput_round(
                            clients[st], transactions, 20, conc, key, ns.inprocess
                        )
                    )
                    key += (transactions + 9) * 20 + 100
            for st in stacks:
                top = dict(max(rs[st], key=lambda r: r["step"]["per_s"]))
                top["steps_per_s_rounds"] = [r["step"]["per_s"] for r in rs[st]]
                top["echo_per_s_rounds"] = [r["echo"]["per_s"] for r in rs[st]]
                tputs[st][str(conc)] = top
        for st in stacks if not ns.no_throughput else ():
            tp = tputs[st]
            tp["scaling_16_vs_1"] = tp["16"]["step"]["per_s"] / tp["1"]["step"]["per_s"]
            tp["echo_scaling_16_vs_1"] = tp["16"]["echo"]["per_s"] / tp["1"]["echo"]["per_s"]
            res[st]["throughput"] = tp
        if not ns.no_profile:
            for st in stacks:
                out.note(f"[dim]{st}: server profile …[/dim]")
                res[st]["profile"] = await profile_server(
                    clients[st], prof_calls, ["pyinstrument", "cprofile"], key
                )
        for st in stacks:
            res[st]["load_after"] = load_average()
            await clients[st].control("Stop")
            log = dirs[st] / "server.log"
            if log.exists():
                res[st]["server_log_bytes"] = log.stat().st_size
    return res


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    t: list[dict[str, Any]] = []
    for stack, r in res.get("stacks", {}).items():
        lat, tp = r["latency"], r.get("throughput")
        t.append(
            {
                "target": f"kv.put step p50 ≤ {TARGET_RATIO_P50}× echo p50 ({stack})",
                "bound": TARGET_RATIO_P50,
                "measured": lat["ratio_p50"],
                "unit": "×",
                "met": lat["ratio_p50"] <= TARGET_RATIO_P50,
                "detail": f"{lat['step']['p50']:.0f} vs {lat['echo']['p50']:.0f} µs",
            }
        )
        cr = r.get("client_run")
        if cr is not None:
            t.append(
                {
                    "target": f"10-step client run p50 ≤ {TARGET_CLIENT_RUN}× 12 no-op RPCs "
                    f"({stack})",
                    "bound": TARGET_CLIENT_RUN,
                    "measured": cr["ratio_p50"],
                    "unit": "×",
                    "met": cr["ratio_p50"] <= TARGET_CLIENT_RUN,
                    "detail": f"{cr['run']['p50']:.0f} vs {cr['noop']['p50']:.0f} µs",
                }
            )
        if tp is None:
            continue
        t.append(
            {
                "target": f"steps/s at 16 tasks ≥ {TARGET_SCALING:g}× at 1 task ({stack})",
                "bound": TARGET_SCALING,
                "measured": tp["scaling_16_vs_1"],
                "unit": "×",
                "met": tp["scaling_16_vs_1"] >= TARGET_SCALING,
                "detail": f"{tp['16']['step']['per_s']:,.0f} vs {tp['1']['step']['per_s']:,.0f}",
            }
        )
    return t


# --------------------------------------------------------------------------- report


def _latency_rows(r: dict[str, Any]) -> list[list[Any]]:
    lat = r["latency"]
    s, e = lat["step"], lat["echo"]
    return [
        ["ExecuteStep kv.put", s["p50"], s["mean"], s["p90"], s["p99"]],
        ["echo, same sizes", e["p50"], e["mean"], e["p90"], e["p99"]],
        [
            "step − echo",
            s["p50"] - e["p50"],
            s["mean"] - e["mean"],
            s["p90"] - e["p90"],
            s["p99"] - e["p99"],
        ],
        [
            "step / echo",
            f"{s['p50'] / e['p50']:.2f}×",
            f"{s['mean'] / e['mean']:.2f}×",
            f"{s['p90'] / e['p90']:.2f}×",
            f"{s['p99'] / e['p99']:.2f}×",
        ],
    ]


def _client_run_rows(cr: dict[str, Any]) -> list[list[Any]]:
    a, b = cr["run"], cr["noop"]
    return [
        [f"begin + {cr['steps_per_run']} kv.put + commit", a["p50"], a["mean"], a["p90"], a["p99"]],
        [f"{cr['noop_rpcs_per_group']} health RPCs", b["p50"], b["mean"], b["p90"], b["p99"]],
        ["run / no-op RPCs", *(f"{a[k] / b[k]:.2f}×" for k in ("p50", "mean", "p90", "p99"))],
    ]


def _cpu_rows(r: dict[str, Any]) -> list[list[Any]]:
    c = r["latency"]["cpu_per_call"]
    rows = []
    for kind, label in (("step", "ExecuteStep kv.put"), ("echo", "echo")):
        v = c[kind]
        rows.append(
            [
                label,
                v["server_loop_thread_us"],
                v["server_process_us"] - v["server_loop_thread_us"],
                v["server_process_us"],
                "" if v["client_process_us"] is None else v["client_process_us"],
            ]
        )
    return rows


def _inproc_note(res: dict[str, Any]) -> str:
    return " (in-process: the server columns include the client)" if res.get("inprocess") else ""


_CPU_COLS = [
    "CPU µs per call",
    "server loop thread",
    "server other threads",
    "server total",
    "client process",
]


def _tput_rows(r: dict[str, Any]) -> list[list[Any]]:
    tp = r["throughput"]
    rows = []
    for c in CONCURRENCY:
        v = tp[str(c)]
        rows.append(
            [
                c,
                v["step"]["per_s"],
                v["step"]["rpcs_per_s"],
                v["echo"]["per_s"],
                f"{100 * v['step']['server_loop_thread_util']:.0f} %",
                f"{100 * v['step']['server_process_cpu_util']:.0f} %",
                ""
                if v["step"]["client_cpu_util"] is None
                else f"{100 * v['step']['client_cpu_util']:.0f} %",
                _other(v["step"]),
            ]
        )
    return rows


def _other(v: dict[str, Any]) -> str:
    # Older result files have no such field.
    return f"{v['other_load_cores']:.2f}" if "other_load_cores" in v else ""


_TPUT_COLS = [
    "tasks",
    "steps/s",
    "AgentTx RPCs/s",
    "echo calls/s",
    "server loop CPU",
    "server CPU",
    "client CPU",
    "other processes, cores",
]


def _profile_rows(p: dict[str, Any]) -> list[list[Any]]:
    names = list(p["delta_areas"])
    names.sort(key=lambda a: -p["step"]["areas"].get(a, {}).get("us_per_call", 0.0))
    rows = []
    for a in names:
        s = p["step"]["areas"].get(a, {}).get("us_per_call", 0.0)
        e = p["echo"]["areas"].get(a, {}).get("us_per_call", 0.0)
        if s < 0.5 and e < 0.5:
            continue
        rows.append([a, s, e, s - e])
    rows.append(
        [
            "busy total (idle excluded)",
            p["step"]["busy_us_per_call"],
            p["echo"]["busy_us_per_call"],
            p["step"]["busy_us_per_call"] - p["echo"]["busy_us_per_call"],
        ]
    )
    if "loop_thread_cpu_us_per_call" in p["step"]:
        s, e = p["step"]["loop_thread_cpu_us_per_call"], p["echo"]["loop_thread_cpu_us_per_call"]
        rows.append(["loop thread CPU, measured (profiler on)", s, e, s - e])
    return rows


def report(out: Out, res: dict[str, Any]) -> None:
    m = res["machine"]
    out.note(
        f"[bold]machine[/bold]: {m.get('cpu')} · {m.get('cores')} cores · Python "
        f"{m.get('python')} · grpcio {m.get('grpcio')} · protobuf {m.get('protobuf')} · "
        f"{m.get('date')} · load {m.get('load_average_start')} → {m.get('load_average_end')} · "
        f"server {'in-process' if res['inprocess'] else 'in a child process'}"
    )
    for stack, r in res["stacks"].items():
        rows = _latency_rows(r)
        rows.append(
            ["reference (Rust, 5600H)", REF_GRPC["p50"], REF_GRPC["mean"], "", REF_GRPC["p99"]]
        )
        pb_ = r["payload_bytes"]
        out.table(
            f"[{stack}] sequential latency over loopback, µs (request {pb_['echo_request']} B, "
            f"reply {pb_['echo_response']} B; other processes used "
            f"{_other(r['latency']) or '?'} cores meanwhile)",
            ["", "p50", "mean", "p90", "p99"],
            rows,
        )
        out.table(
            f"[{stack}] CPU per call (latency loop){_inproc_note(res)}", _CPU_COLS, _cpu_rows(r)
        )
        cr = r.get("client_run")
        if cr is not None:
            out.table(
                f"[{stack}] {cr['runs']} runs through AsyncAgentTxClient, µs per run",
                ["", "p50", "mean", "p90", "p99"],
                _client_run_rows(cr),
            )
        tp = r.get("throughput")
        if tp is not None:
            out.table(
                f"[{stack}] throughput, {tp['transactions']} tx × 20 kv.put + begin/commit, one "
                f"channel (16 vs 1: steps {tp['scaling_16_vs_1']:.2f}×, echo "
                f"{tp['echo_scaling_16_vs_1']:.2f}×)",
                _TPUT_COLS,
                _tput_rows(r),
            )
        for prof in ("pyinstrument", "cprofile"):
            p = r.get("profile", {}).get(prof)
            if not p or "delta_areas" not in p:
                continue
            out.table(
                f"[{stack}] server self time per call by area, {prof}, µs (loop thread; wall "
                f"{p['step']['client_wall_us_per_call']:.0f} / "
                f"{p['echo']['client_wall_us_per_call']:.0f} µs per call under the profiler)",
                ["area", "step", "echo", "step − echo"],
                _profile_rows(p),
            )
        p = r.get("profile", {}).get("cprofile")
        if p and "step" in p:
            out.table(
                f"[{stack}] top server functions by self time, ExecuteStep, cProfile",
                ["function", "calls/call", "self µs/call", "%"],
                top_function_rows(p["step"]["top_self"], "call", "pct", md=False),
            )
    out.table(
        "Targets",
        ["target", "bound", "measured", "detail", "status"],
        target_rows(res["targets"], "detail", md=False),
    )


def markdown(res: dict[str, Any]) -> str:
    parts: list[str] = []
    for stack, r in res["stacks"].items():
        rows = _latency_rows(r)
        rows.append(
            [
                "reference kv.put (Rust, 5600H)",
                REF_GRPC["p50"],
                REF_GRPC["mean"],
                "",
                REF_GRPC["p99"],
            ]
        )
        parts.append(
            f"`{stack}` stack, sequential calls on one channel, µs (other processes used "
            f"{_other(r['latency']) or '?'} cores meanwhile)\n\n"
            + md_table(["", "p50", "mean", "p90", "p99"], rows)
        )
        parts.append(
            f"`{stack}` stack, CPU per call in the latency loop, µs{_inproc_note(res)}\n\n"
            + md_table(_CPU_COLS, _cpu_rows(r))
        )
        cr = r.get("client_run")
        if cr is not None:
            parts.append(
                f"`{stack}` stack, {cr['runs']} runs through `AsyncAgentTxClient`, µs per run\n\n"
                + md_table(["", "p50", "mean", "p90", "p99"], _client_run_rows(cr))
            )
        tp = r.get("throughput")
        if tp is not None:
            parts.append(
                f"`{stack}` stack, throughput ({tp['transactions']} tx × 20 `kv.put` + begin and "
                f"commit; 16 vs 1 task: steps {tp['scaling_16_vs_1']:.2f}×, echo "
                f"{tp['echo_scaling_16_vs_1']:.2f}×)\n\n" + md_table(_TPUT_COLS, _tput_rows(r))
            )
        for prof in ("pyinstrument", "cprofile"):
            p = r.get("profile", {}).get(prof)
            if p and "delta_areas" in p:
                parts.append(
                    f"`{stack}` stack, server loop-thread self time per call by area, {prof}, "
                    "µs\n\n" + md_table(["area", "step", "echo", "step − echo"], _profile_rows(p))
                )
        p = r.get("profile", {}).get("cprofile")
        if p and "step" in p:
            parts.append(
                f"`{stack}` stack, top server functions by self time (ExecuteStep, cProfile)\n\n"
                + md_table(
                    ["function", "calls/call", "self µs/call", "%"],
                    top_function_rows(p["step"]["top_self"], "call", "pct", md=True),
                )
            )
    parts.append(targets_section(res["targets"], "detail"))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- main


async def wait_quiet(out: Out, max_load: float, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        load = load_average()
        if not load or load[0] <= max_load or time.monotonic() >= deadline:
            return
        out.note(f"[dim]load {load} above {max_load}: waiting …[/dim]")
        await asyncio.sleep(10)


async def run_all(ns: argparse.Namespace, out: Out) -> dict[str, Any]:
    from importlib.metadata import version

    res: dict[str, Any] = {"machine": machine_info(), "quick": ns.quick, "rounds": ROUNDS["n"]}
    for dist in ("grpcio", "protobuf"):
        with contextlib.suppress(Exception):
            res["machine"][dist] = version(dist)
    res["inprocess"] = ns.inprocess
    res["sync_writes"] = ns.sync_writes
    res["stacks"] = {}
    started = time.perf_counter()
    stacks = list(dict.fromkeys(ns.stack or DEFAULT_STACKS))
    # Side by side in child processes; in-process one at a time (one logging set-up).
    for group in [[st] for st in stacks] if ns.inprocess else [stacks]:
        res["stacks"].update(await run_group(group, ns, out))
    finish_machine(res, started)
    res["targets"] = targets(res)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser((__doc__ or "").split("\n\n")[0], RESULTS)
    ap.add_argument("--inprocess", action="store_true", help="client and server on one event loop")
    ap.add_argument(
        "--stack",
        action="append",
        choices=[*STACKS, *(f"{st}+uvloop" for st in STACKS)],
        help="server stack (repeatable; default: served and bare)",
    )
    ap.add_argument("--samples", type=int, default=None, help="timed calls of each kind")
    ap.add_argument("--block", type=int, default=100, help="calls per alternating block")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("--sync-writes", action="store_true", help="fsync every SQLite commit")
    ap.add_argument("--server-uvloop", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for the 1-minute load average to fall to --max-load",
    )
    ap.add_argument("--max-load", type=float, default=1.0)
    # The child half (started by the parent).
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.serve:
        run_child((ns.stack or ["served"])[0], ns.data_dir, ns.sync_writes, ns.server_uvloop)
        return 0
    if ns.inprocess:
        ns.default_output = RESULTS_INPROCESS
    output = output_of(ns)
    if ns.markdown:
        print(markdown(read_result(output or ns.default_output)))
        return 0
    ROUNDS["n"] = rounds_of(ns)
    out = Out()

    async def go() -> dict[str, Any]:
        if ns.wait_quiet:
            await wait_quiet(out, ns.max_load, ns.wait_quiet)
        return await run_all(ns, out)

    res = asyncio.run(go())
    report(out, res)
    write_result(out, output, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
