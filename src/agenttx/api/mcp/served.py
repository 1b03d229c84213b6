"""What the MCP tools call: ``TransactionService`` (``agenttx.service``), and the little beyond
it that is the MCP adapter's own.

Every operation goes through the contract (``Served.service``): the engine in this process
(``Engine``, or ``TracedEngine`` in front of it when traces are exported) bound to the
session's or the request's caller (``ActingFor``), or a running ``agenttx serve`` through
``AsyncAgentTxClient`` (``agenttx mcp --server``). Both give the same result types and raise
the same errors, so the tools have one code path. Beside it:

- ``live``: the embedded engine's hold on a running step, its progress relayed to the caller
  and its cancel. None over ``--server``: the gRPC protocol has neither (a step cancelled
  there still runs to its end on the server).
- ``listings``: the reads whose shapes differ between the engine and the client (the tools,
  a page of transactions, a bounded read of one, a page of effects), in one shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from google.protobuf.message import Message

from agenttx.api import effects_wire
from agenttx.api.operations import CallContext, Row
from agenttx.api.operations.replies import ALL_STRATEGIES
from agenttx.audit import AuditVerification
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.service import TransactionService
from agenttx.tools.context import ProgressSink
from agenttx.types import (
    BeginResult,
    Caller,
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
    TransactionPage,
    UndoResult,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    from agenttx.api.tracing import TracedEngine
    from agenttx.client import AsyncAgentTxClient
    from agenttx.core.engine import Engine

    # The engine in this process, unbound: each call takes the ``caller`` it is made for.
    LocalEngine: TypeAlias = Engine | TracedEngine


class LiveSteps(Protocol):
    """A step run by the engine in this process: ``progress`` gets its tool's
    ``report_progress`` calls, and ``cancel_step`` stops it (False iff it is not running
    here)."""

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
        progress: ProgressSink | None = ...,
    ) -> StepResult: ...

    def cancel_step(self, transaction_id: str, step_id: int) -> bool: ...


class Listings(Protocol):
    """The reads the two sides shape differently, in the wire's shape."""

    async def tools(self) -> list[dict[str, Any]]:
        """Every AgentTx tool as ``ListTools`` describes it."""
        ...

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        """A page of ``TransactionSummary`` fields, and the token of the next one."""
        ...

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        """The newest ``recent`` attempts and no edges (``earlier_steps_omitted`` counts the
        rest)."""
        ...

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        """A page of the outbox; ``page_size`` 0: the default."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Served:
    """What one MCP call is served by."""

    service: TransactionService  # every operation, made for ``caller``
    listings: Listings
    live: LiveSteps | None  # set iff the engine runs in this process
    # Who the calls act for (``core.access`` scopes by it): the session's local user or an
    # HTTP request's key owner; None: the process's own user, or over ``--server`` the key
    # the client presents.
    caller: Caller | None = None
    # The engine before it was bound to ``caller``, to serve another caller (``as_caller``).
    engine: LocalEngine | None = None

    async def send(self, row: Row, request: Message) -> Message:
        """Run ``row`` on ``request`` for ``caller`` (a tool served from its row alone,
        ``handlers.generic``): the engine in this process before it was bound, told the caller
        as gRPC and HTTP tell it; over ``--server`` the client's one generic call of the row's
        RPC."""
        if self.engine is None:
            client = cast("AsyncAgentTxClient", self.service)
            return await client.call(row.rpc, request)
        # MCP reads names (every strategy) and has no message limit, as HTTP.
        return await row.run(self.engine, request, CallContext(self.caller, ALL_STRATEGIES, None))

    def as_caller(self, caller: Caller) -> Served:
        """The same service acting for ``caller`` (an authenticated HTTP request's). Over
        ``--server`` it is this one: a stdio request carries no key, and the server knows
        this process by the client's."""
        return self if self.engine is None else embedded(self.engine, caller)


def embedded(engine: LocalEngine, caller: Caller | None = None) -> Served:
    """The engine in this process (``agenttx mcp``, ``agenttx serve --http-addr``) acting for
    ``caller`` (None: the local operator, as embedded use)."""
    bound = ActingFor(engine, caller)
    return Served(bound, _EngineListings(bound), bound, caller, engine)


def remote(client: AsyncAgentTxClient) -> Served:
    """A running AgentTx reached over gRPC (``agenttx mcp --server HOST:PORT``). The client
    sends a request id with each mutating call, so a step whose reply was lost is retried
    safely."""
    return Served(client, _ClientListings(client), None)


class ActingFor:
    """``engine``'s calls, each made for ``caller``: bound once, so no call of a tool can
    forget whom it acts for. A ``TransactionService`` and ``LiveSteps`` (mypy checks both in
    ``embedded``), with the engine's own reads the listings use; nothing else of the engine
    is reachable through it."""

    __slots__ = ("_caller", "_engine")

    def __init__(self, engine: LocalEngine, caller: Caller | None) -> None:
        self._engine = engine
        self._caller = caller

    # -- the lifecycle ------------------------------------------------------------------------

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        *,
        isolation: str = "snapshot",
        labels: Sequence[str] = (),
        request_id: str = "",
        principal: str = "",
        mode: str = "transactional",
    ) -> BeginResult:
        return await self._engine.begin(
            agent_id,
            metadata,
            policy,
            isolation,
            labels=labels,
            request_id=request_id,
            principal=principal,
            mode=mode,
            caller=self._caller,
        )

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
        *,
        request_id: str = "",
        dry_run: bool = False,
        progress: ProgressSink | None = None,
    ) -> StepResult:
        return await self._engine.execute_step(
            transaction_id,
            step_id,
            tool_name,
            arguments,
            raw_context,
            request_id=request_id,
            dry_run=dry_run,
            progress=progress,
            caller=self._caller,
        )

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        return self._engine.cancel_step(transaction_id, step_id, caller=self._caller)

    async def commit(
        self,
        transaction_id: str,
        *,
        request_id: str = "",
        expected_revision: int | None = None,
        receipt_id: str = "",
    ) -> CommitResult:
        return await self._engine.commit(
            transaction_id,
            request_id=request_id,
            expected_revision=expected_revision,
            receipt_id=receipt_id,
            caller=self._caller,
        )

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str = "",
    ) -> RollbackResult:
        return await self._engine.rollback(
            transaction_id, to_step, reason, request_id=request_id, caller=self._caller
        )

    async def get_transaction(
        self, transaction_id: str, *, recent: int | None = None
    ) -> TransactionInfo:
        """``recent``: the newest that many attempts and no edges (the listings' bounded read)."""
        return await self._engine.get_transaction(
            transaction_id, recent=recent, caller=self._caller
        )

    async def find_transaction(
        self, *, receipt_id: str = "", request_id: str = ""
    ) -> FoundTransaction:
        return await self._engine.find_transaction(
            receipt_id=receipt_id, request_id=request_id, caller=self._caller
        )

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        page_size: int = 50,
        page_token: str = "",
    ) -> TransactionPage:
        return await self._engine.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id,
            page_size=page_size,
            page_token=page_token,
            caller=self._caller,
        )

    def list_tools(self) -> list[dict[str, Any]]:
        return self._engine.list_tools()  # the same for every caller

    # -- approval, undo, outcomes, compensation -----------------------------------------------

    async def preview_commit(self, transaction_id: str) -> Preview:
        return await self._engine.preview_commit(transaction_id, caller=self._caller)

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, *, principal: str, roles: Sequence[str] = ()
    ) -> Approval:
        return await self._engine.approve_commit(
            transaction_id, receipt_id, principal=principal, roles=roles, caller=self._caller
        )

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        *,
        principal: str,
        roles: Sequence[str] = (),
    ) -> Refusal:
        return await self._engine.refuse_commit(
            transaction_id,
            receipt_id,
            reason,
            principal=principal,
            roles=roles,
            caller=self._caller,
        )

    async def undo_step(self, transaction_id: str, *, request_id: str = "") -> UndoResult:
        return await self._engine.undo_step(
            transaction_id, request_id=request_id, caller=self._caller
        )

    async def redo_step(self, transaction_id: str, *, request_id: str = "") -> UndoResult:
        return await self._engine.redo_step(
            transaction_id, request_id=request_id, caller=self._caller
        )

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult:
        return await self._engine.reconcile_step(transaction_id, step_id, caller=self._caller)

    async def resolve_step(
        self,
        transaction_id: str,
        step_id: int,
        outcome: str,
        *,
        output: Any = None,
        reason: str = "",
    ) -> ReconcileResult:
        return await self._engine.resolve_step(
            transaction_id, step_id, outcome, output=output, reason=reason, caller=self._caller
        )

    async def compensate(
        self, transaction_id: str, reason: str = "", *, principal: str = ""
    ) -> CompensationResult:
        return await self._engine.compensate(
            transaction_id, reason, principal=principal, caller=self._caller
        )

    async def compensation_plan(self, transaction_id: str) -> CompensationPlan:
        return await self._engine.compensation_plan(transaction_id, caller=self._caller)

    async def approve_compensation(
        self, transaction_id: str, principal: str, roles: Sequence[str] = ()
    ) -> RollbackResult:
        return await self._engine.approve_compensation(
            transaction_id, principal, roles, caller=self._caller
        )

    async def refuse_compensation(
        self, transaction_id: str, reason: str, principal: str = "", roles: Sequence[str] = ()
    ) -> RollbackResult:
        return await self._engine.refuse_compensation(
            transaction_id, reason, principal, roles, caller=self._caller
        )

    # -- the audit chain and the outbox -------------------------------------------------------

    async def verify_audit(self, transaction_id: str) -> AuditVerification:
        return await self._engine.verify_audit(transaction_id, caller=self._caller)

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = (),
        transaction_id: str = "",
        after_id: int = 0,
        limit: int = effects_wire.DEFAULT_EFFECTS,
    ) -> EffectPage:
        return await self._engine.list_effects(
            statuses=statuses,
            transaction_id=transaction_id,
            after_id=after_id,
            limit=limit,
            caller=self._caller,
        )

    async def retry_effect(self, effect_id: int) -> EffectInfo:
        return await self._engine.retry_effect(effect_id, caller=self._caller)


class _EngineListings:
    def __init__(self, engine: ActingFor) -> None:
        self.engine = engine  # bound to its caller (``embedded``)

    async def tools(self) -> list[dict[str, Any]]:
        return self.engine.list_tools()

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.engine.list_transactions_page(
            statuses=statuses, agent_id=agent_id or None, page_size=page_size, page_token=page_token
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        return await self.engine.get_transaction(transaction_id, recent=recent)

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        return await self.engine.list_effects(
            statuses=statuses,
            transaction_id=transaction_id,
            after_id=after_id,
            limit=effects_wire.effects_per_page(page_size),
        )


class _ClientListings:
    def __init__(self, client: AsyncAgentTxClient) -> None:
        self.client = client

    async def tools(self) -> list[dict[str, Any]]:
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

    async def transactions(
        self, statuses: Sequence[str], agent_id: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        page = await self.client.list_transactions(
            statuses=statuses, agent_id=agent_id, page_size=page_size, page_token=page_token
        )
        return [_summary(t) for t in page.transactions], page.next_page_token

    async def transaction(self, transaction_id: str, recent: int) -> TransactionInfo:
        # GetTransaction has no bound: the whole reply, bounded here as the engine would.
        info = await self.client.get_transaction(transaction_id)
        omitted = max(0, len(info.steps) - recent)
        return dataclasses.replace(
            info, steps=info.steps[omitted:], edges=[], edge_kinds=[], earlier_steps_omitted=omitted
        )

    async def effects(
        self, statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
    ) -> EffectPage:
        return await self.client.list_effects(
            statuses=statuses, transaction_id=transaction_id, after_id=after_id, page_size=page_size
        )


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
