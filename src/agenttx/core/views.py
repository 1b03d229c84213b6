"""Read models: a transaction's public view and its dependency graph, rebuilt from the step
rows (the graph is a pure function of the live steps, so a restart rebuilds it exactly)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from agenttx import jsonpolicy
from agenttx.core.graph import DependencyGraph
from agenttx.core.hints import reference_category
from agenttx.core.refs import Reference
from agenttx.core.runtime import GraphStep
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


def stored_json(text: str) -> Any:
    """A stored JSON text as a value for history; ``None`` for no text. A failed attempt
    keeps the arguments exactly as they were sent, which may be text the JSON policy refused
    (truncated, a lone surrogate escape, 1,000-deep): history shows such text as a string,
    so reading a history never fails on what one bad step sent."""
    if not text:
        return None
    try:
        return jsonpolicy.parse(text)
    except jsonpolicy.JsonRefused:
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


def rebuild_graph(steps: Iterable[StepRow]) -> DependencyGraph:
    """The graph exactly as the live steps built it (the graph is a pure function of them)."""
    graph = DependencyGraph()
    for s in sorted(steps, key=lambda s: s.step_id):
        if s.status == StepStatus.SUCCESS.value and s.live:
            graph.add_step(*graph_step(s))
    return graph


def transaction_info(
    row: TxRow, steps: list[StepRow], edges: list[tuple[int, int, str]]
) -> TransactionInfo:
    live = [s for s in steps if s.live and s.status == StepStatus.SUCCESS.value]
    return TransactionInfo(
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
        steps=[
            StepView(
                step_id=s.step_id,
                attempt=s.attempt,
                tool_name=s.tool,
                status=s.status,
                live=s.live,
                arguments=stored_json(s.arguments_json),
                output=stored_json(s.output_json),
                clean_hint=str(s.detail.get("hint", "")),
                error_category=str(s.detail.get("category", "")),
                reference_category=reference_category(str(s.detail.get("category", ""))),
                epoch=s.epoch,
                started_at=s.started_at,
                finished_at=s.finished_at,
            )
            for s in steps
        ],
        edges=edges,
        labels=list(row.body.get("labels", [])),
    )
