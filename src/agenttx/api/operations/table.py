"""The operation table: one ``Row`` per operation of ``agenttx.v1.AgentTxService``, each with
its ``run`` (the engine call and the reply, written once) and its data — who may call it, what
a retry does, the reasons it may refuse with, its ``/v1`` routes.

The gRPC servicer's methods and the HTTP routes (with their OpenAPI document) are derived from
``ROWS``, and so are the MCP tool and the CLI command of a row (its ``mcp`` binding in
``mcp_bindings.py``, its ``cli`` one in ``cli_bindings.py``, which the CLI reads without this
module). ``WatchTransaction``, a server stream, is no row: gRPC and HTTP (server-sent events)
each serve it by hand, over the same ``api.revocable.watch_as``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from agenttx.api import (
    audit_wire,
    compensation_wire,
    effects_wire,
    history,
    lookup_wire,
    receipts_wire,
    reconcile_wire,
    undo_wire,
)
from agenttx.api.next_calls import Next, cases
from agenttx.api.operations import bodies as b
from agenttx.api.operations import cli_bindings as cli
from agenttx.api.operations import mcp_bindings as m
from agenttx.api.operations import replies
from agenttx.api.operations.model import (
    Access,
    CallContext,
    HttpRoute,
    Retry,
    Row,
)
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.wire import agenttx_pb2 as pb

# The reasons of ``agenttx.errors.ERROR_CODES`` most calls share: a bad field, an unknown or
# another tenant's transaction, another principal's without the role, a missing or bad key.
_ON_TX = ("INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "UNAUTHENTICATED")
_OPEN = ("NOT_ACTIVE", "OUTCOME_UNKNOWN_PENDING")  # the transaction must be open and settled
_WRITES = ("ALREADY_EXISTS", "STORE_FULL")  # a request_id reused for another payload; no room


def _refusals(*reasons: str, on: str = "") -> Mapping[str, tuple[Next, ...]]:
    """Each of ``reasons`` with what the caller does next in each of its cases
    (``next_calls.NEXT_ON``), as operation ``on`` refuses it ("": as every operation does)."""
    return MappingProxyType({reason: cases(reason, on) for reason in reasons})


def begin_policy(request: pb.BeginTransactionRequest) -> dict[str, Any] | None:
    """A begin's rollback policy as the engine takes it: each field given, or None."""
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


async def _begin(
    engine: Any, r: pb.BeginTransactionRequest, c: CallContext
) -> pb.BeginTransactionResponse:
    began = await engine.begin(
        agent_id=r.agent_id,
        metadata=dict(r.metadata),
        policy=begin_policy(r),
        isolation=r.isolation or "snapshot",
        labels=list(r.labels),
        request_id=r.request_id,
        principal=r.principal,
        mode=r.mode or "transactional",
        caller=c.caller,
    )
    return replies.begin_reply(began)


async def _step(engine: Any, r: pb.ExecuteStepRequest, c: CallContext) -> pb.ExecuteStepResponse:
    done = await engine.execute_step(
        r.transaction_id,
        r.step_id,
        r.tool_name,
        r.arguments_json,
        r.raw_context,
        request_id=r.request_id,
        dry_run=r.dry_run,
        caller=c.caller,
    )
    # Mapped per call, not stored: a replay of this request_id to another client is shaped
    # for that client.
    return replies.step_reply(done, c.strategies)


async def _commit(
    engine: Any, r: pb.CommitTransactionRequest, c: CallContext
) -> pb.CommitTransactionResponse:
    done = await engine.commit(
        r.transaction_id,
        request_id=r.request_id,
        expected_revision=r.expected_revision if r.HasField("expected_revision") else None,
        receipt_id=r.receipt_id,
        caller=c.caller,
    )
    return replies.commit_reply(done)


async def _rollback(
    engine: Any, r: pb.RollbackTransactionRequest, c: CallContext
) -> pb.RollbackTransactionResponse:
    to_step = r.to_step if r.HasField("to_step") else None
    done = await engine.rollback(
        r.transaction_id, to_step, r.reason, request_id=r.request_id, caller=c.caller
    )
    return replies.rollback_reply(done)


async def _get(
    engine: Any, r: pb.GetTransactionRequest, c: CallContext
) -> pb.GetTransactionResponse:
    t = await engine.get_transaction(r.transaction_id, caller=c.caller)
    # Over gRPC's message limit the reply would be refused after an OK answer: trimmed to fit
    # instead. Copying a long history's texts into records (and measuring them) takes
    # milliseconds: a worker thread's job. (The view holds texts, not parsed values.)
    return await by_size(
        t.history_chars, INLINE_JSON_CHARS, replies.fitted_reply, t, c.message_limit
    )


async def _steps(engine: Any, r: pb.ListStepsRequest, c: CallContext) -> pb.ListStepsResponse:
    start = history.page_offset(r.page_token)
    count = history.page_size(r.page_size)
    t = await engine.get_transaction(r.transaction_id, caller=c.caller)
    return await by_size(t.history_chars, INLINE_JSON_CHARS, replies.steps_page, t, start, count)


async def _list(
    engine: Any, r: pb.ListTransactionsRequest, c: CallContext
) -> pb.ListTransactionsResponse:
    page = await engine.list_transactions_page(
        statuses=list(r.statuses),
        agent_id=r.agent_id or None,
        label=r.label or None,
        principal=r.principal or None,
        page_size=r.page_size or 50,
        page_token=r.page_token,
        caller=c.caller,
        newest_first=r.newest_first,
        created_after=r.created_after or None,
        created_before=r.created_before or None,
        tenant=r.tenant or None,
    )
    return replies.transactions_reply(page)


async def _tools(engine: Any, r: pb.ListToolsRequest, c: CallContext) -> pb.ListToolsResponse:
    # No transaction: the catalogue is any key's (the surface checked the key for the caller).
    return replies.tools_reply(engine.list_tools())


async def _verify(engine: Any, r: pb.VerifyAuditRequest, c: CallContext) -> pb.VerifyAuditResponse:
    if not r.all:
        v = await engine.verify_audit(r.transaction_id, caller=c.caller)
        return pb.VerifyAuditResponse(results=[audit_wire.verification(v)])
    # Every chain spans every tenant: the operator's alone (the engine refuses a caller).
    page, after = await engine.verify_audit_page(
        after_id=r.page_token, limit=audit_wire.chains_per_page(r.page_size), caller=c.caller
    )
    return pb.VerifyAuditResponse(
        results=[audit_wire.verification(v) for v in page], next_page_token=after
    )


async def _audit_records(
    engine: Any, r: pb.ListAuditRecordsRequest, c: CallContext
) -> pb.ListAuditRecordsResponse:
    count = audit_wire.records_per_page(r.page_size)
    records = await engine.audit_records(
        r.transaction_id, after_seq=r.after_seq, limit=count, caller=c.caller
    )
    return audit_wire.records_page(records, count)


async def _preview(
    engine: Any, r: pb.PreviewCommitRequest, c: CallContext
) -> pb.PreviewCommitResponse:
    return receipts_wire.preview_reply(
        await engine.preview_commit(r.transaction_id, caller=c.caller)
    )


async def _approve(
    engine: Any, r: pb.ApproveCommitRequest, c: CallContext
) -> pb.ApproveCommitResponse:
    # With keys the approver is the key's owner, whatever principal and roles say.
    a = await engine.approve_commit(
        r.transaction_id, r.receipt_id, principal=r.principal, roles=list(r.roles), caller=c.caller
    )
    return receipts_wire.approval_reply(a)


async def _refuse(
    engine: Any, r: pb.RefuseCommitRequest, c: CallContext
) -> pb.RefuseCommitResponse:
    refusal = await engine.refuse_commit(
        r.transaction_id,
        r.receipt_id,
        r.reason,
        principal=r.principal,
        roles=list(r.roles),
        caller=c.caller,
    )
    return receipts_wire.refusal_reply(refusal)


async def _undo(engine: Any, r: pb.UndoStepRequest, c: CallContext) -> pb.UndoStepResponse:
    u = await engine.undo_step(r.transaction_id, request_id=r.request_id, caller=c.caller)
    return undo_wire.undo_reply(u)


async def _redo(engine: Any, r: pb.RedoStepRequest, c: CallContext) -> pb.RedoStepResponse:
    u = await engine.redo_step(r.transaction_id, request_id=r.request_id, caller=c.caller)
    return undo_wire.redo_reply(u)


async def _reconcile(
    engine: Any, r: pb.ReconcileStepRequest, c: CallContext
) -> pb.ReconcileStepResponse:
    done = await engine.reconcile_step(r.transaction_id, r.step_id, caller=c.caller)
    return reconcile_wire.reconcile_reply(done)


async def _resolve(
    engine: Any, r: pb.ResolveStepRequest, c: CallContext
) -> pb.ReconcileStepResponse:
    done = await engine.resolve_step(
        r.transaction_id,
        r.step_id,
        r.outcome,
        output=reconcile_wire.resolve_output(r.output_json),
        reason=r.reason,
        caller=c.caller,
    )
    return reconcile_wire.reconcile_reply(done)


async def _compensate(
    engine: Any, r: pb.CompensateTransactionRequest, c: CallContext
) -> pb.CompensateTransactionResponse:
    if r.preview:
        plan = await engine.compensation_plan(r.transaction_id, caller=c.caller)
        return compensation_wire.plan_reply(plan)
    done = await engine.compensate(
        r.transaction_id, r.reason, principal=r.principal, caller=c.caller
    )
    return compensation_wire.result_reply(done)


async def _approve_compensation(
    engine: Any, r: pb.ApproveCompensationRequest, c: CallContext
) -> pb.ApproveCompensationResponse:
    done = await engine.approve_compensation(
        r.transaction_id, r.principal, list(r.roles), caller=c.caller
    )
    return compensation_wire.approval_reply(done)


async def _refuse_compensation(
    engine: Any, r: pb.RefuseCompensationRequest, c: CallContext
) -> pb.ApproveCompensationResponse:
    done = await engine.refuse_compensation(
        r.transaction_id, r.reason, r.principal, list(r.roles), caller=c.caller
    )
    return compensation_wire.approval_reply(done)


async def _effects(engine: Any, r: pb.ListEffectsRequest, c: CallContext) -> pb.ListEffectsResponse:
    page = await engine.list_effects(
        statuses=list(r.statuses),
        transaction_id=r.transaction_id,
        after_id=r.after_id,
        limit=effects_wire.effects_per_page(r.page_size),
        caller=c.caller,
    )
    return effects_wire.effects_page(page.effects, page.next_after_id)


async def _retry_effect(
    engine: Any, r: pb.RetryEffectRequest, c: CallContext
) -> pb.RetryEffectResponse:
    effect = await engine.retry_effect(r.effect_id, caller=c.caller)
    return pb.RetryEffectResponse(effect=effects_wire.record(effect))


async def _find(
    engine: Any, r: pb.FindTransactionRequest, c: CallContext
) -> pb.FindTransactionResponse:
    found = await engine.find_transaction(
        receipt_id=r.receipt_id,  # the oneof's other member reads ""
        request_id=r.request_id,
        caller=c.caller,
    )
    return lookup_wire.find_reply(found)


_TX = "/v1/transactions/{transaction_id}"
_STEP = _TX + "/steps/{step_id}"

# The reference's operations and their reads; ``api/http/v1`` serves these routes by default.
TRANSACTION_ROWS: tuple[Row, ...] = (
    Row(
        "begin",
        "BeginTransaction",
        pb.BeginTransactionRequest,
        pb.BeginTransactionResponse,
        _begin,
        Access.KEY,
        Retry.REQUEST_ID,
        _refusals("INVALID_ARGUMENT", "UNAUTHENTICATED", "POLICY_VIOLATION", *_WRITES),
        (
            HttpRoute(
                "POST",
                "/v1/transactions",
                "Begin a transaction; its first step is next_step_id",
                body=b.BeginBody,
                body_optional=True,
            ),
        ),
        mcp=m.BEGIN_TRANSACTION,
        cli=cli.BEGIN,
    ),
    Row(
        "execute_step",
        "ExecuteStep",
        pb.ExecuteStepRequest,
        pb.ExecuteStepResponse,
        _step,
        Access.ACT,
        Retry.REQUEST_ID,
        _refusals(
            *_ON_TX, *_OPEN, "WRONG_STEP", "STEP_LIMIT_REACHED", "POLICY_VIOLATION", *_WRITES
        ),
        (
            HttpRoute(
                "POST",
                f"{_TX}/steps",
                "Run one step (a tool call); a tool's failure is data in the reply",
                body=b.StepBody,
            ),
        ),
        mcp=m.RUN_STEP,
        cli=cli.STEP,
    ),
    Row(
        "commit",
        "CommitTransaction",
        pb.CommitTransactionRequest,
        pb.CommitTransactionResponse,
        _commit,
        Access.ACT,
        Retry.REQUEST_ID,
        _refusals(
            *_ON_TX,
            *_OPEN,
            *("COMMIT_CONFLICT", "REVISION_CONFLICT", "SNAPSHOT_MISMATCH", "POLICY_VIOLATION"),
            *("APPROVAL_REQUIRED", "PLAN_REQUIRED", "APPROVAL_REFUSED", "RECEIPT_REFUSED"),
            *_WRITES,
        ),
        (
            HttpRoute(
                "POST",
                f"{_TX}/commit",
                "Commit: publish the writes, release staged effects",
                body=b.CommitBody,
                body_optional=True,
            ),
        ),
        mcp=m.COMMIT_TRANSACTION,
        cli=cli.COMMIT,
    ),
    Row(
        "rollback",
        "RollbackTransaction",
        pb.RollbackTransactionRequest,
        pb.RollbackTransactionResponse,
        _rollback,
        Access.ACT,
        Retry.REQUEST_ID,
        _refusals(*_ON_TX, *_OPEN, *_WRITES),
        (
            HttpRoute(
                "POST",
                f"{_TX}/rollback",
                "Abort the transaction, or rewind it to a step with to_step",
                body=b.RollbackBody,
                body_optional=True,
            ),
        ),
        mcp=m.ROLLBACK_TRANSACTION,
        cli=cli.ROLLBACK,
    ),
    Row(
        "get_transaction",
        "GetTransaction",
        pb.GetTransactionRequest,
        pb.GetTransactionResponse,
        _get,
        Access.READ,
        Retry.NATURAL,
        _refusals(*_ON_TX),
        (HttpRoute("GET", _TX, "One transaction: status, steps, graph, constraints, context"),),
        mcp=m.GET_TRANSACTION,
        cli=cli.SHOW,
    ),
    Row(
        "list_steps",
        "ListSteps",
        pb.ListStepsRequest,
        pb.ListStepsResponse,
        _steps,
        Access.READ,
        Retry.NATURAL,
        _refusals(*_ON_TX),
    ),
    Row(
        "verify_audit",
        "VerifyAudit",
        pb.VerifyAuditRequest,
        pb.VerifyAuditResponse,
        _verify,
        Access.READ,  # ``all``: every tenant's chains, the operator's only
        Retry.NATURAL,
        _refusals(*_ON_TX),
        (
            HttpRoute(
                "GET",
                f"{_TX}/audit",
                "Check the transaction's audit hash chain (an edited or missing record is named)",
            ),
        ),
        cli=cli.AUDIT_VERIFY,
    ),
    Row(
        "audit_records",
        "ListAuditRecords",
        pb.ListAuditRecordsRequest,
        pb.ListAuditRecordsResponse,
        _audit_records,
        Access.READ,
        Retry.NATURAL,
        _refusals(*_ON_TX),
        cli=cli.AUDIT_EXPORT,
    ),
    Row(
        "list_transactions",
        "ListTransactions",
        pb.ListTransactionsRequest,
        pb.ListTransactionsResponse,
        _list,
        Access.LISTING,
        Retry.NATURAL,
        _refusals("INVALID_ARGUMENT", "UNAUTHENTICATED"),
        (
            HttpRoute(
                "GET",
                "/v1/transactions",
                "Transactions, oldest first (or newest_first), filtered, a page at a time",
                query=b.ListQuery,
                statuses=b.TX_STATUSES,
            ),
        ),
        mcp=m.LIST_TRANSACTIONS,
        cli=cli.LIST,
    ),
    Row(
        "list_tools",
        "ListTools",
        pb.ListToolsRequest,
        pb.ListToolsResponse,
        _tools,
        Access.KEY,
        Retry.NATURAL,
        _refusals("UNAUTHENTICATED"),
        (
            HttpRoute(
                "GET", "/v1/tools", "The registered tools with their effect class and JSON schemas"
            ),
        ),
        mcp=m.LIST_TOOLS,
        cli=cli.TOOLS,
    ),
)

# Consequential actions and effects (docs/safety.md, undo.md, reconcile.md, compensation.md,
# effects.md); ``agenttx serve`` adds their routes to /v1 (``server.py``).
SAFETY_ROWS: tuple[Row, ...] = (
    Row(
        "preview_commit",
        "PreviewCommit",
        pb.PreviewCommitRequest,
        pb.PreviewCommitResponse,
        _preview,
        Access.READ,
        Retry.NATURAL,  # a new receipt each time, for the same change
        _refusals(*_ON_TX, *_OPEN, "FAILED_PRECONDITION"),
        (
            HttpRoute(
                "POST",
                f"{_TX}/preview",
                "The exact change a commit would make now, with a receipt bound to it",
                body=b.EmptyBody,
                body_optional=True,
            ),
        ),
        mcp=m.PREVIEW_COMMIT,
        cli=cli.PREVIEW,
    ),
    Row(
        "approve_commit",
        "ApproveCommit",
        pb.ApproveCommitRequest,
        pb.ApproveCommitResponse,
        _approve,
        Access.APPROVE,
        Retry.NOT,  # one decision per receipt
        _refusals(
            *_ON_TX, "NOT_ACTIVE", "RECEIPT_REFUSED", "APPROVAL_REFUSED", "SNAPSHOT_MISMATCH"
        ),
        (
            HttpRoute(
                "POST",
                f"{_TX}/approve",
                "Approve a receipt once, as a principal other than the transaction's, with "
                "approver",
                body=b.ApproveBody,
            ),
        ),
        mcp=m.APPROVE_COMMIT,
        cli=cli.APPROVE,
    ),
    Row(
        "refuse_commit",
        "RefuseCommit",
        pb.RefuseCommitRequest,
        pb.RefuseCommitResponse,
        _refuse,
        Access.APPROVE,
        Retry.NOT,
        _refusals(
            *_ON_TX,
            *("NOT_ACTIVE", "RECEIPT_REFUSED", "APPROVAL_REFUSED", "SNAPSHOT_MISMATCH"),
            on="refuse_commit",  # refusing an approved receipt: decided once
        ),
        (
            HttpRoute(
                "POST",
                f"{_TX}/refuse",
                "Refuse a receipt once, with a reason: the transaction stays open, its commit "
                "is refused",
                body=b.RefuseBody,
            ),
        ),
        mcp=m.REFUSE_COMMIT,
        cli=cli.REFUSE,
    ),
    Row(
        "undo_step",
        "UndoStep",
        pb.UndoStepRequest,
        pb.UndoStepResponse,
        _undo,
        Access.ACT,
        Retry.REQUEST_ID,
        _refusals(*_ON_TX, *_OPEN, "UNDO_REFUSED", *_WRITES),
        (
            HttpRoute(
                "POST",
                f"{_TX}/undo",
                "Undo the last live step (its undo runs, next_step_id goes back to it)",
                body=b.RequestBody,
                body_optional=True,
            ),
        ),
        mcp=m.UNDO_STEP,
        cli=cli.UNDO,
    ),
    Row(
        "redo_step",
        "RedoStep",
        pb.RedoStepRequest,
        pb.RedoStepResponse,
        _redo,
        Access.ACT,
        Retry.REQUEST_ID,
        _refusals(*_ON_TX, *_OPEN, "REDO_REFUSED", "STEP_LIMIT_REACHED", *_WRITES),
        (
            HttpRoute(
                "POST",
                f"{_TX}/redo",
                "Re-apply the state-only step the last undo took back, if nothing ran since",
                body=b.RequestBody,
                body_optional=True,
            ),
        ),
        mcp=m.REDO_STEP,
        cli=cli.REDO,
    ),
    Row(
        "reconcile_step",
        "ReconcileStep",
        pb.ReconcileStepRequest,
        pb.ReconcileStepResponse,
        _reconcile,
        Access.ACT,
        Retry.NOT,  # a settled step is refused; an unsettled one is asked again
        _refusals(
            *_ON_TX,
            *("NOT_ACTIVE", "FAILED_PRECONDITION", "RECONCILE_NOT_DUE"),
            *("RECONCILE_IN_PROGRESS", "NO_RECONCILE_HANDLER"),
        ),
        (
            HttpRoute(
                "POST",
                f"{_STEP}/reconcile",
                "Ask the tool whether an OUTCOME_UNKNOWN step's outside call happened, and "
                "settle it",
                body=b.EmptyBody,
                body_optional=True,
            ),
        ),
        mcp=m.RECONCILE_STEP,
        cli=cli.RECONCILE,
    ),
    Row(
        "resolve_step",
        "ResolveStep",
        pb.ResolveStepRequest,
        pb.ReconcileStepResponse,
        _resolve,
        Access.ACT,
        Retry.NOT,
        _refusals(*_ON_TX, "NOT_ACTIVE", "FAILED_PRECONDITION", "RECONCILE_IN_PROGRESS"),
        (
            HttpRoute(
                "POST",
                f"{_STEP}/resolve",
                "An operator's word on an OUTCOME_UNKNOWN step: happened or not_happened",
                body=b.ResolveBody,
            ),
        ),
        cli=cli.RESOLVE,
    ),
    Row(
        "compensate",
        "CompensateTransaction",
        pb.CompensateTransactionRequest,
        pb.CompensateTransactionResponse,
        _compensate,
        Access.ACT,  # ``preview``: READ
        Retry.NOT,  # a second compensation of one transaction is refused
        _refusals(
            *_ON_TX, "NOT_ACTIVE", "FAILED_PRECONDITION", "COMPENSATION_REFUSED", "ALREADY_EXISTS"
        ),
        (
            HttpRoute(
                "POST",
                f"{_TX}/compensate",
                "Compensate a committed transaction in a new compensating one (or preview it)",
                body=b.CompensateBody,
                body_optional=True,
            ),
        ),
        mcp=m.COMPENSATE_TRANSACTION,
        cli=cli.COMPENSATE,
    ),
    Row(
        "approve_compensation",
        "ApproveCompensation",
        pb.ApproveCompensationRequest,
        pb.ApproveCompensationResponse,
        _approve_compensation,
        Access.APPROVE,
        Retry.NOT,
        _refusals(*_ON_TX, "COMPENSATION_APPROVAL_REFUSED", "COMPENSATION_REFUSED"),
        (
            HttpRoute(
                "POST",
                f"{_TX}/approve-compensation",
                "Approve the undo a rollback or a compensation waits for (approver, not the owner)",
                body=b.ApproveCompensationBody,
                body_optional=True,
            ),
        ),
        mcp=m.APPROVE_COMPENSATION,
        cli=cli.APPROVE_COMPENSATION,
    ),
    Row(
        "refuse_compensation",
        "RefuseCompensation",
        pb.RefuseCompensationRequest,
        pb.ApproveCompensationResponse,
        _refuse_compensation,
        Access.APPROVE,
        Retry.NOT,
        _refusals(*_ON_TX, "COMPENSATION_APPROVAL_REFUSED", "COMPENSATION_REFUSED"),
        (
            HttpRoute(
                "POST",
                f"{_TX}/refuse-compensation",
                "Refuse the undo a rollback or a compensation waits for, with a reason (not "
                "the owner)",
                body=b.RefuseCompensationBody,
            ),
        ),
        mcp=m.REFUSE_COMPENSATION,
        cli=cli.REFUSE_COMPENSATION,
    ),
    Row(
        "list_effects",
        "ListEffects",
        pb.ListEffectsRequest,
        pb.ListEffectsResponse,
        _effects,
        Access.READ,  # no transaction: LISTING, the caller's tenant's outbox
        Retry.NATURAL,
        _refusals(*_ON_TX),
        (
            HttpRoute(
                "GET",
                f"{_TX}/effects",
                "The transaction's effects with their last error (dead letters included)",
                query=b.EffectsQuery,
                statuses=b.EFFECT_STATUSES,
            ),
            HttpRoute(
                "GET",
                "/v1/effects",
                "The outbox of the caller's tenant, oldest first, with each effect's last error",
                query=b.EffectsQuery,
                operation_id="ListAllEffects",
                statuses=b.EFFECT_STATUSES,
            ),
        ),
        mcp=m.LIST_EFFECTS,
        cli=cli.EFFECTS,
    ),
    Row(
        "retry_effect",
        "RetryEffect",
        pb.RetryEffectRequest,
        pb.RetryEffectResponse,
        _retry_effect,
        Access.ACT,  # on the effect's transaction: a retry sends the mail or request again
        Retry.NOT,
        _refusals(*_ON_TX, "FAILED_PRECONDITION"),
        (
            HttpRoute(
                "POST",
                f"{_TX}/effects/{{effect_id}}/retry",
                "Requeue a dead effect and try it once now",
                body=b.EmptyBody,
                body_optional=True,
            ),
        ),
        mcp=m.RETRY_EFFECT,
        cli=cli.RETRY_EFFECT,
    ),
    Row(
        "find_transaction",
        "FindTransaction",
        pb.FindTransactionRequest,
        pb.FindTransactionResponse,
        _find,
        Access.READ,  # the found transaction's, as get_transaction's
        Retry.NATURAL,
        _refusals(*_ON_TX),
        (
            HttpRoute(
                "GET",
                "/v1/lookup/by-receipt",
                "The transaction a preview's receipt id names: its state, how it ended, its "
                "receipts",
                query=b.FindByReceiptQuery,
            ),
            HttpRoute(
                "GET",
                "/v1/lookup/by-request",
                "The transaction a call's request_id names: its state, how it ended, its receipts",
                query=b.FindByRequestQuery,
                operation_id="FindTransactionByRequest",
            ),
        ),
        mcp=m.FIND_TRANSACTION,
        cli=cli.FIND,
    ),
)

ROWS: tuple[Row, ...] = (*TRANSACTION_ROWS, *SAFETY_ROWS)
