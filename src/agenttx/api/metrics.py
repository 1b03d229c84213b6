"""Prometheus metrics and the per-call log line, both fed by one gRPC server interceptor.

The servicer (``grpc.server``) stays a pure translator: ``CallObserver`` sees each unary call
of ``agenttx.v1.AgentTxService`` from outside — request, reply or status code, duration — and
turns it into counters, histograms and one log record carrying the transaction and step ids.
Transactions by final status come from the engine's event bus instead (every terminal state
change, including aborts by the idle reaper and by recovery, which no call reply shows), and
the outbox gauges from a periodic read of the store.

Every metric lives in the ``Metrics`` object's own ``CollectorRegistry``, never the global one,
so several engines in one process (tests, an embedding application) do not collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client import start_http_server as _start_http_server

from agenttx.core.events import TxEvent
from agenttx.store.contract import Store
from agenttx.wire import agenttx_pb2 as pb

log = logging.getLogger("agenttx.rpc")

SERVICE_PREFIX = "/agenttx.v1.AgentTxService/"

# Seconds. Rewinds and commits on SQLite take well under a millisecond to tens of
# milliseconds; the long tail is compensations calling outside systems.
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# Steps run user tools under a 30 s default timeout.
_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)

# Codes that mean the caller sent something the protocol refuses: logged at WARNING.
# Anything else that is not OK (INTERNAL, UNKNOWN, CANCELLED …) is logged at ERROR.
_CLIENT_CODES = frozenset(
    {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "ALREADY_EXISTS", "ABORTED"}
)


class Metrics:
    """The server's metrics, in a registry of their own (all names start ``agenttx_``)."""

    def __init__(self, version: str = "") -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        Info("agenttx_build", "AgentTx version.", registry=r).info({"version": version})
        self.transactions = Counter(
            "agenttx_transactions",
            "Transactions that reached a final status (COMMITTED, ROLLED_BACK, FAILED).",
            ["status"],
            registry=r,
        )
        self.steps = Counter(
            "agenttx_steps",
            "ExecuteStep replies by step status and rollback strategy.",
            ["status", "strategy"],
            registry=r,
        )
        self.step_duration = Histogram(
            "agenttx_step_duration_seconds",
            "ExecuteStep call duration, tool run and any rewind included.",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.rollback_latency = Histogram(
            "agenttx_rollback_latency_seconds",
            "Time to rewind state: automatic rollbacks by controller strategy (the step "
            "reply's rollback_latency_ms), MANUAL and ABORT for RollbackTransaction calls.",
            ["strategy"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_latency = Histogram(
            "agenttx_commit_latency_seconds",
            "CommitTransaction call duration by outcome (committed, conflict, error).",
            ["outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.compensation_failures = Counter(
            "agenttx_compensation_failures",
            "Compensations that failed after their retries (source: step or rollback).",
            ["source"],
            registry=r,
        )
        self.dispatch_errors = Counter(
            "agenttx_effect_dispatch_errors",
            "Effects whose first delivery at commit failed (they stay queued for retries).",
            registry=r,
        )
        self.outbox_depth = Gauge(
            "agenttx_outbox_depth",
            "Outbox effects waiting for delivery (pending + delivering).",
            registry=r,
        )
        self.outbox_dead = Gauge(
            "agenttx_outbox_dead_letters",
            "Outbox effects that exhausted their delivery attempts.",
            registry=r,
        )
        # Every status, delivered included (kept until retention prunes them): a dashboard
        # plots delivery throughput from it, and pending vs dead without the sum above.
        self.outbox_effects = Gauge(
            "agenttx_outbox_effects",
            "Outbox effects by status (pending, delivering, delivered, dead).",
            ["status"],
            registry=r,
        )
        self.rpcs = Counter(
            "agenttx_rpc",
            "AgentTxService calls by method and gRPC status code.",
            ["method", "code"],
            registry=r,
        )
        self.rpc_duration = Histogram(
            "agenttx_rpc_duration_seconds",
            "AgentTxService call duration by method.",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._step_children: dict[tuple[int, int], Counter] = {}

    # -- feeds -------------------------------------------------------------------------------

    def on_event(self, event: TxEvent) -> None:
        """An ``EventBus`` listener: count transactions as they reach a final status."""
        if event.status.terminal:
            self.transactions.labels(event.status.value).inc()

    def on_call(self, method: str, code: str, seconds: float, request: Any, reply: Any) -> None:
        """Record one finished call (``reply`` is None unless ``code`` is OK)."""
        # Labelled children are looked up once per label set: every call records two or
        # three, and prometheus_client's labels() takes a lock and builds a key each time.
        children = self._children.get((method, code))
        if children is None:
            children = (self.rpcs.labels(method, code), self.rpc_duration.labels(method))
            self._children[(method, code)] = children
        children[0].inc()
        children[1].observe(seconds)
        if method == "CommitTransaction":
            outcome = {"OK": "committed", "ABORTED": "conflict"}.get(code, "error")
            self.commit_latency.labels(outcome).observe(seconds)
        if reply is None:
            return
        if isinstance(reply, pb.ExecuteStepResponse):
            strategy = _strategy(reply.strategy)
            step = self._step_children.get((reply.status, reply.strategy))
            if step is None:
                step = self.steps.labels(_step_status(reply.status), strategy)
                self._step_children[(reply.status, reply.strategy)] = step
            step.inc()
            self.step_duration.observe(seconds)
            if strategy not in ("NONE", "UNSPECIFIED"):
                self.rollback_latency.labels(strategy).observe(reply.rollback_latency_ms / 1000)
            if reply.compensation_errors:
                self.compensation_failures.labels("step").inc(len(reply.compensation_errors))
        elif isinstance(reply, pb.RollbackTransactionResponse):
            manual = request.HasField("to_step") and request.to_step > 0
            self.rollback_latency.labels("MANUAL" if manual else "ABORT").observe(seconds)
            if reply.compensation_errors:
                self.compensation_failures.labels("rollback").inc(len(reply.compensation_errors))
        elif isinstance(reply, pb.CommitTransactionResponse) and reply.dispatch_errors:
            self.dispatch_errors.inc(len(reply.dispatch_errors))

    async def refresh_outbox(self, store: Store) -> None:
        counts = await store.outbox_counts()
        self.outbox_depth.set(counts.get("pending", 0) + counts.get("delivering", 0))
        self.outbox_dead.set(counts.get("dead", 0))
        for status in ("pending", "delivering", "delivered", "dead"):
            self.outbox_effects.labels(status).set(counts.get(status, 0))

    async def watch_outbox(self, store: Store, stop: asyncio.Event, interval: float = 2.0) -> None:
        """Refresh the outbox gauges every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.refresh_outbox(store)
            except Exception:
                # A scrape showing a stale depth beats a server that dies of a busy database.
                log.warning("outbox metrics refresh failed", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    def exposition(self) -> bytes:
        """The text format a Prometheus scrape of ``/metrics`` returns."""
        return generate_latest(self.registry)


_STEP_STATUS_NAMES = {
    v.number: v.name.removeprefix("STEP_STATUS_") for v in pb.StepStatus.DESCRIPTOR.values
}
_STRATEGY_NAMES = {
    v.number: v.name.removeprefix("ROLLBACK_STRATEGY_")
    for v in pb.RollbackStrategy.DESCRIPTOR.values
}


def _step_status(value: int) -> str:
    return _STEP_STATUS_NAMES.get(value) or str(value)


def _strategy(value: int) -> str:
    return _STRATEGY_NAMES.get(value) or str(value)


@dataclass
class MetricsEndpoint:
    """The HTTP server behind ``/metrics`` (a daemon thread of prometheus_client)."""

    host: str
    port: int
    _httpd: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def serve_metrics(metrics: Metrics, host: str, port: int) -> MetricsEndpoint:
    """Serve ``metrics`` over HTTP on ``host:port`` (port 0 picks a free one)."""
    httpd, _thread = _start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsEndpoint(host, int(httpd.server_port), httpd)


# -- the interceptor --------------------------------------------------------------------------

# Request and reply fields worth a log field, in the order they are printed.
_LOGGED = ("transaction_id", "step_id", "tool_name", "to_step")
_REPLY_LOGGED = ("transaction_id", "next_step_id", "committed", "rolled_back")


def _call_fields(request: Any, reply: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in _LOGGED:
        if name in type(request).DESCRIPTOR.fields_by_name and _has(request, name):
            fields[name] = getattr(request, name)
    if reply is None:
        return fields
    for name in _REPLY_LOGGED:
        if name in type(reply).DESCRIPTOR.fields_by_name and name not in fields:
            fields[name] = getattr(reply, name)
    if isinstance(reply, pb.ExecuteStepResponse):
        fields["status"] = _step_status(reply.status)
        fields["strategy"] = _strategy(reply.strategy)
        fields["next_step_id"] = reply.next_step_id
        if reply.error_category:
            # Our finer name, as before field 9 spoke the reference's vocabulary.
            fields["error_category"] = reply.error_category_detail or reply.error_category
        if reply.compensation_errors:
            fields["compensation_errors"] = len(reply.compensation_errors)
    elif isinstance(reply, pb.RollbackTransactionResponse) and reply.compensation_errors:
        fields["compensation_errors"] = len(reply.compensation_errors)
    elif isinstance(reply, pb.CommitTransactionResponse):
        fields["effects_dispatched"] = reply.effects_dispatched
        if reply.dispatch_errors:
            fields["dispatch_errors"] = len(reply.dispatch_errors)
    return fields


def _has(message: Any, name: str) -> bool:
    field = type(message).DESCRIPTOR.fields_by_name[name]
    if field.has_presence:
        return bool(message.HasField(name))
    return bool(getattr(message, name))


Handler = Callable[[Any, Any], Awaitable[Any]]


class CallObserver(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times each unary AgentTxService call, feeds ``metrics`` (if any) and logs one record:
    INFO when OK, WARNING for a refused request, ERROR otherwise. Streams (WatchTransaction)
    and the health and reflection services pass through untouched."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics
        # The observed handler per method, made once: gRPC asks on every call.
        self._observed: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        method_path: str = details.method
        if (
            handler is None
            or handler.unary_unary is None
            or not method_path.startswith(SERVICE_PREFIX)
        ):
            return handler
        known = self._observed.get(method_path)
        if known is not None and known[0] is handler:
            return known[1]
        observed = self._observe(method_path.removeprefix(SERVICE_PREFIX), handler.unary_unary)
        wrapped = grpc.unary_unary_rpc_method_handler(
            observed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._observed[method_path] = (handler, wrapped)
        return wrapped

    def _observe(self, method: str, inner: Handler) -> Handler:
        async def observed(request: Any, context: Any) -> Any:
            start = time.perf_counter()
            reply, code = None, "OK"
            try:
                reply = await inner(request, context)
                return reply
            except asyncio.CancelledError:
                code = "CANCELLED"  # the client went away, or the drain's grace ran out
                raise
            except grpc.aio.AbortError:
                code = _code_name(context.code())
                raise
            except Exception:
                code = "UNKNOWN"
                raise
            finally:
                self._finished(method, code, time.perf_counter() - start, request, reply, context)

        return observed

    def _finished(
        self, method: str, code: str, seconds: float, request: Any, reply: Any, context: Any
    ) -> None:
        if self.metrics is not None:
            self.metrics.on_call(method, code, seconds, request, reply)
        level = (
            logging.INFO
            if code == "OK"
            else logging.WARNING
            if code in _CLIENT_CODES
            else logging.ERROR
        )
        if level == logging.INFO and method == "ExecuteStep" and _succeeded(reply):
            # The hot path: one line per successful step costs more than the step (measured);
            # failures, rollbacks and every other call stay at INFO.
            level = logging.DEBUG
        if not log.isEnabledFor(level):
            return
        fields: dict[str, Any] = {"rpc": method, "code": code}
        fields.update(_call_fields(request, reply))
        fields["duration_ms"] = round(seconds * 1000, 3)
        if code != "OK":
            with contextlib.suppress(Exception):
                if context.details():
                    fields["error"] = context.details()
        log.log(level, "%s %s", method, code, extra=fields)


def _code_name(code: Any) -> str:
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if code is None else str(code)


def _succeeded(reply: Any) -> bool:
    return getattr(reply, "status", 0) == 1  # STEP_STATUS_SUCCESS
