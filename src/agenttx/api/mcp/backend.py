"""What the MCP tools call: the embedded ``Engine``, or a running ``agenttx serve`` over gRPC
through our async client. Both give the same result types (``agenttx.types``) and raise the
same errors (``agenttx.errors``), so the adapter above them has one code path.

Listings differ between the two (the engine returns full views, the client summaries), so
``list_transactions`` and ``list_tools`` return the wire fields as plain dicts.

Only the embedded engine can relay progress and cancel a running tool: the gRPC protocol has
neither (a step cancelled over ``--server`` still runs to its end on the server).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agenttx.tools.context import ProgressSink
from agenttx.types import BeginResult, CommitResult, RollbackResult, StepResult, TransactionInfo

if TYPE_CHECKING:
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine


class Backend(Protocol):
    """The service calls of the MCP tools; each raises an ``AgentTxError`` for a refused call."""

    # True iff progress is relayed and cancel_step can stop a running tool.
    embedded: bool

    async def begin(self, agent_id: str, metadata: dict[str, str]) -> BeginResult: ...

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool: str,
        arguments: Any,
        raw_context: str,
        progress: ProgressSink | None,
    ) -> StepResult: ...

    async def commit(self, transaction_id: str) -> CommitResult: ...

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult: ...

    async def get_transaction(self, transaction_id: str) -> TransactionInfo: ...

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]: ...

    async def list_tools(self) -> list[dict[str, Any]]: ...

    def cancel_step(self, transaction_id: str, step_id: int) -> bool: ...


class EngineBackend:
    """The engine in this process (``agenttx mcp``, ``agenttx serve --http-addr``)."""

    embedded = True

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def begin(self, agent_id: str, metadata: dict[str, str]) -> BeginResult:
        return await self.engine.begin(agent_id=agent_id, metadata=metadata)

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool: str,
        arguments: Any,
        raw_context: str,
        progress: ProgressSink | None,
    ) -> StepResult:
        return await self.engine.execute_step(
            transaction_id, step_id, tool, arguments, raw_context, progress=progress
        )

    async def commit(self, transaction_id: str) -> CommitResult:
        return await self.engine.commit(transaction_id)

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult:
        return await self.engine.rollback(transaction_id, to_step, reason)

    async def get_transaction(self, transaction_id: str) -> TransactionInfo:
        return await self.engine.get_transaction(transaction_id)

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.engine.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id or None,
            page_size=page_size,
            page_token=page_token,
        )
        rows = [
            _summary(
                t.transaction_id,
                t.status.value,
                t.agent_id,
                t.next_step_id,
                t.revision,
                t.labels,
                t.created_at,
                t.updated_at,
                t.abort_reason,
            )
            for t in page.transactions
        ]
        return rows, page.next_page_token

    async def list_tools(self) -> list[dict[str, Any]]:
        return self.engine.list_tools()

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        return self.engine.cancel_step(transaction_id, step_id)


class ClientBackend:
    """A running AgentTx reached over gRPC (``agenttx mcp --server HOST:PORT``)."""

    embedded = False

    def __init__(self, client: AsyncAgentTxClient) -> None:
        self.client = client

    async def begin(self, agent_id: str, metadata: dict[str, str]) -> BeginResult:
        return await self.client.begin(agent_id=agent_id, metadata=metadata)

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool: str,
        arguments: Any,
        raw_context: str,
        progress: ProgressSink | None,
    ) -> StepResult:
        # The client sends a request id, so a step whose reply was lost is retried safely.
        return await self.client.execute_step(transaction_id, step_id, tool, arguments, raw_context)

    async def commit(self, transaction_id: str) -> CommitResult:
        return await self.client.commit(transaction_id)

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult:
        return await self.client.rollback(transaction_id, to_step, reason)

    async def get_transaction(self, transaction_id: str) -> TransactionInfo:
        return await self.client.get_transaction(transaction_id)

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.client.list_transactions(
            statuses=statuses, agent_id=agent_id, page_size=page_size, page_token=page_token
        )
        rows = [
            _summary(
                t.transaction_id,
                t.status.value,
                t.agent_id,
                t.next_step_id,
                t.revision,
                t.labels,
                t.created_at,
                t.updated_at,
                t.abort_reason,
            )
            for t in page.transactions
        ]
        return rows, page.next_page_token

    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "description": t.description,
                "effect": t.effect,
                "timeout_s": t.timeout_s,
                "idempotent": t.idempotent,
                "compensation": t.compensation,
                "dry_run": t.dry_run,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
                "examples": t.examples,
            }
            for t in await self.client.list_tools()
        ]

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        return False


def _summary(
    transaction_id: str,
    status: str,
    agent_id: str,
    next_step_id: int,
    revision: int,
    labels: list[str],
    created_at: float,
    updated_at: float,
    abort_reason: str,
) -> dict[str, Any]:
    """The fields of the wire's ``TransactionSummary``."""
    return {
        "transaction_id": transaction_id,
        "status": status,
        "agent_id": agent_id,
        "next_step_id": next_step_id,
        "revision": revision,
        "labels": list(labels),
        "created_at": created_at,
        "updated_at": updated_at,
        "abort_reason": abort_reason,
    }
