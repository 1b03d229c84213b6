"""What mypy checks (never run): the engine and the async client both satisfy
``TransactionService`` (``agenttx.service``), and so does the tracing wrapper of the engine;
so does either bound to the caller an MCP tool acts for (``agenttx.api.mcp.served.ActingFor``),
which is also the live step the tools cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenttx.api.mcp.served import ActingFor, LiveSteps
    from agenttx.api.tracing import TracedEngine
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine
    from agenttx.service import TransactionService


def _conforms(engine: Engine, client: AsyncAgentTxClient, traced: TracedEngine) -> None:
    service: TransactionService = engine
    service = client
    service = traced
    service = ActingFor(engine, None)
    service = ActingFor(traced, None)
    live: LiveSteps = ActingFor(engine, None)
    del service, live
