"""``TransactionService``: the operations the engine offers its callers, as one typed contract.

Both ``agenttx.Engine`` (in-process) and ``agenttx.client.AsyncAgentTxClient`` (a remote
server) satisfy it — mypy checks both in ``agenttx.api.conformance`` — so code written
against it fronts the local engine or a server alike, and a decorator of it (the tracing
wrapper, ``agenttx.api.tracing``) wraps either.

The contract holds what the two offer with the same meaning and the same request and reply
types. Each side may take more (the engine's ``caller``, ``progress`` and page sizes; the
client's ``request_id=None``); what they do not share is left out, with why, in
docs/architecture.md ("The service contract").

A bottom-layer module: it names plain values only (``types``, ``receipts``, ``audit``), never
the engine or the client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agenttx.audit import AuditVerification
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.types import (
    BeginResult,
    CommitResult,
    CompensationPlan,
    CompensationResult,
    EffectInfo,
    EffectPage,
    FoundTransaction,
    ReconcileResult,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    TransactionInfo,
    UndoResult,
)


class TransactionService(Protocol):
    """Every operation the engine and the client share: the lifecycle, approval, undo,
    outcomes, compensation, the audit chain and the outbox."""

    # -- the lifecycle ------------------------------------------------------------------------

    async def begin(
        self,
        agent_id: str = ...,
        metadata: Mapping[str, str] | None = ...,
        policy: RollbackPolicy | Mapping[str, Any] | None = ...,
        *,
        isolation: str = ...,
        labels: Sequence[str] = ...,
        request_id: str = ...,
        principal: str = ...,
        mode: str = ...,
    ) -> BeginResult: ...

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = ...,
        raw_context: str = ...,
        *,
        request_id: str = ...,
        dry_run: bool = ...,
    ) -> StepResult: ...

    async def commit(
        self,
        transaction_id: str,
        *,
        request_id: str = ...,
        expected_revision: int | None = ...,
        receipt_id: str = ...,
    ) -> CommitResult: ...

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = ...,
        reason: str = ...,
        *,
        request_id: str = ...,
    ) -> RollbackResult: ...

    async def get_transaction(self, transaction_id: str) -> TransactionInfo: ...

    async def find_transaction(
        self, *, receipt_id: str = ..., request_id: str = ...
    ) -> FoundTransaction: ...

    # -- approval of a commit -----------------------------------------------------------------

    async def preview_commit(self, transaction_id: str) -> Preview: ...

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, *, principal: str, roles: Sequence[str] = ...
    ) -> Approval: ...

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        *,
        principal: str,
        roles: Sequence[str] = ...,
    ) -> Refusal: ...

    # -- undo and redo of the last step -------------------------------------------------------

    async def undo_step(self, transaction_id: str, *, request_id: str = ...) -> UndoResult: ...

    async def redo_step(self, transaction_id: str, *, request_id: str = ...) -> UndoResult: ...

    # -- unknown outcomes ---------------------------------------------------------------------

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult: ...

    async def resolve_step(
        self,
        transaction_id: str,
        step_id: int,
        outcome: str,
        *,
        output: Any = ...,
        reason: str = ...,
    ) -> ReconcileResult: ...

    # -- compensation of a committed transaction ----------------------------------------------

    async def compensate(
        self, transaction_id: str, reason: str = ..., *, principal: str = ...
    ) -> CompensationResult: ...

    async def compensation_plan(self, transaction_id: str) -> CompensationPlan: ...

    async def approve_compensation(
        self, transaction_id: str, principal: str, roles: Sequence[str] = ...
    ) -> RollbackResult: ...

    async def refuse_compensation(
        self,
        transaction_id: str,
        reason: str,
        principal: str = ...,
        roles: Sequence[str] = ...,
    ) -> RollbackResult: ...

    # -- the audit chain and the outbox -------------------------------------------------------

    async def verify_audit(self, transaction_id: str) -> AuditVerification: ...

    async def list_effects(
        self, *, statuses: Sequence[str] = ..., transaction_id: str = ..., after_id: int = ...
    ) -> EffectPage: ...

    async def retry_effect(self, effect_id: int) -> EffectInfo: ...
