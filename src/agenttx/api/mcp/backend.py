"""What the MCP tools call: the embedded ``Engine``, or a running ``agenttx serve`` over gRPC
through our async client. Both give the same result types (``agenttx.types``) and raise the
same errors (``agenttx.errors``), so the adapter above them has one code path.

Listings differ between the two (the engine returns full views, the client summaries), so
``list_transactions`` and ``list_tools`` return the wire fields as plain dicts.

Only the embedded engine can relay progress and cancel a running tool: the gRPC protocol has
neither (a step cancelled over ``--server`` still runs to its end on the server).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agenttx.api.mcp.compensation import CompensationService
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.tools.context import ProgressSink
from agenttx.types import (
    BeginResult,
    Caller,
    CommitResult,
    CompensationPlan,
    CompensationResult,
    ReconcileResult,
    RollbackResult,
    StepResult,
    TransactionInfo,
    UndoResult,
)

if TYPE_CHECKING:
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine


class Backend(Protocol):
    """The service calls of the MCP tools; each raises an ``AgentTxError`` for a refused call."""

    # True iff progress is relayed and cancel_step can stop a running tool.
    embedded: bool
    # compensate, compensation_plan, approve_compensation, refuse_compensation
    # (``compensation.py``).
    compensation: CompensationService

    async def begin(
        self, agent_id: str, metadata: dict[str, str], principal: str = "", mode: str = ""
    ) -> BeginResult: ...

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool: str,
        arguments: Any,
        raw_context: str,
        progress: ProgressSink | None,
    ) -> StepResult: ...

    async def dry_run_step(
        self, transaction_id: str, step_id: int, tool: str, arguments: Any, raw_context: str
    ) -> StepResult: ...

    async def undo_step(self, transaction_id: str) -> UndoResult: ...

    async def redo_step(self, transaction_id: str) -> UndoResult: ...

    async def commit(
        self, transaction_id: str, expected_revision: int | None = None, receipt_id: str = ""
    ) -> CommitResult: ...

    async def preview_commit(self, transaction_id: str) -> Preview: ...

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, principal: str, roles: Sequence[str]
    ) -> Approval: ...

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        principal: str,
        roles: Sequence[str],
    ) -> Refusal: ...

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult: ...

    async def get_transaction(
        self, transaction_id: str, recent: int | None = None
    ) -> TransactionInfo:
        """``recent``: the newest that many attempts and no edges (``earlier_steps_omitted``
        counts the rest); None: the whole history."""
        ...

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult: ...

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]: ...

    async def list_tools(self) -> list[dict[str, Any]]: ...

    def cancel_step(self, transaction_id: str, step_id: int) -> bool: ...

    def as_caller(self, caller: Caller) -> Backend:
        """This backend acting for ``caller`` (an authenticated HTTP request's)."""
        ...


class EngineBackend:
    """The engine in this process (``agenttx mcp``, ``agenttx serve --http-addr``), acting for
    ``caller`` (None: the local operator, as embedded use)."""

    embedded = True

    def __init__(self, engine: Engine, caller: Caller | None = None) -> None:
        self.engine = engine
        self.caller = caller  # passed with every engine call: it scopes them (core.access)
        self.compensation: CompensationService = _CallerCompensation(engine, caller)

    def as_caller(self, caller: Caller) -> EngineBackend:
        return EngineBackend(self.engine, caller)

    async def begin(
        self, agent_id: str, metadata: dict[str, str], principal: str = "", mode: str = ""
    ) -> BeginResult:
        return await self.engine.begin(
            agent_id=agent_id,
            metadata=metadata,
            principal=principal,
            mode=mode,
            caller=self.caller,
        )

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
            transaction_id,
            step_id,
            tool,
            arguments,
            raw_context,
            progress=progress,
            caller=self.caller,
        )

    async def dry_run_step(
        self, transaction_id: str, step_id: int, tool: str, arguments: Any, raw_context: str
    ) -> StepResult:
        return await self.engine.execute_step(
            transaction_id, step_id, tool, arguments, raw_context, dry_run=True, caller=self.caller
        )

    async def undo_step(self, transaction_id: str) -> UndoResult:
        return await self.engine.undo_step(transaction_id, caller=self.caller)

    async def redo_step(self, transaction_id: str) -> UndoResult:
        return await self.engine.redo_step(transaction_id, caller=self.caller)

    async def commit(
        self, transaction_id: str, expected_revision: int | None = None, receipt_id: str = ""
    ) -> CommitResult:
        return await self.engine.commit(
            transaction_id,
            expected_revision=expected_revision,
            receipt_id=receipt_id,
            caller=self.caller,
        )

    async def preview_commit(self, transaction_id: str) -> Preview:
        return await self.engine.preview_commit(transaction_id, caller=self.caller)

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, principal: str, roles: Sequence[str]
    ) -> Approval:
        return await self.engine.approve_commit(
            transaction_id, receipt_id, principal=principal, roles=roles, caller=self.caller
        )

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        principal: str,
        roles: Sequence[str],
    ) -> Refusal:
        return await self.engine.refuse_commit(
            transaction_id,
            receipt_id,
            reason,
            principal=principal,
            roles=roles,
            caller=self.caller,
        )

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult:
        return await self.engine.rollback(transaction_id, to_step, reason, caller=self.caller)

    async def get_transaction(
        self, transaction_id: str, recent: int | None = None
    ) -> TransactionInfo:
        return await self.engine.get_transaction(transaction_id, recent=recent, caller=self.caller)

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult:
        return await self.engine.reconcile_step(transaction_id, step_id, caller=self.caller)

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.engine.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id or None,
            page_size=page_size,
            page_token=page_token,
            caller=self.caller,
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

    async def list_tools(self) -> list[dict[str, Any]]:
        return self.engine.list_tools()

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        return self.engine.cancel_step(transaction_id, step_id, caller=self.caller)


class ClientBackend:
    """A running AgentTx reached over gRPC (``agenttx mcp --server HOST:PORT``)."""

    embedded = False

    def __init__(self, client: AsyncAgentTxClient) -> None:
        self.client = client
        self.compensation: CompensationService = client

    def as_caller(self, caller: Caller) -> ClientBackend:
        # Never reached: a ClientBackend serves stdio, where no request carries a key. The
        # server it calls knows this process by the client's own key.
        return self

    async def begin(
        self, agent_id: str, metadata: dict[str, str], principal: str = "", mode: str = ""
    ) -> BeginResult:
        return await self.client.begin(
            agent_id=agent_id, metadata=metadata, principal=principal, mode=mode
        )

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

    async def dry_run_step(
        self, transaction_id: str, step_id: int, tool: str, arguments: Any, raw_context: str
    ) -> StepResult:
        return await self.client.execute_step(
            transaction_id, step_id, tool, arguments, raw_context, dry_run=True
        )

    async def undo_step(self, transaction_id: str) -> UndoResult:
        return await self.client.undo_step(transaction_id)

    async def redo_step(self, transaction_id: str) -> UndoResult:
        return await self.client.redo_step(transaction_id)

    async def commit(
        self, transaction_id: str, expected_revision: int | None = None, receipt_id: str = ""
    ) -> CommitResult:
        return await self.client.commit(
            transaction_id, expected_revision=expected_revision, receipt_id=receipt_id
        )

    async def preview_commit(self, transaction_id: str) -> Preview:
        return await self.client.preview_commit(transaction_id)

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, principal: str, roles: Sequence[str]
    ) -> Approval:
        return await self.client.approve_commit(
            transaction_id, receipt_id, principal=principal, roles=roles
        )

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        principal: str,
        roles: Sequence[str],
    ) -> Refusal:
        return await self.client.refuse_commit(
            transaction_id, receipt_id, reason, principal=principal, roles=roles
        )

    async def rollback(
        self, transaction_id: str, to_step: int | None, reason: str
    ) -> RollbackResult:
        return await self.client.rollback(transaction_id, to_step, reason)

    async def get_transaction(
        self, transaction_id: str, recent: int | None = None
    ) -> TransactionInfo:
        # GetTransaction has no bound: the whole reply, bounded here as the engine would.
        info = await self.client.get_transaction(transaction_id)
        if recent is None:
            return info
        omitted = max(0, len(info.steps) - recent)
        return dataclasses.replace(
            info, steps=info.steps[omitted:], edges=[], edge_kinds=[], earlier_steps_omitted=omitted
        )

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult:
        return await self.client.reconcile_step(transaction_id, step_id)

    async def list_transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.client.list_transactions(
            statuses=statuses, agent_id=agent_id, page_size=page_size, page_token=page_token
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

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
                "dry_run_reached": t.dry_run_reached,
                "undoable": t.undoable,
                "reconcilable": t.reconcilable,
                "input_schema": t.input_schema,
                "output_schema": t.output_schema,
                "examples": t.examples,
                **({"server": t.server} if t.server else {}),
            }
            for t in await self.client.list_tools()
        ]

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        return False


def _summary(t: Any) -> dict[str, Any]:
    """The fields of the wire's ``TransactionSummary`` of a listed transaction (the engine's
    ``TransactionInfo`` or the client's summary: both have them)."""
    return {
        "transaction_id": t.transaction_id,
        "status": t.status.value,
        "agent_id": t.agent_id,
        "next_step_id": t.next_step_id,
        "revision": t.revision,
        "labels": list(t.labels),
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "abort_reason": t.abort_reason,
    }


class _CallerCompensation:
    """The engine's four compensation calls, made as the backend's caller."""

    def __init__(self, engine: Engine, caller: Caller | None) -> None:
        self.engine = engine
        self.caller = caller

    async def compensate(
        self, transaction_id: str, reason: str = "", *, principal: str = ""
    ) -> CompensationResult:
        return await self.engine.compensate(
            transaction_id, reason, principal=principal, caller=self.caller
        )

    async def compensation_plan(self, transaction_id: str) -> CompensationPlan:
        return await self.engine.compensation_plan(transaction_id, caller=self.caller)

    async def approve_compensation(
        self, transaction_id: str, principal: str, roles: Sequence[str] = ()
    ) -> RollbackResult:
        return await self.engine.approve_compensation(
            transaction_id, principal, roles, caller=self.caller
        )

    async def refuse_compensation(
        self, transaction_id: str, reason: str, principal: str = "", roles: Sequence[str] = ()
    ) -> RollbackResult:
        return await self.engine.refuse_compensation(
            transaction_id, reason, principal, roles, caller=self.caller
        )
