"""OpenTelemetry traces: a span per transaction and one per step inside it.

``TracedEngine`` wraps the engine every adapter calls (gRPC, HTTP, MCP) and opens the spans
around its calls, so the adapters stay as they are. It is a typed decorator of the service
contract (``agenttx.service.TransactionService``), each operation spelled out; each adapter
only hands over the W3C trace context its caller sent (``incoming``: gRPC metadata, HTTP
headers, MCP ``_meta``).

- The transaction's span (``agenttx.transaction``) starts at begin, as a child of the caller's
  context, and ends when the transaction reaches a terminal status (commit, abort, the idle
  reaper: whatever publishes that event), with the final status.
- A step's span (``agenttx.step <tool>``) is a child of the caller's context when one came
  with the request, linked to the transaction's span; otherwise a child of the transaction's
  span. Attributes: tool, step id, status, strategy, rollback target, error category.
- Commits and rollbacks get a span of their own in the same way.

Only ``opentelemetry-api`` is needed here (the MCP SDK brings it): without an SDK installed
and configured every span is a no-op. ``configure_otlp`` sets up the SDK with the OTLP/HTTP
exporter for ``--otlp-endpoint``; those packages are the ``otel`` extra
(``pip install 'agenttx[otel]'``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from agenttx.audit import AuditVerification
from agenttx.errors import StartupError
from agenttx.receipts import Approval, Mode, Preview, Refusal
from agenttx.types import (
    BeginResult,
    Caller,
    CommitResult,
    CompensationPlan,
    CompensationResult,
    EffectInfo,
    EffectPage,
    FoundTransaction,
    Isolation,
    ReconcileResult,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    TransactionInfo,
    TransactionPage,
    UndoResult,
)

if TYPE_CHECKING:
    from agenttx.core.engine import Engine
    from agenttx.core.events import TxEvent
    from agenttx.tools.context import ProgressSink

log = logging.getLogger("agenttx.tracing")

TRACER_NAME = "agenttx"
# Open transactions whose span is kept; past it the oldest span ends, marked truncated (a
# restart loses them all the same: the next step then has no transaction span to link to).
MAX_OPEN_SPANS = 10_000


@contextlib.contextmanager
def incoming(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Run the block in the trace context ``carrier`` holds (``traceparent``,
    ``tracestate``); nothing changes without one."""
    if not carrier or "traceparent" not in carrier:
        yield
        return
    token = otel_context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        otel_context.detach(token)


def _has_parent() -> bool:
    return trace.get_current_span().get_span_context().is_valid


class TracedEngine:
    """The engine with spans around its calls: a ``TransactionService`` decorator.

    Every operation of the contract (``agenttx.service``) is a method here with the engine's
    own signature (``caller`` and the engine's extra parameters included): begin, steps,
    commits and rollbacks in their spans, the others handed straight on; so are the three
    engine calls the MCP tools make beyond it (``api.mcp.served.ActingFor``). What else
    only the engine has (its event bus, store, ``watch`` …) is forwarded as it is, at run
    time only: type checkers see the methods spelled here alone."""

    def __init__(self, engine: Engine, tracer_provider: Any = None) -> None:
        self._engine = engine
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self._open: OrderedDict[str, trace.Span] = OrderedDict()  # transaction id -> its span
        engine.events.add_listener(self._on_event)

    if not TYPE_CHECKING:  # the engine-only rest, untyped: outside the contract

        def __getattr__(self, name: str) -> Any:
            return getattr(self._engine, name)

    # -- the transaction span ------------------------------------------------------------------

    def _on_event(self, event: TxEvent) -> None:
        # Called on the loop for every durable change; ends the span at a terminal status.
        if not event.status.terminal:
            return
        span = self._open.pop(event.transaction_id, None)
        if span is not None:
            span.set_attribute("agenttx.status", event.status.value)
            span.set_attribute("agenttx.revision", event.revision)
            if event.status.value != "COMMITTED":
                span.set_status(trace.StatusCode.ERROR, event.status.value)
            span.end()

    def _step_parent(self, transaction_id: str) -> tuple[Any, list[trace.Link]]:
        tx_span = self._open.get(transaction_id)
        if _has_parent():
            links = [trace.Link(tx_span.get_span_context())] if tx_span is not None else []
            return None, links  # the caller's context, already current
        if tx_span is not None:
            return trace.set_span_in_context(tx_span), []
        return None, []

    # -- traced: the lifecycle -------------------------------------------------------------------

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        isolation: Isolation | str = Isolation.SNAPSHOT,
        *,
        labels: Sequence[str] = (),
        request_id: str = "",
        principal: str = "",
        mode: Mode | str = Mode.TRANSACTIONAL,
        caller: Caller | None = None,
    ) -> BeginResult:
        span = self._tracer.start_span("agenttx.transaction", kind=trace.SpanKind.SERVER)
        try:
            r = await self._engine.begin(
                agent_id,
                metadata,
                policy,
                isolation,
                labels=labels,
                request_id=request_id,
                principal=principal,
                mode=mode,
                caller=caller,
            )
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            span.end()
            raise
        span.set_attribute("agenttx.transaction_id", r.transaction_id)
        if agent_id:
            span.set_attribute("agenttx.agent_id", str(agent_id))
        if r.transaction_id in self._open:  # a replayed begin (same request id)
            span.end()
            return r
        self._open[r.transaction_id] = span
        if len(self._open) > MAX_OPEN_SPANS:
            _, oldest = self._open.popitem(last=False)
            oldest.set_attribute("agenttx.span_truncated", True)
            oldest.end()
        return r

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
        *,
        request_id: str = "",
        progress: ProgressSink | None = None,
        dry_run: bool = False,
        caller: Caller | None = None,
    ) -> StepResult:
        parent, links = self._step_parent(transaction_id)
        with self._tracer.start_as_current_span(
            f"agenttx.step {tool_name}",
            context=parent,
            links=links,
            attributes={
                "agenttx.transaction_id": transaction_id,
                "agenttx.step_id": step_id,
                "agenttx.tool": tool_name,
            },
        ) as span:
            r = await self._engine.execute_step(
                transaction_id,
                step_id,
                tool_name,
                arguments,
                raw_context,
                request_id=request_id,
                progress=progress,
                dry_run=dry_run,
                caller=caller,
            )
            span.set_attribute("agenttx.step.status", r.status.value)
            span.set_attribute("agenttx.step.strategy", r.strategy.value)
            span.set_attribute("agenttx.step.next_step_id", r.next_step_id)
            if r.status.value != "SUCCESS":
                span.set_attribute("agenttx.step.rollback_to_step", r.rollback_to_step)
                span.set_attribute("agenttx.step.error_category", r.error_category)
                span.set_attribute("agenttx.step.hint", r.clean_hint)
                span.set_status(trace.StatusCode.ERROR, r.status.value)
            return r

    async def commit(
        self,
        transaction_id: str,
        *,
        request_id: str = "",
        expected_revision: int | None = None,
        receipt_id: str = "",
        caller: Caller | None = None,
    ) -> CommitResult:
        parent, links = self._step_parent(transaction_id)
        with self._tracer.start_as_current_span(
            "agenttx.commit",
            context=parent,
            links=links,
            attributes={"agenttx.transaction_id": transaction_id},
        ) as span:
            c = await self._engine.commit(
                transaction_id,
                request_id=request_id,
                expected_revision=expected_revision,
                receipt_id=receipt_id,
                caller=caller,
            )
            span.set_attribute("agenttx.commit.steps_committed", c.steps_committed)
            return c

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str = "",
        caller: Caller | None = None,
    ) -> RollbackResult:
        parent, links = self._step_parent(transaction_id)
        with self._tracer.start_as_current_span(
            "agenttx.rollback",
            context=parent,
            links=links,
            attributes={"agenttx.transaction_id": transaction_id},
        ) as span:
            b = await self._engine.rollback(
                transaction_id, to_step, reason, request_id=request_id, caller=caller
            )
            span.set_attribute("agenttx.rollback.next_step_id", b.next_step_id)
            return b

    # -- handed on as they are: the rest of the contract ---------------------------------------

    async def get_transaction(
        self,
        transaction_id: str,
        *,
        history: bool = True,
        recent: int | None = None,
        caller: Caller | None = None,
    ) -> TransactionInfo:
        return await self._engine.get_transaction(
            transaction_id, history=history, recent=recent, caller=caller
        )

    async def find_transaction(
        self, *, receipt_id: str = "", request_id: str = "", caller: Caller | None = None
    ) -> FoundTransaction:
        return await self._engine.find_transaction(
            receipt_id=receipt_id, request_id=request_id, caller=caller
        )

    async def preview_commit(self, transaction_id: str, *, caller: Caller | None = None) -> Preview:
        return await self._engine.preview_commit(transaction_id, caller=caller)

    async def approve_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        *,
        principal: str,
        roles: Sequence[str] = (),
        caller: Caller | None = None,
    ) -> Approval:
        return await self._engine.approve_commit(
            transaction_id, receipt_id, principal=principal, roles=roles, caller=caller
        )

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        *,
        principal: str,
        roles: Sequence[str] = (),
        caller: Caller | None = None,
    ) -> Refusal:
        return await self._engine.refuse_commit(
            transaction_id, receipt_id, reason, principal=principal, roles=roles, caller=caller
        )

    async def undo_step(
        self, transaction_id: str, *, request_id: str = "", caller: Caller | None = None
    ) -> UndoResult:
        return await self._engine.undo_step(transaction_id, request_id=request_id, caller=caller)

    async def redo_step(
        self, transaction_id: str, *, request_id: str = "", caller: Caller | None = None
    ) -> UndoResult:
        return await self._engine.redo_step(transaction_id, request_id=request_id, caller=caller)

    async def reconcile_step(
        self, transaction_id: str, step_id: int, *, caller: Caller | None = None
    ) -> ReconcileResult:
        return await self._engine.reconcile_step(transaction_id, step_id, caller=caller)

    async def resolve_step(
        self,
        transaction_id: str,
        step_id: int,
        outcome: str,
        *,
        output: Any = None,
        reason: str = "",
        caller: Caller | None = None,
    ) -> ReconcileResult:
        return await self._engine.resolve_step(
            transaction_id, step_id, outcome, output=output, reason=reason, caller=caller
        )

    async def compensate(
        self,
        transaction_id: str,
        reason: str = "",
        *,
        principal: str = "",
        caller: Caller | None = None,
    ) -> CompensationResult:
        return await self._engine.compensate(
            transaction_id, reason, principal=principal, caller=caller
        )

    async def compensation_plan(
        self, transaction_id: str, *, caller: Caller | None = None
    ) -> CompensationPlan:
        return await self._engine.compensation_plan(transaction_id, caller=caller)

    async def approve_compensation(
        self,
        transaction_id: str,
        principal: str,
        roles: Sequence[str] = (),
        *,
        caller: Caller | None = None,
    ) -> RollbackResult:
        return await self._engine.approve_compensation(
            transaction_id, principal, roles, caller=caller
        )

    async def refuse_compensation(
        self,
        transaction_id: str,
        reason: str,
        principal: str = "",
        roles: Sequence[str] = (),
        *,
        caller: Caller | None = None,
    ) -> RollbackResult:
        return await self._engine.refuse_compensation(
            transaction_id, reason, principal, roles, caller=caller
        )

    async def verify_audit(
        self, transaction_id: str, *, caller: Caller | None = None
    ) -> AuditVerification:
        return await self._engine.verify_audit(transaction_id, caller=caller)

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = (),
        transaction_id: str = "",
        after_id: int = 0,
        limit: int = 100,
        caller: Caller | None = None,
    ) -> EffectPage:
        return await self._engine.list_effects(
            statuses=statuses,
            transaction_id=transaction_id,
            after_id=after_id,
            limit=limit,
            caller=caller,
        )

    async def retry_effect(self, effect_id: int, *, caller: Caller | None = None) -> EffectInfo:
        return await self._engine.retry_effect(effect_id, caller=caller)

    # -- handed on as they are: what the MCP tools call beyond the contract -------------------

    def cancel_step(
        self, transaction_id: str, step_id: int, *, caller: Caller | None = None
    ) -> bool:
        return self._engine.cancel_step(transaction_id, step_id, caller=caller)

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        page_size: int = 50,
        page_token: str = "",
        caller: Caller | None = None,
    ) -> TransactionPage:
        return await self._engine.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id,
            page_size=page_size,
            page_token=page_token,
            caller=caller,
        )

    def list_tools(self) -> list[dict[str, Any]]:
        return self._engine.list_tools()


def configure_otlp(endpoint: str, service_name: str = "agenttx") -> Any:
    """A tracer provider exporting to the OTLP/HTTP ``endpoint`` in batches, installed as the
    global one; ``StartupError`` if the ``otel`` extra is not installed."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise StartupError(
            "--otlp-endpoint needs the OpenTelemetry SDK and exporter: pip install 'agenttx[otel]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return provider
