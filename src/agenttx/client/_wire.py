"""What the sync and async clients share: requests built from Python values, replies turned
into the result dataclasses of ``agenttx.types``, the retry policy, and the few result
types that exist only on the wire.

Every mutating request carries a ``request_id`` (a new uuid4 unless the caller gives one); the
request object is built once per call, so every retry of it sends the same id and the server
runs it at most once.
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agenttx.client._errors import ServerUnavailable, error_from_status
from agenttx.errors import AgentTxError, InternalError, InvalidArgument
from agenttx.fieldcopy import field_copy
from agenttx.plural import named, plural
from agenttx.types import (
    ACCEPT_STRATEGIES_METADATA,
    REFERENCE_FALLBACK,
    BeginResult,
    CommitResult,
    ContextEntry,
    DryRunReport,
    Fidelity,
    Isolation,
    ReceiptView,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TransactionInfo,
    TxStatus,
    UndoResult,
)
from agenttx.wire import agenttx_pb2 as pb

DEFAULT_TARGET = "127.0.0.1:50051"
SERVICE_NAME = "agenttx.v1.AgentTxService"

# Metadata this client sends with every call: it can name ROLLBACK_STRATEGY_RETRY, so the
# server sends it (other clients get LOCAL_BACKTRACK in its place).
CLIENT_METADATA: tuple[tuple[str, str], ...] = (
    (ACCEPT_STRATEGIES_METADATA, ",".join(s.value.lower() for s in REFERENCE_FALLBACK)),
)

PolicyArg = RollbackPolicy | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call is retried when the server is unreachable.

    ``max_attempts`` counts the first try. Waits grow ``initial_backoff_s · multiplier^n``,
    capped at ``max_backoff_s``, each shortened by up to ``jitter`` (a fraction) so clients
    that failed together do not come back together. Only the status codes in ``retry_on`` are
    retried; UNAVAILABLE means the request never reached the engine or its reply was lost, and
    the repeated request_id makes the retry safe either way.
    """

    max_attempts: int = 5
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retry_on: frozenset[str] = frozenset({"UNAVAILABLE"})

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidArgument("RetryPolicy.max_attempts must be >= 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.multiplier < 1:
            raise InvalidArgument("RetryPolicy backoffs must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise InvalidArgument("RetryPolicy.jitter must be 0..1")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return base * (1 - self.jitter * random.random())

    def channel_options(self) -> list[tuple[str, int]]:
        # gRPC waits between reconnection attempts on its own (1 s at first, by default); a
        # channel that keeps failing fast during that wait would use up our retries, so its
        # reconnect backoff follows ours.
        return [
            ("grpc.initial_reconnect_backoff_ms", max(int(self.initial_backoff_s * 1000), 10)),
            ("grpc.max_reconnect_backoff_ms", max(int(self.max_backoff_s * 1000), 10)),
        ]


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A registered tool as ``ListTools`` describes it."""

    name: str
    description: str
    effect: str  # read, state, compensatable, staged, irreversible
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    examples: list[Any]  # example argument objects
    timeout_s: float
    idempotent: bool
    compensation: str
    dry_run: str  # the declared fidelity
    dry_run_reached: str = ""  # the level a dry run reaches given the tool's handlers
    undoable: bool = False  # UndoStep may undo a step of this tool
    reconcilable: bool = False  # true iff the tool has a reconcile handler
    compensation_window_s: float = 0.0  # 0: the tool declares no window
    compensation_approval: bool = False  # true iff running its undo needs an approver
    # true iff a transaction with a step of it commits only with a current preview's receipt
    requires_plan_before_commit: bool = False
    server: str = ""  # the downstream MCP server (gateway tools); "" for local tools


@dataclass(frozen=True, slots=True)
class TransactionSummary:
    """One row of ``ListTransactions``."""

    transaction_id: str
    status: TxStatus
    agent_id: str
    next_step_id: int
    revision: int
    labels: list[str]
    created_at: float
    updated_at: float
    abort_reason: str
    compensation_for: str = ""  # a compensating transaction's committed original
    principal: str = ""  # who began it (docs/security.md)
    tenant: str = ""  # the tenant it belongs to


@dataclass(frozen=True, slots=True)
class TransactionListPage:
    transactions: list[TransactionSummary]
    next_page_token: str  # empty when this is the last page


@dataclass(frozen=True, slots=True)
class StepPage:
    """One page of ``ListSteps``: attempts in execution order, with the context entries
    (reasoning) of the live successful ones among them."""

    steps: list[StepView]
    context: list[ContextEntry]
    next_page_token: str  # empty when this is the last page
    total_steps: int  # attempts in the whole history


@dataclass(frozen=True, slots=True)
class TransactionEvent:
    """One durable change of a transaction, as ``WatchTransaction`` streams it."""

    transaction_id: str
    revision: int
    status: TxStatus
    next_step_id: int
    kind: str  # state, step, rewind, commit, abort, compensate
    at: float  # unix seconds


class CallStatus(NamedTuple):
    """How a gRPC call failed: the status code's name, the message, the trailing metadata
    (where the server puts the error's reason and fields)."""

    code: str
    details: str
    trailing_metadata: tuple[tuple[str, Any], ...]


def status_of(exc: Any) -> CallStatus:
    """The status of a failed gRPC call (a ``grpc.RpcError``)."""
    try:
        code, details = exc.code(), exc.details()
    except AttributeError:  # a bare RpcError carries no status
        return CallStatus("UNKNOWN", str(exc), ())
    try:
        metadata = tuple(exc.trailing_metadata() or ())
    except (AttributeError, TypeError, ValueError):
        metadata = ()
    return CallStatus(str(getattr(code, "name", "UNKNOWN")), details or "", metadata)


def failure(status: CallStatus, attempts: int, target: str) -> AgentTxError:
    if status.code == "UNAVAILABLE":
        return ServerUnavailable(
            f"AgentTx server at {target} is unavailable after {plural(attempts, 'attempt')}: "
            f"{status.details or 'no details'}",
            attempts,
        )
    return error_from_status(status.code, status.details, status.trailing_metadata)


# ---------------------------------------------------------------------------- requests


def request_id(given: str | None) -> str:
    return given if given else uuid.uuid4().hex


def begin_request(
    agent_id: str,
    metadata: Mapping[str, str] | None,
    policy: PolicyArg,
    isolation: str,
    labels: Sequence[str],
    rid: str | None,
    principal: str = "",
    mode: str = "",
) -> pb.BeginTransactionRequest:
    req = pb.BeginTransactionRequest(
        agent_id=agent_id,
        metadata=dict(metadata or {}),
        isolation=str(isolation),
        labels=list(labels),
        request_id=request_id(rid),
        principal=principal,
        mode=str(mode),
    )
    if policy is not None:
        values = policy.to_dict() if isinstance(policy, RollbackPolicy) else dict(policy)
        unknown = set(values) - set(RollbackPolicy.__dataclass_fields__)
        if unknown:
            raise InvalidArgument(f"unknown policy {named('field', sorted(unknown))}")
        # Only the fields given are set; the server's defaults fill the others.
        req.policy.SetInParent()
        for name, value in values.items():
            if value is not None:
                setattr(req.policy, name, value)
    return req


def arguments_json(arguments: Any) -> str:
    """Arguments as the JSON text the wire carries: a str passes through, None is ``{}``."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"arguments are not JSON-serialisable: {exc}") from None


def step_request(
    tx_id: str,
    step_id: int,
    tool: str,
    arguments: Any,
    raw_context: str,
    rid: str | None,
    dry_run: bool = False,
) -> pb.ExecuteStepRequest:
    return pb.ExecuteStepRequest(
        transaction_id=tx_id,
        step_id=step_id,
        tool_name=tool,
        arguments_json=arguments_json(arguments),
        raw_context=raw_context,
        # A dry run journals nothing, so it has no reply to store: no request id.
        request_id="" if dry_run else request_id(rid),
        dry_run=dry_run,
    )


def undo_request(tx_id: str, rid: str | None) -> pb.UndoStepRequest:
    return pb.UndoStepRequest(transaction_id=tx_id, request_id=request_id(rid))


def redo_request(tx_id: str, rid: str | None) -> pb.RedoStepRequest:
    return pb.RedoStepRequest(transaction_id=tx_id, request_id=request_id(rid))


def commit_request(
    tx_id: str, rid: str | None, expected_revision: int | None = None, receipt_id: str = ""
) -> pb.CommitTransactionRequest:
    req = pb.CommitTransactionRequest(
        transaction_id=tx_id, request_id=request_id(rid), receipt_id=receipt_id
    )
    if expected_revision is not None:
        req.expected_revision = expected_revision
    return req


def rollback_request(
    tx_id: str, to_step: int | None, reason: str, rid: str | None
) -> pb.RollbackTransactionRequest:
    req = pb.RollbackTransactionRequest(
        transaction_id=tx_id, reason=reason, request_id=request_id(rid)
    )
    if to_step is not None:
        req.to_step = to_step
    return req


def steps_request(tx_id: str, page_size: int, token: str) -> pb.ListStepsRequest:
    return pb.ListStepsRequest(transaction_id=tx_id, page_size=page_size, page_token=token)


def list_request(
    statuses: Sequence[str | TxStatus],
    agent_id: str,
    label: str,
    page_size: int,
    token: str,
    principal: str = "",
    tenant: str = "",
) -> pb.ListTransactionsRequest:
    return pb.ListTransactionsRequest(
        statuses=[str(s) for s in statuses],
        agent_id=agent_id,
        label=label,
        page_size=page_size,
        page_token=token,
        principal=principal,
        tenant=tenant,
    )


# ---------------------------------------------------------------------------- replies

_STEP_STATUS = {s.wire: s for s in StepStatus}
_STRATEGY = {s.wire: s for s in Strategy}


def _tx_status(value: str, default: TxStatus) -> TxStatus:
    return TxStatus(value) if value in TxStatus.__members__ else default


def _json(text: str) -> Any:
    return json.loads(text) if text else None


def begin_result(r: pb.BeginTransactionResponse) -> BeginResult:
    return BeginResult(
        transaction_id=r.transaction_id,
        next_step_id=r.next_step_id,
        transaction_status=_tx_status(r.transaction_status, TxStatus.ACTIVE),
        revision=r.revision,
        mode=r.mode or "transactional",
    )


def step_result(r: pb.ExecuteStepResponse, req: pb.ExecuteStepRequest) -> StepResult:
    status = _STEP_STATUS.get(r.status)
    if status is None:
        raise InternalError(f"the server sent an unknown step status {r.status}")
    ended = TxStatus.FAILED if status is StepStatus.FAILED else TxStatus.ACTIVE
    return StepResult(
        transaction_id=req.transaction_id,
        step_id=req.step_id,
        status=status,
        output=_json(r.output_json),
        output_json=r.output_json,
        clean_hint=r.clean_hint,
        strategy=_STRATEGY.get(r.strategy, Strategy.UNSPECIFIED),
        rollback_to_step=r.rollback_to_step,
        next_step_id=r.next_step_id,
        constraints=list(r.constraints),
        context_reset=r.context_reset,
        # Ours: the fine name in its own field; a server that sends only field 9 (the
        # reference) gives its coarser name in both.
        error_category=r.error_category_detail or r.error_category,
        reference_category=r.error_category,
        rollback_latency_ms=r.rollback_latency_ms,
        abort_reason=r.abort_reason,
        compensation_errors=list(r.compensation_errors),
        transaction_status=_tx_status(r.transaction_status, ended),
        revision=r.revision,
        hint_key=r.hint_key,
        dry_run=_dry_run(r) if r.dry_run else None,
        retry_after_ms=r.retry_after_ms,
        operation_provider=r.operation_provider,
        operation_id=r.operation_id,
    )


_FIDELITIES = frozenset(f.value for f in Fidelity)


def _fidelity(value: str) -> Fidelity:
    return Fidelity(value) if value in _FIDELITIES else Fidelity.SCHEMA_ONLY


def _dry_run(r: pb.ExecuteStepResponse) -> DryRunReport:
    report = _json(r.dry_run_json) or {}
    return DryRunReport(
        declared=_fidelity(str(report.get("declared", ""))),
        fidelity=_fidelity(r.fidelity),
        would_succeed=bool(report.get("would_succeed", r.status == StepStatus.SUCCESS.wire)),
        policy=r.policy_decision,
        changes=dict(report.get("changes") or {}),
        output=_json(r.output_json),
        notes=[str(n) for n in report.get("notes") or ()],
    )


def undo_result(r: pb.UndoStepResponse | pb.RedoStepResponse) -> UndoResult:
    undone = r if isinstance(r, pb.UndoStepResponse) else None
    return UndoResult(
        transaction_id=r.transaction_id,
        step_id=r.step_id,
        next_step_id=r.next_step_id,
        transaction_status=_tx_status(r.transaction_status, TxStatus.ACTIVE),
        revision=r.revision,
        compensations_run=undone.compensations_run if undone else 0,
        compensation_errors=list(undone.compensation_errors) if undone else [],
        effects_dropped=undone.effects_dropped if undone else 0,
        can_undo=r.can_undo,
        can_redo=r.can_redo,
    )


def commit_result(r: pb.CommitTransactionResponse, tx_id: str) -> CommitResult:
    return field_copy(
        r,
        CommitResult,
        transaction_id=tx_id,
        dispatch_errors=list(r.dispatch_errors),
        transaction_status=_tx_status(r.transaction_status, TxStatus.COMMITTED),
    )


def rollback_result(r: pb.RollbackTransactionResponse, tx_id: str) -> RollbackResult:
    ended = TxStatus.ACTIVE if r.next_step_id else TxStatus.ROLLED_BACK
    return field_copy(
        r,
        RollbackResult,
        transaction_id=tx_id,
        compensation_errors=list(r.compensation_errors),
        transaction_status=_tx_status(r.transaction_status, ended),
    )


def transaction_info(r: pb.GetTransactionResponse) -> TransactionInfo:
    p = r.policy
    default = RollbackPolicy()
    policy = RollbackPolicy(
        max_local_depth=p.max_local_depth
        if p.HasField("max_local_depth")
        else default.max_local_depth,
        max_global_resets=p.max_global_resets
        if p.HasField("max_global_resets")
        else default.max_global_resets,
        replay_budget_factor=p.replay_budget_factor
        if p.HasField("replay_budget_factor")
        else default.replay_budget_factor,
        max_step_retries=p.max_step_retries if p.HasField("max_step_retries") else None,
    )
    return TransactionInfo(
        transaction_id=r.transaction_id,
        status=_tx_status(r.status, TxStatus.ACTIVE),
        next_step_id=r.next_step_id,
        constraints=list(r.constraints),
        global_resets=r.global_resets,
        context=[ContextEntry(c.step_id, c.tool_name, c.raw_context) for c in r.context],
        agent_id=r.agent_id,
        metadata=dict(r.metadata),
        isolation=Isolation(r.isolation) if r.isolation in _ISOLATIONS else Isolation.SNAPSHOT,
        policy=policy,
        revision=r.revision,
        epoch=r.epoch,
        requires_human=r.requires_human,
        abort_reason=r.abort_reason,
        compensation_errors=list(r.compensation_errors),
        outcome_unknown_step=r.outcome_unknown_step,
        created_at=r.created_at,
        updated_at=r.updated_at,
        steps=with_decisions([step_view(s) for s in r.steps], r.decisions),
        edges=[(e.from_step, e.to_step, e.key) for e in r.edges],
        mode=r.mode or "transactional",
        principal=r.principal,
        revision_count=r.revision_count,
        max_revisions=r.max_revisions,
        remaining_revisions=r.remaining_revisions,
        can_undo=r.can_undo,
        can_redo=r.can_redo,
        can_commit=r.can_commit,
        can_rollback=r.can_rollback,
        reconcile_state=r.reconcile_state,
        reconcile_after=r.reconcile_after,
        operation_provider=r.operation_provider,
        operation_id=r.operation_id,
        compensation_for=r.compensation_for,
        compensation_approval_pending=r.compensation_approval_pending,
        tenant=r.tenant,
        edge_kinds=list(r.edge_kinds),
        receipts=[receipt_view(x) for x in r.receipts],
        approval_reasons=list(r.approval_reasons),
    )


def receipt_view(x: pb.Receipt) -> ReceiptView:
    """One receipt as GetTransaction and FindTransaction list it."""
    return field_copy(x, ReceiptView)


def with_decisions(steps: list[StepView], decisions: Sequence[Any]) -> list[StepView]:
    """``steps`` with each failed attempt's controller decision (``StepDecision``, by its
    position in the whole history) filled in, as the engine's own view has it."""
    for d in decisions:
        if d.history_index < len(steps):
            steps[d.history_index] = dataclasses.replace(
                steps[d.history_index],
                strategy=d.strategy,
                rollback_to_step=d.rollback_to_step,
                root_cause_step=d.root_cause_step,
                hint_key=d.hint_key,
            )
    return steps


def step_view(s: pb.StepRecord) -> StepView:
    return StepView(
        step_id=s.step_id,
        attempt=s.attempt,
        tool_name=s.tool_name,
        status=s.status,
        live=s.live,
        arguments_json=s.arguments_json,  # parsed when the caller asks for the value
        output_json=s.output_json,
        clean_hint=s.clean_hint,
        error_category=s.error_category_detail or s.error_category,
        reference_category=s.error_category,
        epoch=s.epoch,
        started_at=s.started_at,
        finished_at=s.finished_at,
        operation_provider=s.operation_provider,
        operation_id=s.operation_id,
    )


def step_page(r: pb.ListStepsResponse) -> StepPage:
    return StepPage(
        steps=[step_view(s) for s in r.steps],
        context=[ContextEntry(c.step_id, c.tool_name, c.raw_context) for c in r.context],
        next_page_token=r.next_page_token,
        total_steps=r.total_steps,
    )


def with_history(
    info: TransactionInfo, pages: Sequence[StepPage], decisions: Sequence[Any] = ()
) -> TransactionInfo:
    """``info`` (from a trimmed GetTransaction reply) with the steps and context read in full
    through ListSteps, and the reply's ``decisions`` on them."""
    return dataclasses.replace(
        info,
        steps=with_decisions([s for p in pages for s in p.steps], decisions),
        context=[c for p in pages for c in p.context],
    )


_ISOLATIONS = frozenset(i.value for i in Isolation)


def list_page(r: pb.ListTransactionsResponse) -> TransactionListPage:
    return TransactionListPage(
        transactions=[
            field_copy(
                t,
                TransactionSummary,
                status=_tx_status(t.status, TxStatus.ACTIVE),
                labels=list(t.labels),
            )
            for t in r.transactions
        ],
        next_page_token=r.next_page_token,
    )


def tools(r: pb.ListToolsResponse) -> list[ToolInfo]:
    return [
        ToolInfo(
            name=t.name,
            description=t.description,
            effect=t.effect,
            input_schema=_json(t.input_schema_json) or {},
            output_schema=_json(t.output_schema_json) or {},
            examples=_json(t.examples_json) or [],
            timeout_s=t.timeout_ms / 1000,
            idempotent=t.idempotent,
            compensation=t.compensation,
            dry_run=t.dry_run,
            dry_run_reached=t.dry_run_reached,
            undoable=t.undoable,
            reconcilable=t.reconcilable,
            compensation_window_s=t.compensation_window_s,
            compensation_approval=t.compensation_approval,
            requires_plan_before_commit=t.requires_plan_before_commit,
            server=t.server,
        )
        for t in r.tools
    ]


def event(e: pb.TransactionEvent) -> TransactionEvent:
    return field_copy(e, TransactionEvent, status=_tx_status(e.status, TxStatus.ACTIVE))
