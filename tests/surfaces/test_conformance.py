"""Every case of the conformance table (``cases.py``) on every surface: the same calls with the
same inputs give the outcome the table says — the reason code of a refusal, the reply's status,
revision and snapshot fields — and the one the embedded engine gives.

The surfaces are started once for the module, on SQLite (the store contract and the engine
suites cover PostgreSQL): the embedded engine in this process; one real ``agenttx serve
--http-addr`` for gRPC (a raw stub, and our async client), ``/v1``, MCP over streamable HTTP
and the CLI (``--server``); one real ``agenttx mcp`` subprocess for MCP over stdio. Each has
the same tools loaded (``compensation_tools``, ``undo_outcome_tools``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from mcp import Client

import agenttx
import compensation_tools
import undo_outcome_tools
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import http_base, start_http_server
from mcp_harness import stdio_client
from surfaces.cases import CASES, DISAGREES, LACKS, SURFACES, Call, Case
from surfaces.drivers import CliDriver, Driver, GrpcDriver, HttpDriver, McpDriver, ServiceDriver

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOOL_MODULES = ("compensation_tools", "undo_outcome_tools")


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
    tools = [f for module in TOOL_MODULES for f in ("--tools", module)]
    async with contextlib.AsyncExitStack() as stack:
        # The server starts (a subprocess importing everything) while the rest is set up.
        starting = asyncio.create_task(
            asyncio.to_thread(start_http_server, root / "served", *tools, "--mcp-effect-tools")
        )
        engine = await agenttx.Engine.open(
            f"sqlite:///{root / 'embedded.db'}",
            fs_root=root / "embedded-files",
            outbox_path=root / "embedded-outbox.jsonl",
            tools=[*compensation_tools.TOOLS, *undo_outcome_tools.TOOLS],
        )
        stack.push_async_callback(engine.close)
        stdio = await stack.enter_async_context(
            held(stdio_client(root / "stdio", "auto", *tools, "--effect-tools"))
        )
        server = await starting
        stack.callback(lambda: server.terminate() == 0 or server.kill())
        base = http_base(server)
        channel = grpc.aio.insecure_channel(server.address)
        stack.push_async_callback(channel.close)
        client = AsyncAgentTxClient(server.address, retry=RetryPolicy(max_attempts=1), timeout=30)
        stack.push_async_callback(client.close)
        mcp_http = await stack.enter_async_context(
            held(Client(base + "/mcp", read_timeout_seconds=60))
        )
        yield {
            "embedded": ServiceDriver("embedded", engine),
            "client": ServiceDriver("client", client),
            "grpc": GrpcDriver(pb_grpc.AgentTxServiceStub(channel)),
            "http": HttpDriver(base),
            "mcp-stdio": McpDriver("mcp-stdio", stdio),
            "mcp-http": McpDriver("mcp-http", mcp_http),
            "cli": CliDriver(server.address),
        }


def filled(value: Any, bound: dict[str, Any]) -> Any:
    """``value`` with each placeholder (``$tx``, …) replaced by what the case bound to it."""
    if isinstance(value, str) and value.startswith("$"):
        return bound[value[1:]]
    if isinstance(value, dict):
        return {k: filled(v, bound) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, bound) for v in value]
    return value


# What a call's reply binds for the calls after it: placeholder → the reply's field.
BINDS = {
    "begin": ("tx", "transaction_id"),
    "preview_commit": ("receipt", "receipt_id"),
    "compensate": ("compensation", "transaction_id"),
    "list_effects": ("effect", "effects[].effect_id"),
}


async def run(case: Case, driver: Driver, scratch: Path) -> dict[str, Any]:
    """Make the case's calls through ``driver``; the last one's outcome, as the table says
    it (``Case.expected``)."""
    scratch.mkdir()
    (scratch / "provider").write_text("happened")
    bound: dict[str, Any] = {"log": str(scratch / "undone.jsonl"), "dir": str(scratch)}

    async def make(c: Call) -> Any:
        outcome = await driver.call(c.operation, **filled(c.inputs, bound))
        if outcome.ok and c.operation in BINDS:
            name, path = BINDS[c.operation]
            value = outcome.view((path,))["fields"][path]
            bound[name] = value[0] if isinstance(value, list) else value
        return outcome

    for c in case.setup:
        outcome = await make(c)
        assert outcome.ok, (driver.name, c, outcome)
    return (await make(case.call)).view(case.fields)  # type: ignore[no-any-return]


def _params() -> list[Any]:
    params = []
    for case in CASES:
        for surface in SURFACES:
            if (surface, case.call.operation) in LACKS:
                continue  # test_a_surface_lacks_what_the_table_says checks it is absent
            why = DISAGREES.get((surface, case.id))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            params.append(pytest.param(case, surface, id=f"{case.id}-{surface}", marks=marks))
    return params


_embedded: dict[str, dict[str, Any]] = {}  # case id → the engine's outcome, run once


@pytest.mark.parametrize(("case", "surface"), _params())
async def test_each_surface_gives_the_engines_outcome(
    case: Case, surface: str, drivers: dict[str, Driver], tmp_path: Path
) -> None:
    if case.id not in _embedded:
        _embedded[case.id] = await run(case, drivers["embedded"], tmp_path / "embedded")
    assert _embedded[case.id] == case.expected, "the engine itself disagrees with the table"
    if surface != "embedded":
        assert await run(case, drivers[surface], tmp_path / surface) == _embedded[case.id]


@pytest.mark.parametrize(("surface", "operation"), list(LACKS), ids=[f"{s}-{o}" for s, o in LACKS])
async def test_a_surface_lacks_what_the_table_says(
    surface: str, operation: str, drivers: dict[str, Driver]
) -> None:
    assert not await drivers[surface].offers(operation), LACKS[surface, operation]
    assert await drivers["embedded"].offers(operation)


async def test_the_table_covers_every_operation_of_the_contract(
    drivers: dict[str, Driver],
) -> None:
    operations = {name for name in vars(agenttx.TransactionService) if not name.startswith("_")}
    assert operations <= {case.call.operation for case in CASES}
    for surface, driver in drivers.items():
        for operation in sorted(operations):
            if (surface, operation) not in LACKS:
                assert await driver.offers(operation), (surface, operation)
