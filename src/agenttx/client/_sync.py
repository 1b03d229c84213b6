"""``AgentTxClient``: the blocking client, and its transaction helper ``Transaction``."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.client import _audit as audit_wire
from agenttx.client import _wire as wire
from agenttx.client._cursor import TransactionCursor
from agenttx.client._errors import RollbackTriggered
from agenttx.client._loop import DEFAULT_MAX_CALLS, Agent, as_call, calls_exhausted
from agenttx.client._wire import (
    DEFAULT_TARGET,
    SERVICE_NAME,
    PolicyArg,
    RetryPolicy,
    StepPage,
    ToolInfo,
    TransactionEvent,
    TransactionListPage,
    TransactionSummary,
)
from agenttx.errors import AgentTxError
from agenttx.types import (
    BeginResult,
    CommitResult,
    RollbackResult,
    StepResult,
    StepView,
    TransactionInfo,
    TxStatus,
)
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc


class AgentTxClient:
    """A blocking client of ``agenttx.v1.AgentTxService``; thread-safe, one channel.

    ``AgentTxClient("host:port")`` opens an insecure channel; give ``credentials``
    (``grpc.ssl_channel_credentials(...)``) for TLS, or a ready ``channel``. ``timeout`` is the
    deadline of each call in seconds (None: none); ``metadata`` is sent with every call.
    UNAVAILABLE is retried per ``retry`` with the same request_id; when every attempt fails
    the call raises ``ServerUnavailable``. Other failures raise the matching ``AgentTxError``.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        credentials: Any = None,
        options: Sequence[tuple[str, Any]] = (),
        interceptors: Sequence[Any] = (),
        metadata: Sequence[tuple[str, str]] = (),
        channel: Any = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = tuple(metadata)
        # Sent on every call: the caller's metadata, then what this client understands.
        self._call_metadata = (*self.metadata, *wire.CLIENT_METADATA)
        self._owns_channel = channel is None
        if channel is None:
            opts = [*self.retry.channel_options(), *options]
            channel = (
                grpc.secure_channel(target, credentials, options=opts)
                if credentials is not None
                else grpc.insecure_channel(target, options=opts)
            )
        self._channel = channel
        if interceptors:
            channel = grpc.intercept_channel(channel, *interceptors)
        self._stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        self._health = health_pb2_grpc.HealthStub(channel)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> AgentTxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the reference's RPCs

    def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: PolicyArg = None,
        *,
        isolation: str = "",
        labels: Sequence[str] = (),
        request_id: str | None = None,
    ) -> BeginResult:
        """Begin a transaction. ``policy`` overrides the server's rollback policy: a
        ``RollbackPolicy`` or a dict of some of its fields."""
        req = wire.begin_request(agent_id, metadata, policy, isolation, labels, request_id)
        return wire.begin_result(self._call("BeginTransaction", req))

    def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
        *,
        request_id: str | None = None,
    ) -> StepResult:
        """Run one step. A tool failure is data in the result (ROLLBACK_TRIGGERED, FAILED,
        OUTCOME_UNKNOWN), never an exception; ``arguments`` is a JSON-able value or JSON text."""
        req = wire.step_request(
            transaction_id, step_id, tool_name, arguments, raw_context, request_id
        )
        return wire.step_result(self._call("ExecuteStep", req), req)

    def commit(self, transaction_id: str, *, request_id: str | None = None) -> CommitResult:
        req = wire.commit_request(transaction_id, request_id)
        return wire.commit_result(self._call("CommitTransaction", req), transaction_id)

    def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str | None = None,
    ) -> RollbackResult:
        """Rewind to ``to_step`` and stay open, or (``to_step`` None or 0) abort."""
        req = wire.rollback_request(transaction_id, to_step, reason, request_id)
        return wire.rollback_result(self._call("RollbackTransaction", req), transaction_id)

    def get_transaction(self, transaction_id: str) -> TransactionInfo:
        """The transaction and its whole history. A history too large for one reply (the
        server trims it to the 4 MiB message limit) is completed page by page with
        ``ListSteps``, so the result is the same as the embedded engine's."""
        req = pb.GetTransactionRequest(transaction_id=transaction_id)
        reply = self._call("GetTransaction", req)
        info = wire.transaction_info(reply)
        if not reply.history_trimmed:
            return info
        pages: list[wire.StepPage] = []
        token = ""
        while True:
            pages.append(self.list_steps(transaction_id, page_token=token))
            token = pages[-1].next_page_token
            if not token:
                return wire.with_history(info, pages)

    def list_steps(
        self, transaction_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> StepPage:
        """One page of the history (every attempt, execution order), at most ``page_size``
        records (default 50, at most 500) and one message; pass ``next_page_token`` back for
        the next."""
        req = wire.steps_request(transaction_id, page_size, page_token)
        return wire.step_page(self._call("ListSteps", req))

    def iter_steps(self, transaction_id: str, *, page_size: int = 0) -> Iterator[StepView]:
        """Every attempt of every step, in execution order, fetching pages as it goes."""
        token = ""
        while True:
            page = self.list_steps(transaction_id, page_size=page_size, page_token=token)
            yield from page.steps
            token = page.next_page_token
            if not token:
                return

    # ------------------------------------------------------------------ ours

    def list_transactions(
        self,
        *,
        statuses: Sequence[str | TxStatus] = (),
        agent_id: str = "",
        label: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> TransactionListPage:
        """One page, oldest first; pass ``next_page_token`` back for the next one."""
        req = wire.list_request(statuses, agent_id, label, page_size, page_token)
        return wire.list_page(self._call("ListTransactions", req))

    def iter_transactions(
        self,
        *,
        statuses: Sequence[str | TxStatus] = (),
        agent_id: str = "",
        label: str = "",
        page_size: int = 0,
    ) -> Iterator[TransactionSummary]:
        """Every matching transaction, fetching pages as it goes."""
        token = ""
        while True:
            page = self.list_transactions(
                statuses=statuses,
                agent_id=agent_id,
                label=label,
                page_size=page_size,
                page_token=token,
            )
            yield from page.transactions
            token = page.next_page_token
            if not token:
                return

    def list_tools(self) -> list[ToolInfo]:
        return wire.tools(self._call("ListTools", pb.ListToolsRequest()))

    def verify_audit(self, transaction_id: str) -> AuditVerification:
        """Check the transaction's audit chain (``v.ok``, ``v.records``, ``v.first_bad``)."""
        reply = self._call("VerifyAudit", audit_wire.verify_request(transaction_id))
        return audit_wire.verification(reply.results[0])

    def iter_audit_verifications(self, *, page_size: int = 0) -> Iterator[AuditVerification]:
        """Every chain of the server's store checked, in transaction id order."""
        token = ""
        while True:
            reply = self._call("VerifyAudit", audit_wire.verify_all_request(page_size, token))
            yield from (audit_wire.verification(v) for v in reply.results)
            token = reply.next_page_token
            if not token:
                return

    def audit_records(
        self, transaction_id: str, *, after_seq: int = 0, page_size: int = 0
    ) -> tuple[list[AuditRecord], int]:
        """One page of the audit chain and the ``after_seq`` of the next (0: no more)."""
        req = audit_wire.records_request(transaction_id, after_seq, page_size)
        reply = self._call("ListAuditRecords", req)
        return audit_wire.records(reply, transaction_id), reply.next_after_seq

    def iter_audit_records(self, transaction_id: str) -> Iterator[AuditRecord]:
        """The whole audit chain, oldest first, fetching pages as it goes."""
        after = 0
        while True:
            page, after = self.audit_records(transaction_id, after_seq=after)
            yield from page
            if not after:
                return

    def watch(self, transaction_id: str, after_revision: int = 0) -> Iterator[TransactionEvent]:
        """The transaction's changes, one event per revision, until it ends. If the server
        becomes unreachable the stream resumes after the last event seen (bounded by
        ``retry``). Closing the iterator early cancels the stream."""
        last = after_revision
        failures = 0
        while True:
            req = pb.WatchTransactionRequest(transaction_id=transaction_id, after_revision=last)
            stream = self._stub.WatchTransaction(req, timeout=None, metadata=self._call_metadata)
            try:
                for message in stream:
                    failures = 0
                    e = wire.event(message)
                    last = max(last, e.revision)
                    yield e
                return
            except grpc.RpcError as exc:
                status = wire.status_of(exc)
                failures += 1
                if status[0] not in self.retry.retry_on or failures >= self.retry.max_attempts:
                    raise wire.failure(status, failures, self.target) from exc
                time.sleep(self.retry.backoff(failures))
            finally:
                stream.cancel()

    def health(self, service: str = SERVICE_NAME) -> str:
        """The server's health for ``service``: SERVING, NOT_SERVING, SERVICE_UNKNOWN …"""
        req = health_pb2.HealthCheckRequest(service=service)
        reply = self._call_on(self._health.Check, req)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    # ------------------------------------------------------------------ the helper

    def transaction(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: PolicyArg = None,
        *,
        isolation: str = "",
        labels: Sequence[str] = (),
    ) -> Transaction:
        """``with client.transaction(...) as tx:`` begins a transaction, commits it when the
        block ends cleanly and rolls it back when the block raises — or when it ends cleanly
        while steps the server rolled back were not redone (then ``StepsNotRedone``)."""
        return Transaction(self, agent_id, metadata, policy, isolation, labels)

    # ------------------------------------------------------------------ calls

    def _call(self, method: str, request: Any) -> Any:
        return self._call_on(getattr(self._stub, method), request)

    def _call_on(self, rpc: Any, request: Any) -> Any:
        # The request object is built once, so every attempt carries the same request_id.
        attempt = 0
        while True:
            attempt += 1
            try:
                return rpc(request, timeout=self.timeout, metadata=self._call_metadata)
            except grpc.RpcError as exc:
                status = wire.status_of(exc)
                if status[0] not in self.retry.retry_on or attempt >= self.retry.max_attempts:
                    raise wire.failure(status, attempt, self.target) from exc
            time.sleep(self.retry.backoff(attempt))


class Transaction(TransactionCursor):
    """One transaction driven step by step; made by ``AgentTxClient.transaction``.

    ``step`` sends the step id the server expects and returns the tool's output, or raises
    ``RollbackTriggered`` (the helper already points at ``next_step_id``: re-plan and call
    ``step`` again), ``TransactionAborted`` or ``OutcomeUnknown``. ``run(agent)`` is that loop,
    driven: the agent callback returns each next call.
    """

    def __init__(
        self,
        client: AgentTxClient,
        agent_id: str,
        metadata: Mapping[str, str] | None,
        policy: PolicyArg,
        isolation: str,
        labels: Sequence[str],
    ) -> None:
        super().__init__(agent_id, metadata, policy, isolation, labels)
        self.client = client

    def begin(self) -> BeginResult:
        rid = self._begin_request_id()
        try:
            return self._begun(self.client.begin(**self._begin_args, request_id=rid))
        except AgentTxError as exc:
            self._failed(exc)
            raise

    def step(self, tool: str, args: Any = None, raw_context: str = "") -> Any:
        arguments = wire.arguments_json(args)
        step_id = self.next_step_id
        rid = self._open_request_id(("step", step_id, tool, arguments, raw_context), "step")
        try:
            r = self.client.execute_step(
                self.transaction_id, step_id, tool, arguments, raw_context, request_id=rid
            )
        except AgentTxError as exc:
            self._failed(exc)
            raise
        return self._stepped(r, tool)

    def commit(self) -> CommitResult:
        rid = self._open_request_id(("commit",), "commit")
        try:
            return self._committed(self.client.commit(self.transaction_id, request_id=rid))
        except AgentTxError as exc:
            self._failed(exc)
            raise

    def rollback(self, to_step: int | None = None, reason: str = "") -> RollbackResult:
        """Rewind to ``to_step`` (the transaction stays open), or abort when it is None."""
        rid = self._open_request_id(("rollback", to_step, reason), "roll back")
        try:
            r = self.client.rollback(self.transaction_id, to_step, reason, request_id=rid)
        except AgentTxError as exc:
            self._failed(exc)
            raise
        return self._rolled_back(r)

    def run(self, agent: Agent, *, max_calls: int = DEFAULT_MAX_CALLS) -> dict[int, Any]:
        """Drive the resume loop: ask ``agent(turn)`` for each next call and send it; after a
        rollback the next turn carries the hint, the constraints and where to resume. Ends
        when the agent returns None, with the outputs of the steps that stand; the block's end
        then commits (or refuses, if rewound steps were not redone). ``TransactionAborted``
        and ``OutcomeUnknown`` end it early; more than ``max_calls`` calls is an error."""
        turn = self._turn(None, 0)
        while True:
            answer = agent(turn)
            if answer is None:
                return self.outputs
            if turn.calls >= max_calls:
                raise calls_exhausted(self.transaction_id, max_calls)
            call = as_call(answer)
            try:
                self.step(call.tool, call.arguments, call.raw_context)
                turn = self._turn(None, turn.calls + 1)
            except RollbackTriggered as rolled_back:
                turn = self._turn(rolled_back, turn.calls + 1)

    def info(self) -> TransactionInfo:
        return self.client.get_transaction(self.transaction_id)

    def __enter__(self) -> Transaction:
        self.begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.ended or self.status is None:
            return
        if exc is None:
            unfinished = self._unfinished()
            if unfinished is None:
                self.commit()
                return
            # Committing now would drop steps the server rewound: all or nothing, so abort.
            try:
                self.rollback(reason=self._exit_reason(unfinished))
            except AgentTxError as abort_error:
                unfinished.add_note(f"agenttx: rolling back failed: {abort_error}")
            raise unfinished
        try:
            self.rollback(reason=self._exit_reason(exc))
        except AgentTxError as abort_error:
            # The block's exception is what the caller needs to see; say the abort failed.
            exc.add_note(f"agenttx: rolling back {self.transaction_id} failed: {abort_error}")
