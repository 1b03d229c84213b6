"""This test's engine behind a started gRPC server, reached through a plain generated stub.

The suites that check what the wire carries (status codes, limits, structured refusals) talk to
the server as any gRPC client would: ``Served`` holds the engine, the server's address, an
insecure channel and the generated stub, plus our own async client for the tests that compare
what it rebuilds. Fixtures (registered by ``pytest_plugins = ["served_engine"]``):

- ``serve``: ``await serve(**engine_kwargs)`` opens an engine on this test's store (both
  stores, through ``open_engine``), serves it and returns its ``Served``;
- ``s``: ``await serve()`` with the defaults;
- ``target``: only the address, of the ``engine`` fixture's engine behind a started server.

Invariant: every server, channel and client made for a test is closed when the test ends.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

import agenttx
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving


class Served:
    """An engine behind a started server, a plain generated stub and our async client."""

    def __init__(self, engine: agenttx.Engine, target: str) -> None:
        self.engine = engine
        self.target = target
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = pb_grpc.AgentTxServiceStub(self.channel)
        self._client: AsyncAgentTxClient | None = None  # made on first use; most tests never do

    @property
    def client(self) -> AsyncAgentTxClient:
        """Our async client on the same server; one attempt, so a refusal surfaces at once."""
        if self._client is None:
            self._client = AsyncAgentTxClient(
                self.target, retry=RetryPolicy(max_attempts=1), timeout=10
            )
        return self._client

    async def begin(self, **fields: Any) -> str:
        reply = await self.stub.BeginTransaction(pb.BeginTransactionRequest(**fields))
        return str(reply.transaction_id)

    async def step(self, tx: str, step_id: int, tool: str, args: Any = None, **kw: Any) -> Any:
        return await self.stub.ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=tx,
                step_id=step_id,
                tool_name=tool,
                arguments_json=json.dumps(args) if args is not None else "",
                **kw,
            )
        )

    async def get(self, tx: str) -> Any:
        return await self.stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        await self.channel.close()


@pytest.fixture
async def serve(open_engine: Any) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """``await serve(**engine_kwargs)``: an engine behind a started server, and a stub."""
    async with contextlib.AsyncExitStack() as servers:
        served: list[Served] = []

        async def factory(**kwargs: Any) -> Served:
            engine = await open_engine(**kwargs)
            s = Served(engine, await servers.enter_async_context(serving(engine)))
            served.append(s)
            return s

        yield factory
        # Channels and clients first: the servers stop when the exit stack unwinds.
        for s in served:
            await s.close()


@pytest.fixture
async def s(serve: Callable[..., Awaitable[Served]]) -> Served:
    return await serve()


@pytest.fixture
async def target(engine: agenttx.Engine) -> AsyncIterator[str]:
    async with serving(engine) as address:
        yield address
