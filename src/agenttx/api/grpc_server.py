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
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agenttx.api import audit_wire, history
from agenttx.api.history import MAX_MESSAGE_BYTES  # the reference's cap, both directions
from agenttx.core.eager import run_detached
from agenttx.core.engine import Engine
from agenttx.core.hints import reference_category
from agenttx.error_details import to_metadata
from agenttx.errors import AgentTxError, StepFailure, error_code
from agenttx.types import (
    ACCEPT_STRATEGIES_METADATA,
    REFERENCE_FALLBACK,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TransactionInfo,
)
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

log = logging.getLogger("agenttx.grpc")

SERVICE_NAME = "agenttx.v1.AgentTxService"

T = TypeVar("T")


def status_code(exc: AgentTxError) -> grpc.StatusCode:
    """The status a call refused with ``exc`` fails with (the table in ``agenttx.errors``)."""
    return grpc.StatusCode[error_code(exc).grpc_status]


async def _refuse(context: grpc.aio.ServicerContext, exc: AgentTxError) -> None:
    """Fail the call with ``exc``: its status and human message, as a reference client expects,
    and its reason and fields as trailing metadata, which such a client ignores."""
    if isinstance(exc, StepFailure):
        # Raised inside a step, where the engine turns it into a failed step; one that gets
        # here is a bug, and its text (a tool's error) is for the log, not the caller.
        log.error("a step failure escaped the step pipeline", exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")
    await context.abort(status_code(exc), exc.message, trailing_metadata=to_metadata(exc))


async def _guard(
    context: grpc.aio.ServicerContext, call: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """Run ``call``; turn AgentTx errors into their status codes and anything else into
    INTERNAL (logged with its traceback, never sent to the client)."""
    # A client that gives up (deadline, disconnect) must not cancel a step half-way: it
    # finishes, and its reply is stored for a retry with the same request_id.
    try:
        return await run_detached(call())
    except AgentTxError as exc:
        await _refuse(context, exc)
    except grpc.aio.AbortError:
        raise
    except Exception:
        log.exception("internal error")
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")
    raise AssertionError("unreachable: context.abort raises")


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
    )


def rollback_reply(b: RollbackResult) -> pb.RollbackTransactionResponse:
    return pb.RollbackTransactionResponse(
        rolled_back=b.rolled_back,
        next_step_id=b.next_step_id,
        compensations_run=b.compensations_run,
        compensation_errors=b.compensation_errors,
        transaction_status=b.transaction_status.value,
        revision=b.revision,
    )


def transaction_reply(t: TransactionInfo) -> pb.GetTransactionResponse:
    return pb.GetTransactionResponse(
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
    )


def step_record(s: StepView) -> pb.StepRecord:
    return pb.StepRecord(
        step_id=s.step_id,
        attempt=s.attempt,
        tool_name=s.tool_name,
        status=s.status,
        live=s.live,
        arguments_json=_json(s.arguments),
        output_json=_json(s.output),
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


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

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
            )
            return pb.BeginTransactionResponse(
                transaction_id=r.transaction_id,
                next_step_id=r.next_step_id,
                transaction_status=r.transaction_status.value,
                revision=r.revision,
            )

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
            )
            # Mapped per call, not stored: a replay of this request_id to another client is
            # shaped for that client.
            return step_reply(r, accepted_strategies(context))

        return await _guard(context, call)

    async def CommitTransaction(
        self, request: pb.CommitTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitTransactionResponse:
        async def call() -> pb.CommitTransactionResponse:
            c = await self.engine.commit(request.transaction_id, request_id=request.request_id)
            return commit_reply(c)

        return await _guard(context, call)

    async def RollbackTransaction(
        self, request: pb.RollbackTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RollbackTransactionResponse:
        async def call() -> pb.RollbackTransactionResponse:
            to_step = request.to_step if request.HasField("to_step") else None
            b = await self.engine.rollback(
                request.transaction_id, to_step, request.reason, request_id=request.request_id
            )
            return rollback_reply(b)

        return await _guard(context, call)

    async def GetTransaction(
        self, request: pb.GetTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTransactionResponse:
        async def call() -> pb.GetTransactionResponse:
            t = await self.engine.get_transaction(request.transaction_id)
            # Over the message limit gRPC would refuse to send it (RESOURCE_EXHAUSTED after an
            # OK answer): trimmed to fit instead, and ListSteps reads the rest.
            return history.fit_transaction(transaction_reply(t), MAX_MESSAGE_BYTES)

        return await _guard(context, call)

    async def ListSteps(
        self, request: pb.ListStepsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListStepsResponse:
        async def call() -> pb.ListStepsResponse:
            start = history.page_offset(request.page_token)
            count = history.page_size(request.page_size)
            t = await self.engine.get_transaction(request.transaction_id)
            page = pb.ListStepsResponse(total_steps=len(t.steps))
            taken = history.fill_page(page, history_records(t, start), count, MAX_MESSAGE_BYTES)
            if start + taken < len(t.steps):
                page.next_page_token = history.page_token(start + taken)
            return page

        return await _guard(context, call)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        async def call() -> pb.ListTransactionsResponse:
            page = await self.engine.list_transactions_page(
                statuses=list(request.statuses),
                agent_id=request.agent_id or None,
                label=request.label or None,
                page_size=request.page_size or 50,
                page_token=request.page_token,
            )
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
                    )
                    for t in page.transactions
                ],
                next_page_token=page.next_page_token,
            )

        return await _guard(context, call)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        async def call() -> pb.ListToolsResponse:
            tools = [
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
                )
                for d in self.engine.list_tools()
            ]
            return pb.ListToolsResponse(tools=tools)

        return await _guard(context, call)

    async def VerifyAudit(
        self, request: pb.VerifyAuditRequest, context: grpc.aio.ServicerContext
    ) -> pb.VerifyAuditResponse:
        async def call() -> pb.VerifyAuditResponse:
            if not request.all:
                v = await self.engine.verify_audit(request.transaction_id)
                return pb.VerifyAuditResponse(results=[audit_wire.verification(v)])
            page, after = await self.engine.verify_audit_page(
                after_id=request.page_token, limit=audit_wire.chains_per_page(request.page_size)
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
                request.transaction_id, after_seq=request.after_seq, limit=count
            )
            return audit_wire.records_page(records, count)

        return await _guard(context, call)

    async def WatchTransaction(
        self, request: pb.WatchTransactionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TransactionEvent]:
        try:
            async for e in self.engine.watch(request.transaction_id, request.after_revision):
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
) -> Any:
    """A ``grpc.aio`` server with the AgentTx service, health and reflection (not started);
    ``interceptors`` are ``grpc.aio.ServerInterceptor`` s (metrics, call logs)."""
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            *(options or []),
        ],
    )
    pb_grpc.add_AgentTxServiceServicer_to_server(  # type: ignore[no-untyped-call]
        AgentTxServicer(engine), server
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
