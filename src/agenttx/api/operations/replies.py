"""The wire replies of every operation, built from the engine's values: the same message on
every surface. gRPC sends it; HTTP ``/v1`` and MCP read it back as fields
(``agenttx.api.fields``), so the three cannot drift apart. The replies of the safety
operations live beside their concept (``api/receipts_wire.py``, ``undo_wire``,
``reconcile_wire``, ``compensation_wire``, ``effects_wire``, ``audit_wire``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, cast

from agenttx.api import history, lookup_wire, receipts_wire, reconcile_wire, undo_wire
from agenttx.api.history import MAX_MESSAGE_BYTES  # the reference's cap, both directions
from agenttx.core.hints import reference_category
from agenttx.core.offload import bulk_allocation
from agenttx.fieldcopy import field_copy
from agenttx.types import (
    REFERENCE_FALLBACK,
    BeginResult,
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

# Every strategy by its own name: for a caller that reads names (HTTP, MCP).
ALL_STRATEGIES = frozenset(REFERENCE_FALLBACK)


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
    # The client reads it back with the same field_copy (client/_wire.py).
    return field_copy(
        c,
        pb.CommitTransactionResponse,
        transaction_status=c.transaction_status.value,
        snapshot=receipts_wire.snapshot(c.snapshot),
    )


def rollback_reply(b: RollbackResult) -> pb.RollbackTransactionResponse:
    return field_copy(
        b,
        pb.RollbackTransactionResponse,
        transaction_status=b.transaction_status.value,
        snapshot=receipts_wire.snapshot(b.snapshot),
    )


def fitted_reply(t: TransactionInfo, limit: int | None) -> pb.GetTransactionResponse:
    """GetTransaction's reply; with a ``limit`` (gRPC's message cap) a long history is trimmed
    to fit it, and ListSteps reads the rest."""
    with bulk_allocation():  # a long history's texts and records: no cycles to collect
        reply = transaction_reply(t)
        return reply if limit is None else history.fit_transaction(reply, limit)


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
        transactions=[lookup_wire.summary(t) for t in page.transactions],
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
                requires_plan_before_commit=bool(d.get("requires_plan_before_commit")),
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
