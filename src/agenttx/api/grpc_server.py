"""gRPC adapter: ``agenttx.v1.AgentTxService`` over ``agenttx.Engine``.

Thin on purpose: translate the request, call the engine, translate the reply. Status codes
follow the reference: OK for steps that failed and were rolled back (a failure is data in the
reply), INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION (the message names the expected step),
ABORTED (commit conflict), ALREADY_EXISTS (a request_id reused with another payload),
INTERNAL, each from the one table in ``agenttx.errors``; a refusal also carries the error's
reason and fields as trailing metadata (``agenttx.errors``, docs/api.md). Health
(``grpc.health.v1``) and server reflection are served beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agenttx.api import (
    audit_wire,
    compensation_wire,
    effects_wire,
    history,
    receipts_wire,
    reconcile_wire,
    undo_wire,
)
from agenttx.api.grpc_requests import add_service
from agenttx.api.history import MAX_MESSAGE_BYTES  # the reference's cap, both directions
from agenttx.api.next_calls import GRPC
from agenttx.api.public_errors import guidance, public_error, public_row
from agenttx.api.revocable import watch_as
from agenttx.api.stream_slots import StreamSlots
from agenttx.api.tracing import incoming
from agenttx.auth.grpc_auth import grant_of_metadata
from agenttx.auth.keys import KeyGrant, KeyRing
from agenttx.core.eager import run_detached
from agenttx.core.engine import Engine
from agenttx.core.hints import reference_category
from agenttx.core.offload import INLINE_JSON_CHARS, bulk_allocation, by_size
from agenttx.error_details import next_metadata, reason_metadata
from agenttx.errors import AgentTxError
from agenttx.types import (
    ACCEPT_STRATEGIES_METADATA,
    REFERENCE_FALLBACK,
    BeginResult,
    Caller,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TransactionInfo,
    TransactionPage,
)
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

log = logging.getLogger("agenttx.grpc")

SERVICE_NAME = "agenttx.v1.AgentTxService"

T = TypeVar("T")


def status_code(exc: AgentTxError) -> grpc.StatusCode:
    """The status a call refused with ``exc`` fails with (the public error policy's row of the
    table in ``agenttx.errors``: INTERNAL for an internal error)."""
    return grpc.StatusCode[public_row(exc).grpc_status]


async def _refuse(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """Fail the call with ``exc`` in its public form (``api/public_errors.py``): its status and
    message, as a reference client expects, and its reason, fields and continuation as
    trailing metadata, which such a client ignores. An internal error (a step failure that
    escaped, any exception no call is refused with) says only INTERNAL and a correlation id;
    its text and traceback are logged once."""
    e = public_error(exc, log, "gRPC")
    # What to call next, named by RPC: the continuation MCP and HTTP give, for gRPC callers.
    cont = guidance(e, calls=GRPC).continuation
    await context.abort(
        grpc.StatusCode[e.grpc_status],
        e.message,
        trailing_metadata=reason_metadata(e.reason, e.fields) + next_metadata(cont),
    )


async def _guard(
    context: grpc.aio.ServicerContext, call: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """Run ``call``; fail it with any error it raises in its public form (``_refuse``)."""
    # A client that gives up (deadline, disconnect) must not cancel a step half-way: it
    # finishes, and its reply is stored for a retry with the same request_id.
    try:
        # The caller's W3C trace context (traceparent metadata) is the parent of the spans.
        with incoming(_trace_carrier(context)):
            return await run_detached(call())
    except grpc.aio.AbortError:
        raise
    except Exception as exc:
        await _refuse(context, exc)
    raise AssertionError("unreachable: context.abort raises")


def _trace_carrier(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {
        k: v
        for k, v in context.invocation_metadata() or ()
        if k in ("traceparent", "tracestate") and isinstance(v, str)
    }


def accepted_strategies(context: grpc.aio.ServicerContext) -> frozenset[Strategy]:
    """Our strategies beyond the reference's that the caller says it can name, from its
    ``agenttx-accept-strategies`` metadata (unknown names are ignored: a newer client may
    know more than this server)."""
    names: set[str] = set()
    for key, value in context.invocation_metadata() or ():
        if key == ACCEPT_STRATEGIES_METADATA and isinstance(value, str):
            names.update(n.strip().upper() for n in value.split(","))
    return frozenset(s for s in REFERENCE_FALLBACK if s.value in names)


def wire_strategy(strategy: Strategy, accepted: frozenset[Strategy]) -> Strategy:
    """``strategy``, or what a caller that cannot name it is sent instead."""
    if strategy in REFERENCE_FALLBACK and strategy not in accepted:
        return REFERENCE_FALLBACK[strategy]
    return strategy


def begin_reply(r: BeginResult) -> pb.BeginTransactionResponse:
    """The wire reply of a begin, the same on every surface (gRPC, HTTP, MCP)."""
    return pb.BeginTransactionResponse(
        transaction_id=r.transaction_id,
        next_step_id=r.next_step_id,
        transaction_status=r.transaction_status.value,
        revision=r.revision,
        snapshot=receipts_wire.snapshot(r.snapshot),
        mode=r.mode,
    )


def step_reply(
    r: StepResult, accepted: frozenset[Strategy] = frozenset()
) -> pb.ExecuteStepResponse:
    """The wire reply of a step. ``accepted``: the strategies beyond the reference's the caller
    can name; by default none, so a reference client never sees an enum value it lacks."""
    reply = pb.ExecuteStepResponse(
        status=cast("pb.StepStatus", r.status.wire),
        output_json=r.output_json,
        strategy=cast("pb.RollbackStrategy", wire_strategy(r.strategy, accepted).wire),
        next_step_id=r.next_step_id,
        constraints=r.constraints,
        transaction_status=r.transaction_status.value,
        revision=r.revision,
        snapshot=pb.Snapshot(transaction_id=r.transaction_id, revision=r.revision),
    )
    if r.status is not StepStatus.SUCCESS:  # the fields only a failed step fills
        reply.clean_hint = r.clean_hint
        reply.rollback_to_step = r.rollback_to_step
        reply.context_reset = r.context_reset
        # Field 9 speaks the reference's vocabulary; our finer name has a field of its own.
        reply.error_category = reference_category(r.error_category)
        reply.error_category_detail = r.error_category
        reply.rollback_latency_ms = r.rollback_latency_ms
        reply.abort_reason = r.abort_reason
        reply.compensation_errors.extend(r.compensation_errors)
        reply.hint_key = r.hint_key
        reconcile_wire.fill_step(reply, r)
    undo_wire.add_dry_run(reply, r)
    return reply


def commit_reply(c: CommitResult) -> pb.CommitTransactionResponse:
    return pb.CommitTransactionResponse(
        committed=c.committed,
        steps_committed=c.steps_committed,
        effects_dispatched=c.effects_dispatched,
        dispatch_errors=c.dispatch_errors,
        transaction_status=c.transaction_status.value,
        revision=c.revision,
        effects_queued=c.effects_queued,
        snapshot=receipts_wire.snapshot(c.snapshot),
    )


def rollback_reply(b: RollbackResult) -> pb.RollbackTransactionResponse:
    return pb.RollbackTransactionResponse(
        rolled_back=b.rolled_back,
        next_step_id=b.next_step_id,
        compensations_run=b.compensations_run,
        compensation_errors=b.compensation_errors,
        transaction_status=b.transaction_status.value,
        revision=b.revision,
        compensation_approval_pending=b.compensation_approval_pending,
        snapshot=receipts_wire.snapshot(b.snapshot),
    )


def fitted_reply(t: TransactionInfo) -> pb.GetTransactionResponse:
    with bulk_allocation():  # a long history's texts and records: no cycles to collect
        return history.fit_transaction(transaction_reply(t), MAX_MESSAGE_BYTES)


def steps_page(t: TransactionInfo, start: int, count: int) -> pb.ListStepsResponse:
    """The ListSteps page of ``count`` records from ``start``, within the message limit."""
    page = pb.ListStepsResponse(total_steps=len(t.steps))
    with bulk_allocation():
        taken = history.fill_page(page, history_records(t, start), count, MAX_MESSAGE_BYTES)
    if start + taken < len(t.steps):
        page.next_page_token = history.page_token(start + taken)
    return page


def transaction_reply(t: TransactionInfo) -> pb.GetTransactionResponse:
    reply = pb.GetTransactionResponse(
        transaction_id=t.transaction_id,
        status=t.status.value,
        next_step_id=t.next_step_id,
        constraints=t.constraints,
        global_resets=t.global_resets,
        context=[
            pb.ContextEntry(step_id=c.step_id, tool_name=c.tool_name, raw_context=c.raw_context)
            for c in t.context
        ],
        agent_id=t.agent_id,
        revision=t.revision,
        metadata=t.metadata,
        isolation=t.isolation.value,
        epoch=t.epoch,
        requires_human=t.requires_human,
        abort_reason=t.abort_reason,
        compensation_errors=t.compensation_errors,
        outcome_unknown_step=t.outcome_unknown_step,
        edges=[pb.DependencyEdge(from_step=a, to_step=b, key=k) for a, b, k in t.edges],
        steps=[step_record(s) for s in t.steps],
        created_at=t.created_at,
        updated_at=t.updated_at,
        policy=pb.RollbackPolicy(
            max_local_depth=t.policy.max_local_depth,
            max_global_resets=t.policy.max_global_resets,
            replay_budget_factor=t.policy.replay_budget_factor,
            max_step_retries=t.policy.max_step_retries,
        ),
        snapshot=receipts_wire.snapshot(t.snapshot),
        mode=t.mode,
        principal=t.principal,
        compensation_for=t.compensation_for,
        compensation_approval_pending=t.compensation_approval_pending,
        tenant=t.tenant,
        edge_kinds=t.edge_kinds,
        approval_reasons=t.approval_reasons,
        decisions=[
            pb.StepDecision(
                step_id=s.step_id,
                attempt=s.attempt,
                strategy=s.strategy,
                rollback_to_step=s.rollback_to_step,
                root_cause_step=s.root_cause_step,
                hint_key=s.hint_key,
                history_index=t.earlier_steps_omitted + i,  # in the whole history
            )
            for i, s in enumerate(t.steps)
            if s.strategy
        ],
    )
    reconcile_wire.fill_transaction(reply, t)
    undo_wire.add_counters(reply, t)
    receipts_wire.add_receipts(reply, t)
    return reply


def transactions_reply(page: TransactionPage) -> pb.ListTransactionsResponse:
    return pb.ListTransactionsResponse(
        transactions=[
            pb.TransactionSummary(
                transaction_id=t.transaction_id,
                status=t.status.value,
                agent_id=t.agent_id,
                next_step_id=t.next_step_id,
                revision=t.revision,
                labels=t.labels,
                created_at=t.created_at,
                updated_at=t.updated_at,
                abort_reason=t.abort_reason,
                snapshot=receipts_wire.snapshot(t.snapshot),
                compensation_for=t.compensation_for,
                principal=t.principal,
                tenant=t.tenant,
            )
            for t in page.transactions
        ],
        next_page_token=page.next_page_token,
    )


def tools_reply(tools: Sequence[dict[str, Any]]) -> pb.ListToolsResponse:
    return pb.ListToolsResponse(
        tools=[
            pb.ToolInfo(
                name=d["name"],
                description=d["description"],
                effect=d["effect"],
                input_schema_json=json.dumps(d["input_schema"]),
                output_schema_json=json.dumps(d.get("output_schema") or {}),
                examples_json=json.dumps(d["examples"]),
                timeout_ms=int(d["timeout_s"] * 1000),
                idempotent=d["idempotent"],
                compensation=d["compensation"],
                dry_run=d["dry_run"],
                dry_run_reached=d["dry_run_reached"],
                undoable=d["undoable"],
                reconcilable=d.get("reconcilable", False),
                compensation_window_s=d.get("compensation_window_s") or 0.0,
                compensation_approval=bool(d.get("compensation_approval")),
                server=d.get("server", ""),
            )
            for d in tools
        ]
    )


def step_record(s: StepView) -> pb.StepRecord:
    record = _step_record(s)
    reconcile_wire.fill_record(record, s)
    return record


def _step_record(s: StepView) -> pb.StepRecord:
    return pb.StepRecord(
        step_id=s.step_id,
        attempt=s.attempt,
        tool_name=s.tool_name,
        status=s.status,
        live=s.live,
        arguments_json=s.arguments_json,  # the stored text as it is: no parse, no re-encode
        output_json=s.output_json,
        clean_hint=s.clean_hint,
        error_category=reference_category(s.error_category),
        error_category_detail=s.error_category,
        epoch=s.epoch,
        started_at=s.started_at,
        finished_at=s.finished_at,
    )


def history_records(
    t: TransactionInfo, start: int
) -> Iterator[tuple[pb.StepRecord, pb.ContextEntry | None]]:
    """The history from its ``start``-th attempt on, each with its context entry (live
    successful steps have one), built as they are asked for."""
    context = {c.step_id: c for c in t.context}  # live step ids are unique
    for s in t.steps[start:]:
        c = context.get(s.step_id) if s.live and s.status == StepStatus.SUCCESS.value else None
        entry = (
            None
            if c is None
            else pb.ContextEntry(
                step_id=c.step_id, tool_name=c.tool_name, raw_context=c.raw_context
            )
        )
        yield step_record(s), entry


def _policy(request: pb.BeginTransactionRequest) -> dict[str, Any] | None:
    if not request.HasField("policy"):
        return None
    p = request.policy
    return {
        "max_local_depth": p.max_local_depth if p.HasField("max_local_depth") else None,
        "max_global_resets": p.max_global_resets if p.HasField("max_global_resets") else None,
        "replay_budget_factor": (
            p.replay_budget_factor if p.HasField("replay_budget_factor") else None
        ),
        "max_step_retries": p.max_step_retries if p.HasField("max_step_retries") else None,
    }


class AgentTxServicer(pb_grpc.AgentTxServiceServicer):
    def __init__(
        self, engine: Engine, keys: KeyRing | None = None, slots: StreamSlots | None = None
    ) -> None:
        self.engine = engine
        # The API keys every call must carry one of; None: none needed (loopback only).
        self.keys = keys
        # The server's one count of open event streams, shared with HTTP and MCP
        # (``api.stream_slots``); a fresh one for a gRPC server built alone.
        self.slots = slots if slots is not None else StreamSlots()

    def _caller(self, context: grpc.aio.ServicerContext) -> Caller | None:
        """Who is calling (raises Unauthenticated); None without keys: the local operator."""
        grant = self._grant(context)
        return grant.caller if grant is not None else None

    def _grant(self, context: grpc.aio.ServicerContext) -> KeyGrant | None:
        """The call's key, resolved (raises Unauthenticated); None without keys."""
        if self.keys is None:
            return None
        return grant_of_metadata(self.keys, context.invocation_metadata())

    async def BeginTransaction(
        self, request: pb.BeginTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.BeginTransactionResponse:
        async def call() -> pb.BeginTransactionResponse:
            r = await self.engine.begin(
                agent_id=request.agent_id,
                metadata=dict(request.metadata),
                policy=_policy(request),
                isolation=request.isolation or "snapshot",
                labels=list(request.labels),
                request_id=request.request_id,
                principal=request.principal,
                mode=request.mode or "transactional",
                caller=self._caller(context),
            )
            return begin_reply(r)

        return await _guard(context, call)

    async def ExecuteStep(
        self, request: pb.ExecuteStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExecuteStepResponse:
        async def call() -> pb.ExecuteStepResponse:
            r = await self.engine.execute_step(
                request.transaction_id,
                request.step_id,
                request.tool_name,
                request.arguments_json,
                request.raw_context,
                request_id=request.request_id,
                dry_run=request.dry_run,
                caller=self._caller(context),
            )
            # Mapped per call, not stored: a replay of this request_id to another client is
            # shaped for that client.
            return step_reply(r, accepted_strategies(context))

        return await _guard(context, call)

    async def CommitTransaction(
        self, request: pb.CommitTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitTransactionResponse:
        async def call() -> pb.CommitTransactionResponse:
            c = await self.engine.commit(
                request.transaction_id,
                request_id=request.request_id,
                expected_revision=(
                    request.expected_revision if request.HasField("expected_revision") else None
                ),
                receipt_id=request.receipt_id,
                caller=self._caller(context),
            )
            return commit_reply(c)

        return await _guard(context, call)

    async def RollbackTransaction(
        self, request: pb.RollbackTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RollbackTransactionResponse:
        async def call() -> pb.RollbackTransactionResponse:
            to_step = request.to_step if request.HasField("to_step") else None
            b = await self.engine.rollback(
                request.transaction_id,
                to_step,
                request.reason,
                request_id=request.request_id,
                caller=self._caller(context),
            )
            return rollback_reply(b)

        return await _guard(context, call)

    async def GetTransaction(
        self, request: pb.GetTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTransactionResponse:
        async def call() -> pb.GetTransactionResponse:
            t = await self.engine.get_transaction(
                request.transaction_id, caller=self._caller(context)
            )
            # Over the message limit gRPC would refuse to send it (RESOURCE_EXHAUSTED after an
            # OK answer): trimmed to fit instead, and ListSteps reads the rest. Copying a long
            # history's texts into records and measuring them takes milliseconds: a worker
            # thread's job. (The view holds texts, not parsed values: freeing it is cheap.)
            return await by_size(t.history_chars, INLINE_JSON_CHARS, fitted_reply, t)

        return await _guard(context, call)

    async def ListSteps(
        self, request: pb.ListStepsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListStepsResponse:
        async def call() -> pb.ListStepsResponse:
            start = history.page_offset(request.page_token)
            count = history.page_size(request.page_size)
            t = await self.engine.get_transaction(
                request.transaction_id, caller=self._caller(context)
            )
            return await by_size(t.history_chars, INLINE_JSON_CHARS, steps_page, t, start, count)

        return await _guard(context, call)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        async def call() -> pb.ListTransactionsResponse:
            page = await self.engine.list_transactions_page(
                statuses=list(request.statuses),
                agent_id=request.agent_id or None,
                label=request.label or None,
                principal=request.principal or None,
                page_size=request.page_size or 50,
                page_token=request.page_token,
                caller=self._caller(context),
                newest_first=request.newest_first,
                created_after=request.created_after or None,
                created_before=request.created_before or None,
                tenant=request.tenant or None,
            )
            return transactions_reply(page)

        return await _guard(context, call)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        async def call() -> pb.ListToolsResponse:
            self._caller(context)  # the catalogue is for callers with a key too
            return tools_reply(self.engine.list_tools())

        return await _guard(context, call)

    async def VerifyAudit(
        self, request: pb.VerifyAuditRequest, context: grpc.aio.ServicerContext
    ) -> pb.VerifyAuditResponse:
        async def call() -> pb.VerifyAuditResponse:
            caller = self._caller(context)
            if not request.all:
                v = await self.engine.verify_audit(request.transaction_id, caller=caller)
                return pb.VerifyAuditResponse(results=[audit_wire.verification(v)])
            page, after = await self.engine.verify_audit_page(
                after_id=request.page_token,
                limit=audit_wire.chains_per_page(request.page_size),
                caller=caller,
            )
            return pb.VerifyAuditResponse(
                results=[audit_wire.verification(v) for v in page], next_page_token=after
            )

        return await _guard(context, call)

    async def ListAuditRecords(
        self, request: pb.ListAuditRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAuditRecordsResponse:
        async def call() -> pb.ListAuditRecordsResponse:
            count = audit_wire.records_per_page(request.page_size)
            records = await self.engine.audit_records(
                request.transaction_id,
                after_seq=request.after_seq,
                limit=count,
                caller=self._caller(context),
            )
            return audit_wire.records_page(records, count)

        return await _guard(context, call)

    async def PreviewCommit(
        self, request: pb.PreviewCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreviewCommitResponse:
        async def call() -> pb.PreviewCommitResponse:
            p = await self.engine.preview_commit(
                request.transaction_id, caller=self._caller(context)
            )
            return receipts_wire.preview_reply(p)

        return await _guard(context, call)

    async def ApproveCommit(
        self, request: pb.ApproveCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApproveCommitResponse:
        async def call() -> pb.ApproveCommitResponse:
            a = await self.engine.approve_commit(
                request.transaction_id,
                request.receipt_id,
                principal=request.principal,
                roles=list(request.roles),
                caller=self._caller(context),
            )
            return receipts_wire.approval_reply(a)

        return await _guard(context, call)

    async def RefuseCommit(
        self, request: pb.RefuseCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.RefuseCommitResponse:
        async def call() -> pb.RefuseCommitResponse:
            r = await self.engine.refuse_commit(
                request.transaction_id,
                request.receipt_id,
                request.reason,
                principal=request.principal,
                roles=list(request.roles),
                caller=self._caller(context),
            )
            return receipts_wire.refusal_reply(r)

        return await _guard(context, call)

    async def UndoStep(
        self, request: pb.UndoStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.UndoStepResponse:
        async def call() -> pb.UndoStepResponse:
            u = await self.engine.undo_step(
                request.transaction_id, request_id=request.request_id, caller=self._caller(context)
            )
            return undo_wire.undo_reply(u)

        return await _guard(context, call)

    async def RedoStep(
        self, request: pb.RedoStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.RedoStepResponse:
        async def call() -> pb.RedoStepResponse:
            u = await self.engine.redo_step(
                request.transaction_id, request_id=request.request_id, caller=self._caller(context)
            )
            return undo_wire.redo_reply(u)

        return await _guard(context, call)

    async def ReconcileStep(
        self, request: pb.ReconcileStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReconcileStepResponse:
        async def call() -> pb.ReconcileStepResponse:
            r = await self.engine.reconcile_step(
                request.transaction_id, request.step_id, caller=self._caller(context)
            )
            return reconcile_wire.reconcile_reply(r)

        return await _guard(context, call)

    async def ResolveStep(
        self, request: pb.ResolveStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReconcileStepResponse:
        async def call() -> pb.ReconcileStepResponse:
            r = await self.engine.resolve_step(
                request.transaction_id,
                request.step_id,
                request.outcome,
                output=reconcile_wire.resolve_output(request.output_json),
                reason=request.reason,
                caller=self._caller(context),
            )
            return reconcile_wire.reconcile_reply(r)

        return await _guard(context, call)

    async def CompensateTransaction(
        self, request: pb.CompensateTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompensateTransactionResponse:
        async def call() -> pb.CompensateTransactionResponse:
            if request.preview:
                plan = await self.engine.compensation_plan(
                    request.transaction_id, caller=self._caller(context)
                )
                return compensation_wire.plan_reply(plan)
            k = await self.engine.compensate(
                request.transaction_id,
                request.reason,
                principal=request.principal,
                caller=self._caller(context),
            )
            return compensation_wire.result_reply(k)

        return await _guard(context, call)

    async def ApproveCompensation(
        self, request: pb.ApproveCompensationRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApproveCompensationResponse:
        async def call() -> pb.ApproveCompensationResponse:
            r = await self.engine.approve_compensation(
                request.transaction_id,
                request.principal,
                list(request.roles),
                caller=self._caller(context),
            )
            return compensation_wire.approval_reply(r)

        return await _guard(context, call)

    async def ListEffects(
        self, request: pb.ListEffectsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEffectsResponse:
        async def call() -> pb.ListEffectsResponse:
            page = await self.engine.list_effects(
                statuses=list(request.statuses),
                transaction_id=request.transaction_id,
                after_id=request.after_id,
                limit=effects_wire.effects_per_page(request.page_size),
                caller=self._caller(context),
            )
            return effects_wire.effects_page(page.effects, page.next_after_id)

        return await _guard(context, call)

    async def RetryEffect(
        self, request: pb.RetryEffectRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryEffectResponse:
        async def call() -> pb.RetryEffectResponse:
            effect = await self.engine.retry_effect(request.effect_id, caller=self._caller(context))
            return pb.RetryEffectResponse(effect=effects_wire.record(effect))

        return await _guard(context, call)

    async def RefuseCompensation(
        self, request: pb.RefuseCompensationRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApproveCompensationResponse:
        async def call() -> pb.ApproveCompensationResponse:
            r = await self.engine.refuse_compensation(
                request.transaction_id,
                request.reason,
                request.principal,
                list(request.roles),
                caller=self._caller(context),
            )
            return compensation_wire.approval_reply(r)

        return await _guard(context, call)

    async def WatchTransaction(
        self, request: pb.WatchTransactionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TransactionEvent]:
        try:
            # A key a reload revokes ends the stream UNAUTHENTICATED (``api.revocable``).
            grant = self._grant(context)
            # Counted before anything is watched; past a limit RESOURCE_EXHAUSTED
            # TOO_MANY_SUBSCRIBERS, its retry_after_ms in the trailing metadata. The slot is
            # given back however the stream ends: by the ``with`` on an end, an error or a
            # cancel raised into the pending read; by the RPC's done callback when a cancel
            # finds this generator parked at a ``yield`` (a send pending), which no finally
            # here would see until the generator is collected.
            slot = self.slots.admit(grant)
            context.add_done_callback(lambda _: slot.release())
            with slot:
                events = watch_as(
                    self.engine, grant, request.transaction_id, request.after_revision
                )
                # aclosing: a client that leaves stops the watch (and its key's) at once.
                async with contextlib.aclosing(events):
                    async for e in events:
                        yield pb.TransactionEvent(
                            transaction_id=e.transaction_id,
                            revision=e.revision,
                            status=e.status.value,
                            next_step_id=e.next_step_id,
                            kind=e.kind,
                            at=e.at,
                        )
        except AgentTxError as exc:
            await _refuse(context, exc)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("internal error in WatchTransaction")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")


def build_server(
    engine: Engine,
    *,
    options: list[tuple[str, Any]] | None = None,
    interceptors: Sequence[Any] = (),
    keys: KeyRing | None = None,
    slots: StreamSlots | None = None,
) -> Any:
    """A ``grpc.aio`` server with the AgentTx service, health and reflection (not started);
    ``interceptors`` are ``grpc.aio.ServerInterceptor`` s (metrics, call logs); ``keys``: the
    API keys every AgentTx call must carry (health and reflection stay open: they reveal
    no transaction); ``slots``: the server's count of open event streams, shared with the
    HTTP listener's (``api.stream_slots``)."""
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            *(options or []),
        ],
    )
    # As the generated add_AgentTxServiceServicer_to_server, with every request checked as
    # it is decoded: malformed bytes and out-of-range 64-bit fields are INVALID_ARGUMENT.
    add_service(
        AgentTxServicer(engine, keys, slots),
        server,
        pb.DESCRIPTOR.services_by_name["AgentTxService"],
        pb,
        SERVICE_NAME,
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.agenttx_health = health_servicer
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    return server


async def mark_serving(server: Any, serving: bool = True) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", SERVICE_NAME):
        await server.agenttx_health.set(name, status)
