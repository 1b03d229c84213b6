"""Read models: a transaction's public view and its dependency graph, rebuilt from the step
rows (the graph is a pure function of the live steps, so a restart rebuilds it exactly)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from agenttx import jsonpolicy
from agenttx.core.contracts import awaiting_approval
from agenttx.core.graph import DependencyGraph
from agenttx.core.hints import reference_category
from agenttx.core.leases import lease_held
from agenttx.core.refs import Reference
from agenttx.core.runtime import GraphStep
from agenttx.core.undo_outcomes import shown as undo_shown
from agenttx.jsontext import compact
from agenttx.store.contract import (
    StepRow,
    TxRow,
)
from agenttx.types import (
    ContextEntry,
    Isolation,
    RollbackPolicy,
    StepStatus,
    StepView,
    TransactionInfo,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")


def shown_json(text: str, status: str) -> str:
    """A stored text as the JSON text history shows ("" for none), without parsing it where
    it is JSON for sure. An attempt that got past parsing its arguments (any status but
    FAILED: it ran) stored JSON the policy accepted, and outputs are written by us. A failed
    attempt keeps the arguments exactly as they were sent, which may be text the JSON policy
    refused (truncated, a lone surrogate escape, 1,000-deep): such text is shown as a JSON
    string of it, so reading a history never fails on what one bad step sent."""
    if not text or status != StepStatus.FAILED.value:
        return text
    try:
        jsonpolicy.parse(text)
    except jsonpolicy.JsonRefused:
        return compact(text)
    return text


def step_references(step: StepRow) -> list[Reference]:
    return [Reference(int(r[0]), tuple(r[1]), tuple(r[2])) for r in step.detail.get("refs", ())]


def graph_step(s: StepRow) -> GraphStep:
    """The ``add_step`` arguments a live successful step row stands for."""
    return (
        s.step_id,
        json.loads(s.arguments_json) if s.arguments_json else None,
        json.loads(s.output_json) if s.output_json else None,
        step_references(s),
        s.detail.get("state_reads", ()),
        [w[0] for w in s.detail.get("w", ())],
    )


def graph_rows(steps: Iterable[StepRow]) -> list[StepRow]:
    """The rows the graph is built from, in the order they are added: the live successful
    steps by step id (rows in ``seq`` order keep it among equal ids)."""
    return sorted(
        (s for s in steps if s.status == StepStatus.SUCCESS.value and s.live),
        key=lambda s: s.step_id,
    )


def rebuild_graph(steps: Iterable[StepRow]) -> DependencyGraph:
    """The graph exactly as the live steps built it (the graph is a pure function of them)."""
    graph = DependencyGraph()
    for s in graph_rows(steps):
        graph.add_step(*graph_step(s))
    return graph


def transaction_info(
    row: TxRow,
    steps: list[StepRow],
    edges: list[tuple[int, int, str]],
    counters: Mapping[str, Any] | None = None,
    edge_kinds: list[str] | None = None,
    recent: int | None = None,
) -> TransactionInfo:
    """The public view; ``counters`` are the revision counters (``RevisionRules.counters``).
    ``recent``: only the newest that many attempts become step views (parsing each one's
    arguments and output is the costly part of a view); the rest are counted."""
    live = [s for s in steps if s.live and s.status == StepStatus.SUCCESS.value]
    omitted = max(0, len(steps) - recent) if recent is not None else 0
    info = TransactionInfo(
        transaction_id=row.id,
        status=TxStatus(row.status),
        next_step_id=row.next_step_id,
        constraints=list(row.body.get("constraints", [])),
        global_resets=int(row.body.get("controller", {}).get("global_resets", 0)),
        context=[ContextEntry(s.step_id, s.tool, s.raw_context) for s in live],
        agent_id=row.agent_id,
        metadata=dict(row.body.get("metadata", {})),
        isolation=Isolation(row.isolation),
        policy=RollbackPolicy.from_dict(row.body.get("policy")),
        revision=row.revision,
        epoch=int(row.body.get("epoch", 0)),
        requires_human=bool(row.body.get("requires_human", False)),
        abort_reason=str(row.body.get("abort_reason", "")),
        compensation_errors=list(row.body.get("compensation_errors", [])),
        outcome_unknown_step=int(row.body.get("outcome_unknown_step", 0)),
        created_at=row.created_at,
        updated_at=row.updated_at,
        principal=str(row.body.get("principal", "")),
        tenant=row.tenant,
        steps=[
            StepView(
                step_id=s.step_id,
                attempt=s.attempt,
                tool_name=s.tool,
                status=s.status,
                live=s.live,
                arguments_json=shown_json(s.arguments_json, s.status),
                output_json=shown_json(s.output_json, s.status),
                clean_hint=str(s.detail.get("hint", "")),
                error_category=str(s.detail.get("category", "")),
                reference_category=reference_category(str(s.detail.get("category", ""))),
                strategy=str(s.detail.get("strategy", "")),
                rollback_to_step=int(s.detail.get("target", 0)),
                root_cause_step=int(s.detail.get("root", 0)),
                hint_key=str(s.detail.get("key", "")),
                epoch=s.epoch,
                started_at=s.started_at,
                finished_at=s.finished_at,
                operation_provider=str((s.detail.get("op") or {}).get("provider", "")),
                operation_id=str((s.detail.get("op") or {}).get("id", "")),
            )
            for s in steps[omitted:]
        ],
        edges=edges,
        labels=list(row.body.get("labels", [])),
        history_chars=sum(
            len(s.arguments_json) + len(s.output_json) + len(s.raw_context) for s in steps
        ),
        mode=str(row.body.get("mode", "transactional")),
        **(counters or {}),
        **pending_reconcile(row.body),
        compensation_for=str(row.body.get("compensation_for", "")),
        compensation_approval_pending=awaiting_approval(row.body),
        edge_kinds=list(edge_kinds or []),
        earlier_steps_omitted=omitted,
    )
    # A waiting unknown undo needs a human, says so and names its step (``undo_outcomes``).
    waiting = undo_shown(row.id, row.body)
    return dataclasses.replace(info, **waiting) if waiting else info


def pending_reconcile(body: dict[str, Any]) -> dict[str, Any]:
    """The TransactionInfo fields of a pending unknown outcome (``reconcile.py``'s record)."""
    if not body.get("outcome_unknown_step"):
        return {}
    record = body.get("reconcile") or {}
    live = lease_held(record.get("lease"), time.time())
    op = record.get("op") or {}
    return {
        "reconcile_state": "reconciling" if live else "outcome_unknown",
        "reconcile_after": float(record.get("retry_at", 0.0)),
        "operation_provider": str(op.get("provider", "")),
        "operation_id": str(op.get("id", "")),
    }
