"""The surfaces every conformance module runs its cases on, started once per module (each test
file is one worker's under ``--dist loadfile``), on SQLite (the store contract and the engine
suites cover PostgreSQL): the embedded engine in this process; one real ``agenttx serve
--http-addr`` for gRPC (a raw stub, our async client and our blocking one), ``/v1``, MCP over
streamable HTTP and the CLI (``--server``); one real ``agenttx mcp`` subprocess for MCP over
stdio on its own engine, and one ``agenttx mcp --server`` in front of the served engine (the
MCP tools over our client, in the older protocol era). Each engine has the same tools loaded
(``compensation_tools``, ``undo_outcome_tools``, ``undo_tools``, ``psp`` with its provider in
this process, ``leaky_tools``) and the same safety policy (``POLICY``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from mcp import Client

import agenttx
import compensation_tools
import leaky_tools
import plan_tools
import psp
import undo_outcome_tools
import undo_tools
from agenttx.client import AgentTxClient, AsyncAgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import http_base, start_http_server
from mcp_harness import stdio_client
from surfaces.drivers import CliDriver, Driver, GrpcDriver, HttpDriver, McpDriver, ServiceDriver

TOOL_MODULES = (
    "compensation_tools",
    "undo_outcome_tools",
    "undo_tools",
    "psp",
    "leaky_tools",
    "plan_tools",
)
# The safety policy every engine runs under (docs/safety.md), for the cases of its rules: no
# other case runs a step past 6 or the tool it holds for approval.
POLICY = '[approval]\ntools = ["kv.delete"]\n\n[limits]\nmax_steps = 6\n'


@contextlib.asynccontextmanager
async def held(context: contextlib.AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
    """``context`` entered and exited in one task of its own: an MCP session's anyio cancel
    scopes must be left by the task that entered them, and a module fixture's set-up and
    teardown run in two."""
    entered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def keep() -> None:
        try:
            async with context as value:
                entered.set_result(value)
                await stop.wait()
        except BaseException as exc:
            if not entered.done():
                entered.set_exception(exc)
            raise

    task = asyncio.create_task(keep())
    try:
        yield await entered
    finally:
        stop.set()
        await task


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def drivers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Driver]]:
    root = tmp_path_factory.mktemp("surfaces")
    policy = root / "policy.toml"
    policy.write_text(POLICY)
    flags = [f for module in TOOL_MODULES for f in ("--tools", module)]
    flags += ["--policy", str(policy)]
    async with contextlib.AsyncExitStack() as stack:
        # The payment provider the ``pay.*`` tools of ``psp`` call, on loopback; started
        # first, so the subprocesses inherit its address (``PSP_ADDR``).
        provider = psp.PaymentProvider().start()
        stack.callback(provider.stop)
        # The server starts (a subprocess importing everything) while the rest is set up.
        starting = asyncio.create_task(
            asyncio.to_thread(start_http_server, root / "served", *flags, "--mcp-effect-tools")
        )
        engine = await agenttx.Engine.open(
            f"sqlite:///{root / 'embedded.db'}",
            fs_root=root / "embedded-files",
            outbox_path=root / "embedded-outbox.jsonl",
            tools=[
                *compensation_tools.TOOLS,
                *undo_outcome_tools.TOOLS,
                *undo_tools.TOOLS,
                *psp.TOOLS,
                *leaky_tools.TOOLS,
                *plan_tools.TOOLS,
            ],
            safety_policy=policy,
        )
        stack.push_async_callback(engine.close)
        stdio = await stack.enter_async_context(
            held(stdio_client(root / "stdio", "auto", *flags, "--mcp-effect-tools"))
        )
        server = await starting
        stack.callback(lambda: server.terminate() == 0 or server.kill())
        base = http_base(server)
        channel = grpc.aio.insecure_channel(server.address)
        stack.push_async_callback(channel.close)
        once = RetryPolicy(max_attempts=1)
        client = AsyncAgentTxClient(server.address, retry=once, timeout=30)
        stack.push_async_callback(client.close)
        blocking = AgentTxClient(server.address, retry=once, timeout=30)
        stack.callback(blocking.close)
        mcp_http = await stack.enter_async_context(
            held(Client(base + "/mcp", read_timeout_seconds=60))
        )
        remote = await stack.enter_async_context(
            held(
                stdio_client(
                    root / "unused", "legacy", "--server", server.address, "--mcp-effect-tools"
                )
            )
        )
        drivers: dict[str, Driver] = {
            "embedded": ServiceDriver("embedded", engine),
            "client": ServiceDriver("client", client),
            "sync-client": ServiceDriver("sync-client", blocking, blocking=True),
            "grpc": GrpcDriver(pb_grpc.AgentTxServiceStub(channel)),
            "http": HttpDriver(base),
            "mcp-stdio": McpDriver("mcp-stdio", stdio),
            "mcp-http": McpDriver("mcp-http", mcp_http),
            "mcp-remote": McpDriver("mcp-remote", remote),
            "cli": CliDriver(server.address),
        }
        # The store behind each surface's engine (``agenttx serve`` and ``agenttx mcp`` keep
        # theirs in their data directory), for the cases that edit one behind its back.
        stores = {"embedded": root / "embedded.db", "mcp-stdio": root / "stdio" / "agenttx.db"}
        for name, driver in drivers.items():
            store = stores.get(name, root / "served" / "agenttx.db")
            assert store.is_file(), (name, store)
            driver.store_url = f"sqlite:///{store}"
        yield drivers
