"""What mypy checks (never run): the engine and the async client both satisfy
``TransactionService`` (``agenttx.service``), and so does the tracing wrapper of the engine;
the engine and its tracing wrapper satisfy what the MCP tools call of a local engine
(``agenttx.api.mcp.served.LocalEngine``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenttx.api.mcp.served import LocalEngine
    from agenttx.api.tracing import TracedEngine
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine
    from agenttx.service import TransactionService


def _conforms(engine: Engine, client: AsyncAgentTxClient, traced: TracedEngine) -> None:
    service: TransactionService = engine
    service = client
    service = traced
    local: LocalEngine = engine
    local = traced
    del service, local
