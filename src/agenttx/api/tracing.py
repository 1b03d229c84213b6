"""OpenTelemetry traces: a span per transaction and one per step inside it.

``TracedEngine`` wraps the engine every adapter calls (gRPC, HTTP, MCP) and opens the spans
around its calls, so the adapters stay as they are; each adapter only hands over the W3C
trace context its caller sent (``incoming``: gRPC metadata, HTTP headers, MCP ``_meta``).

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
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from agenttx.errors import StartupError

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
    """The engine with spans around its calls; every other attribute is the engine's."""

    def __init__(self, engine: Any, tracer_provider: Any = None) -> None:
        self._engine = engine
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self._open: OrderedDict[str, trace.Span] = OrderedDict()  # transaction id -> its span
        engine.events.add_listener(self._on_event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    # -- the transaction span ------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
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

    async def begin(self, *args: Any, **kwargs: Any) -> Any:
        span = self._tracer.start_span("agenttx.transaction", kind=trace.SpanKind.SERVER)
        try:
            r = await self._engine.begin(*args, **kwargs)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            span.end()
            raise
        span.set_attribute("agenttx.transaction_id", r.transaction_id)
        agent = kwargs.get("agent_id") or (args[0] if args else "")
        if agent:
            span.set_attribute("agenttx.agent_id", str(agent))
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
        self, transaction_id: str, step_id: int, tool_name: str, *args: Any, **kwargs: Any
    ) -> Any:
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
            r = await self._engine.execute_step(transaction_id, step_id, tool_name, *args, **kwargs)
            span.set_attribute("agenttx.step.status", r.status.value)
            span.set_attribute("agenttx.step.strategy", r.strategy.value)
            span.set_attribute("agenttx.step.next_step_id", r.next_step_id)
            if r.status.value != "SUCCESS":
                span.set_attribute("agenttx.step.rollback_to_step", r.rollback_to_step)
                span.set_attribute("agenttx.step.error_category", r.error_category)
                span.set_attribute("agenttx.step.hint", r.clean_hint)
                span.set_status(trace.StatusCode.ERROR, r.status.value)
            return r

    async def commit(self, transaction_id: str, *args: Any, **kwargs: Any) -> Any:
        parent, links = self._step_parent(transaction_id)
        with self._tracer.start_as_current_span(
            "agenttx.commit",
            context=parent,
            links=links,
            attributes={"agenttx.transaction_id": transaction_id},
        ) as span:
            c = await self._engine.commit(transaction_id, *args, **kwargs)
            span.set_attribute("agenttx.commit.steps_committed", c.steps_committed)
            return c

    async def rollback(self, transaction_id: str, *args: Any, **kwargs: Any) -> Any:
        parent, links = self._step_parent(transaction_id)
        with self._tracer.start_as_current_span(
            "agenttx.rollback",
            context=parent,
            links=links,
            attributes={"agenttx.transaction_id": transaction_id},
        ) as span:
            b = await self._engine.rollback(transaction_id, *args, **kwargs)
            span.set_attribute("agenttx.rollback.next_step_id", b.next_step_id)
            return b


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
