"""Surfaces benchmark: one ``kv.put`` step's latency through every surface as a user calls it.

Five surfaces, each against what a user runs (no benchmark code inside any server):

- ``embedded``: ``Engine.open`` on SQLite in this process, ``await engine.execute_step``.
- ``grpc``: our ``AsyncAgentTxClient`` against ``agenttx serve`` (its defaults: SQLite,
  ``sync_writes`` off, a log line per call on stderr, here into a file).
- ``http_v1``: ``POST /v1/transactions/{id}/steps`` on one keep-alive ``http.client``
  connection to the same ``agenttx serve``'s ``--http-addr``.
- ``mcp_http``: the ``mcp`` SDK's ``Client`` over streamable HTTP to that listener's ``/mcp``,
  tool ``run_step``.
- ``mcp_stdio``: the same client over stdio, the SDK starting ``agenttx mcp`` itself.

The servers are the ``agenttx`` script beside this interpreter, so under ``benchmarks.ab
--venv`` each side's own. All surfaces are open at once and measured in rotating blocks: a
block is one transaction of ``STEPS_PER_TX`` timed steps (begin and commit not timed) on one
surface, the next block on the next surface, the order shifted every rotation, so a change in
the shared machine's load touches every surface alike. The first rotation is warm-up.

Per surface: the round trip's p50/p95/p99 (µs), and CPU per step over the timed blocks: the
server process's (``/proc/<pid>/stat``, 10 ms ticks summed over all blocks) and this client
process's (``time.process_time``); for ``embedded`` the engine runs in the client process, so
its CPU is the client's. ``--rounds`` rounds, the one with the lowest p50 kept per surface.

    python -m benchmarks.surfaces            # full run, writes benchmarks/results/surfaces.json
    python -m benchmarks.surfaces --quick    # smoke run (< 1 min)
    python -m benchmarks.ab surfaces --bench-from current --venv --before 6d19024 --after HEAD
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

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
    stats_us,
    write_result,
)

STEPS_PER_TX = 50
SURFACES = ("embedded", "grpc", "http_v1", "mcp_http", "mcp_stdio")
CLOCK_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")


def proc_cpu_ns(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (every thread, exited ones too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK_NS


def kv_args(i: int) -> dict[str, Any]:
    return {"key": f"bench/{i % 64:04d}", "value": i}


# --------------------------------------------------------------------------- surfaces


class Surface(Protocol):
    """One way in: begin, one kv.put step, commit; ``server_pid`` is whose CPU is the server's
    (``None``: this process)."""

    name: str
    server_pid: int | None

    async def begin(self) -> str: ...

    async def step(self, tx: str, step_id: int, i: int) -> None: ...

    async def commit(self, tx: str) -> None: ...


class Embedded:
    name = "embedded"
    server_pid = None  # the engine runs in this process

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def begin(self) -> str:
        return str((await self.engine.begin(agent_id="bench")).transaction_id)

    async def step(self, tx: str, step_id: int, i: int) -> None:
        r = await self.engine.execute_step(tx, step_id, "kv.put", kv_args(i))
        assert r.status.name == "SUCCESS", r

    async def commit(self, tx: str) -> None:
        await self.engine.commit(tx)


class Grpc:
    name = "grpc"

    def __init__(self, client: Any, pid: int) -> None:
        self.client, self.server_pid = client, pid

    async def begin(self) -> str:
        return str((await self.client.begin(agent_id="bench")).transaction_id)

    async def step(self, tx: str, step_id: int, i: int) -> None:
        r = await self.client.execute_step(tx, step_id, "kv.put", kv_args(i))
        assert "SUCCESS" in str(r.status), r

    async def commit(self, tx: str) -> None:
        await self.client.commit(tx)


class HttpV1:
    """One keep-alive connection; http.client blocks the loop, which nothing else needs then."""

    name = "http_v1"

    def __init__(self, port: int, pid: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.server_pid = pid

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        self.conn.request("POST", path, data, {"content-type": "application/json"})
        reply = self.conn.getresponse()
        payload = reply.read()
        assert reply.status == 200, (reply.status, payload[:300])
        return dict(json.loads(payload))

    async def begin(self) -> str:
        return str(self.post("/v1/transactions", {"agent_id": "bench"})["transaction_id"])

    async def step(self, tx: str, step_id: int, i: int) -> None:
        body = {"step_id": step_id, "tool_name": "kv.put", "arguments": kv_args(i)}
        r = self.post(f"/v1/transactions/{tx}/steps", body)
        assert r["status"] == "SUCCESS", r

    async def commit(self, tx: str) -> None:
        self.post(f"/v1/transactions/{tx}/commit", {})


class Mcp:
    def __init__(self, name: str, client: Any, pid: int) -> None:
        self.name, self.client, self.server_pid = name, client, pid

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        r = await self.client.call_tool(tool, args)
        assert not r.is_error, r
        return dict(r.structured_content)

    async def begin(self) -> str:
        return str((await self.call("begin_transaction", {"agent_id": "bench"}))["transaction_id"])

    async def step(self, tx: str, step_id: int, i: int) -> None:
        args = {"transaction_id": tx, "step_id": step_id, "tool": "kv.put"}
        r = await self.call("run_step", {**args, "arguments": kv_args(i)})
        assert r["status"] == "SUCCESS", r

    async def commit(self, tx: str) -> None:
        await self.call("commit_transaction", {"transaction_id": tx})


# --------------------------------------------------------------------------- servers


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"agenttx exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise SystemExit(f"agenttx did not listen on {port} within 60 s")


@contextlib.contextmanager
def agenttx_serve(data_dir: Path) -> Any:
    """``agenttx serve`` with gRPC and HTTP (``/v1`` and ``/mcp``), its logs in a file."""
    grpc_port, http_port = free_port(), free_port()
    log = data_dir.parent / "serve.log"
    command = agenttx_command(
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen-addr",
        f"127.0.0.1:{grpc_port}",
        "--http-addr",
        f"127.0.0.1:{http_port}",
    )
    with log.open("ab") as err:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    try:
        wait_for_port(grpc_port, proc, log)
        wait_for_port(http_port, proc, log)
        yield proc.pid, grpc_port, http_port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def child_pid(marker: str) -> int:
    """The pid of this process's child whose command line holds ``marker``."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if ppid == me and marker in cmdline:
                return int(entry.name)
    raise SystemExit(f"no child process running {marker!r}")


@contextlib.asynccontextmanager
async def surfaces(tmp: Path) -> AsyncIterator[list[Surface]]:
    """Every surface, open, against fresh data directories."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from agenttx import Engine
    from agenttx.client import AsyncAgentTxClient

    async with contextlib.AsyncExitStack() as stack:
        data = tmp / "embedded"
        data.mkdir()
        engine = await Engine.open(f"sqlite:///{data / 'agenttx.db'}", fs_root=data / "files")
        stack.push_async_callback(engine.close)
        pid, grpc_port, http_port = stack.enter_context(agenttx_serve(tmp / "serve"))
        client = AsyncAgentTxClient(f"127.0.0.1:{grpc_port}")
        stack.push_async_callback(client.close)
        http_v1 = HttpV1(http_port, pid)
        stack.callback(http_v1.conn.close)
        mcp_http = await stack.enter_async_context(
            Client(f"http://127.0.0.1:{http_port}/mcp", mode="legacy", read_timeout_seconds=60)
        )
        # `exec` keeps the pid the agenttx process's; its log lines go to a file.
        mcp_command = " ".join(agenttx_command("mcp", "--data-dir", str(tmp / "mcp")))
        params = StdioServerParameters(
            command="/bin/sh",
            args=["-c", f"exec {mcp_command} 2>>{tmp / 'mcp.log'}"],
            env=dict(os.environ),
        )
        mcp_stdio = await stack.enter_async_context(
            Client(params, mode="legacy", read_timeout_seconds=60)
        )
        yield [
            Embedded(engine),
            Grpc(client, pid),
            http_v1,
            Mcp("mcp_http", mcp_http, pid),
            Mcp("mcp_stdio", mcp_stdio, child_pid(" mcp --data-dir ")),
        ]


# --------------------------------------------------------------------------- the run


async def one_round(tmp: Path, rotations: int, selected: list[str]) -> dict[str, Any]:
    """``rotations`` timed rotations (after one warm-up) over the selected surfaces."""
    async with surfaces(tmp) as every:
        chosen = [s for s in every if s.name in selected]
        samples: dict[str, list[int]] = {s.name: [] for s in chosen}
        server_ns = dict.fromkeys(samples, 0.0)
        client_ns = dict.fromkeys(samples, 0.0)
        i = 0
        for rotation in range(rotations + 1):
            shift = rotation % len(chosen)
            for surface in chosen[shift:] + chosen[:shift]:
                tx = await surface.begin()
                pid = surface.server_pid
                c0, s0 = time.process_time_ns(), proc_cpu_ns(pid) if pid else 0.0
                times: list[int] = []
                for step_id in range(1, STEPS_PER_TX + 1):
                    t0 = time.perf_counter_ns()
                    await surface.step(tx, step_id, i)
                    times.append(time.perf_counter_ns() - t0)
                    i += 1
                c1, s1 = time.process_time_ns(), proc_cpu_ns(pid) if pid else 0.0
                await surface.commit(tx)
                if rotation:  # the first rotation warms every surface up
                    samples[surface.name] += times
                    client_ns[surface.name] += c1 - c0
                    server_ns[surface.name] += (s1 - s0) if pid else c1 - c0
        result: dict[str, Any] = {}
        for name, got in samples.items():
            n = len(got)
            result[name] = {
                "latency_us": stats_us(got, extra=(95,)),
                "cpu_us_per_step": {
                    "server": round(server_ns[name] / n / 1e3, 1),
                    "client": round(client_ns[name] / n / 1e3, 1),
                },
            }
        return result


COLUMNS = ["surface", "p50 µs", "p95 µs", "p99 µs", "server CPU µs", "client CPU µs", "steps"]


def rows(res: dict[str, Any]) -> list[list[Any]]:
    out = []
    for name, r in res["surfaces"].items():
        lat, cpu = r["latency_us"], r["cpu_us_per_step"]
        out.append(
            [name, lat["p50"], lat["p95"], lat["p99"], cpu["server"], cpu["client"], lat["n"]]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS_DIR / "surfaces.json")
    ap.add_argument(
        "--only", action="append", choices=SURFACES, help="measure only this surface (repeatable)"
    )
    ap.add_argument("--rotations", type=int, default=None, help="timed rotations a round")
    ns = ap.parse_args(argv)
    out = Out()
    if ns.markdown:
        out.note(md_table(COLUMNS, rows(read_result(Path(ns.output or ns.default_output)))))
        return 0
    rotations = ns.rotations or (4 if ns.quick else 20)
    selected = list(ns.only or SURFACES)
    started = time.perf_counter()
    res: dict[str, Any] = {
        "machine": machine_info(),
        "quick": ns.quick,
        "steps_per_tx": STEPS_PER_TX,
        "rotations": rotations,
    }
    rounds: list[dict[str, Any]] = []
    for r in range(rounds_of(ns)):
        out.note(f"[dim]round {r + 1} …[/dim]")
        with scratch("surfaces") as tmp:
            rounds.append(asyncio.run(one_round(tmp, rotations, selected)))
    res["surfaces"] = {}
    for name in selected:
        best = best_round(
            [{**x[name]["latency_us"], "cpu": x[name]["cpu_us_per_step"]} for x in rounds]
        )
        cpu = best.pop("cpu")
        res["surfaces"][name] = {"latency_us": best, "cpu_us_per_step": cpu}
    finish_machine(res, started)
    out.table(f"one kv.put step per surface ({res['machine']['git']})", COLUMNS, rows(res))
    write_result(out, output_of(ns), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
