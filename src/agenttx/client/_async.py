"""``AsyncAgentTxClient``: the asyncio twin of ``AgentTxClient``, and ``AsyncTransaction``.

Same methods, same arguments, same results and errors; every call is awaited. A ``grpc.aio``
channel belongs to the event loop it was made on: create the client inside that loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.client import _audit as audit_wire
from agenttx.client import _wire as wire
from agenttx.client._cursor import TransactionCursor
from agenttx.client._errors import RollbackTriggered
from agenttx.client._loop import (
    DEFAULT_MAX_CALLS,
    AgentTurn,
    Answer,
    AsyncAgent,
    as_call,
    calls_exhausted,
)
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


class AsyncAgentTxClient:
    """An asyncio client of ``agenttx.v1.AgentTxService`` (see ``AgentTxClient``)."""

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
                grpc.aio.secure_channel(
                    target, credentials, options=opts, interceptors=list(interceptors) or None
                )
                if credentials is not None
                else grpc.aio.insecure_channel(
                    target, options=opts, interceptors=list(interceptors) or None
                )
            )
        self._channel = channel
        self._stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        self._health = health_pb2_grpc.HealthStub(channel)

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> AsyncAgentTxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the reference's RPCs

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: PolicyArg = None,
        *,
        isolation: str = "",
        labels: Sequence[str] = (),
        request_id: str | None = None,
    ) -> BeginResult:
        req = wire.begin_request(agent_id, metadata, policy, isolation, labels, request_id)
        return wire.begin_result(await self._call("BeginTransaction", req))

    async def execute_step(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
        *,
        request_id: str | None = None,
    ) -> StepResult:
        req = wire.step_request(
            transaction_id, step_id, tool_name, arguments, raw_context, request_id
        )
        return wire.step_result(await self._call("ExecuteStep", req), req)

    async def commit(self, transaction_id: str, *, request_id: str | None = None) -> CommitResult:
        req = wire.commit_request(transaction_id, request_id)
        return wire.commit_result(await self._call("CommitTransaction", req), transaction_id)

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str | None = None,
    ) -> RollbackResult:
        req = wire.rollback_request(transaction_id, to_step, reason, request_id)
        return wire.rollback_result(await self._call("RollbackTransaction", req), transaction_id)

    async def get_transaction(self, transaction_id: str) -> TransactionInfo:
        """The transaction and its whole history. A history too large for one reply (the
        server trims it to the 4 MiB message limit) is completed page by page with
        ``ListSteps``, so the result is the same as the embedded engine's."""
        req = pb.GetTransactionRequest(transaction_id=transaction_id)
        reply = await self._call("GetTransaction", req)
        info = wire.transaction_info(reply)
        if not reply.history_trimmed:
            return info
        pages: list[wire.StepPage] = []
        token = ""
        while True:
            pages.append(await self.list_steps(transaction_id, page_token=token))
            token = pages[-1].next_page_token
            if not token:
                return wire.with_history(info, pages)

    async def list_steps(
        self, transaction_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> StepPage:
        """One page of the history (every attempt, execution order), at most ``page_size``
        records (default 50, at most 500) and one message; pass ``next_page_token`` back for
        the next."""
        req = wire.steps_request(transaction_id, page_size, page_token)
        return wire.step_page(await self._call("ListSteps", req))

    async def iter_steps(
        self, transaction_id: str, *, page_size: int = 0
    ) -> AsyncIterator[StepView]:
        """Every attempt of every step, in execution order, fetching pages as it goes."""
        token = ""
        while True:
            page = await self.list_steps(transaction_id, page_size=page_size, page_token=token)
            for step in page.steps:
                yield step
            token = page.next_page_token
            if not token:
                return

    # ------------------------------------------------------------------ ours

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str | TxStatus] = (),
        agent_id: str = "",
        label: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> TransactionListPage:
        req = wire.list_request(statuses, agent_id, label, page_size, page_token)
        return wire.list_page(await self._call("ListTransactions", req))

    async def iter_transactions(
        self,
        *,
        statuses: Sequence[str | TxStatus] = (),
        agent_id: str = "",
        label: str = "",
        page_size: int = 0,
    ) -> AsyncIterator[TransactionSummary]:
        token = ""
        while True:
            page = await self.list_transactions(
                statuses=statuses,
                agent_id=agent_id,
                label=label,
                page_size=page_size,
                page_token=token,
            )
            for t in page.transactions:
                yield t
            token = page.next_page_token
            if not token:
                return

    async def list_tools(self) -> list[ToolInfo]:
        return wire.tools(await self._call("ListTools", pb.ListToolsRequest()))

    async def verify_audit(self, transaction_id: str) -> AuditVerification:
        """Check the transaction's audit chain (``v.ok``, ``v.records``, ``v.first_bad``)."""
        reply = await self._call("VerifyAudit", audit_wire.verify_request(transaction_id))
        return audit_wire.verification(reply.results[0])

    async def iter_audit_verifications(
        self, *, page_size: int = 0
    ) -> AsyncIterator[AuditVerification]:
        """Every chain of the server's store checked, in transaction id order."""
        token = ""
        while True:
            req = audit_wire.verify_all_request(page_size, token)
            reply = await self._call("VerifyAudit", req)
            for v in reply.results:
                yield audit_wire.verification(v)
            token = reply.next_page_token
            if not token:
                return

    async def audit_records(
        self, transaction_id: str, *, after_seq: int = 0, page_size: int = 0
    ) -> tuple[list[AuditRecord], int]:
        """One page of the audit chain and the ``after_seq`` of the next (0: no more)."""
        req = audit_wire.records_request(transaction_id, after_seq, page_size)
        reply = await self._call("ListAuditRecords", req)
        return audit_wire.records(reply, transaction_id), reply.next_after_seq

    async def iter_audit_records(self, transaction_id: str) -> AsyncIterator[AuditRecord]:
        """The whole audit chain, oldest first, fetching pages as it goes."""
        after = 0
        while True:
            page, after = await self.audit_records(transaction_id, after_seq=after)
            for rec in page:
                yield rec
            if not after:
                return

    async def watch(
        self, transaction_id: str, after_revision: int = 0
    ) -> AsyncIterator[TransactionEvent]:
        last = after_revision
        failures = 0
        while True:
            req = pb.WatchTransactionRequest(transaction_id=transaction_id, after_revision=last)
            stream = self._stub.WatchTransaction(req, timeout=None, metadata=self._call_metadata)
            try:
                async for message in stream:
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
                await asyncio.sleep(self.retry.backoff(failures))
            finally:
                stream.cancel()

    async def health(self, service: str = SERVICE_NAME) -> str:
        req = health_pb2.HealthCheckRequest(service=service)
        reply = await self._call_on(self._health.Check, req)
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
    ) -> AsyncTransaction:
        """``async with client.transaction(...) as tx:`` — see ``AgentTxClient.transaction``."""
        return AsyncTransaction(self, agent_id, metadata, policy, isolation, labels)

    # ------------------------------------------------------------------ calls

    async def _call(self, method: str, request: Any) -> Any:
        return await self._call_on(getattr(self._stub, method), request)

    async def _call_on(self, rpc: Any, request: Any) -> Any:
        # The request object is built once, so every attempt carries the same request_id.
        attempt = 0
        while True:
            attempt += 1
            try:
                return await rpc(request, timeout=self.timeout, metadata=self._call_metadata)
            except grpc.RpcError as exc:
                status = wire.status_of(exc)
                if status[0] not in self.retry.retry_on or attempt >= self.retry.max_attempts:
                    raise wire.failure(status, attempt, self.target) from exc
            await asyncio.sleep(self.retry.backoff(attempt))


class AsyncTransaction(TransactionCursor):
    """The asyncio twin of ``Transaction``."""

    def __init__(
        self,
        client: AsyncAgentTxClient,
        agent_id: str,
        metadata: Mapping[str, str] | None,
        policy: PolicyArg,
        isolation: str,
        labels: Sequence[str],
    ) -> None:
        super().__init__(agent_id, metadata, policy, isolation, labels)
        self.client = client

    async def begin(self) -> BeginResult:
        rid = self._begin_request_id()
        try:
            return self._begun(await self.client.begin(**self._begin_args, request_id=rid))
        except AgentTxError as exc:
            self._failed(exc)
            raise

    async def step(self, tool: str, args: Any = None, raw_context: str = "") -> Any:
        arguments = wire.arguments_json(args)
        step_id = self.next_step_id
        rid = self._open_request_id(("step", step_id, tool, arguments, raw_context), "step")
        try:
            r = await self.client.execute_step(
                self.transaction_id, step_id, tool, arguments, raw_context, request_id=rid
            )
        except AgentTxError as exc:
            self._failed(exc)
            raise
        return self._stepped(r, tool)

    async def commit(self) -> CommitResult:
        rid = self._open_request_id(("commit",), "commit")
        try:
            return self._committed(await self.client.commit(self.transaction_id, request_id=rid))
        except AgentTxError as exc:
            self._failed(exc)
            raise

    async def rollback(self, to_step: int | None = None, reason: str = "") -> RollbackResult:
        rid = self._open_request_id(("rollback", to_step, reason), "roll back")
        try:
            r = await self.client.rollback(self.transaction_id, to_step, reason, request_id=rid)
        except AgentTxError as exc:
            self._failed(exc)
            raise
        return self._rolled_back(r)

    async def run(self, agent: AsyncAgent, *, max_calls: int = DEFAULT_MAX_CALLS) -> dict[int, Any]:
        """The asyncio twin of ``Transaction.run``; ``agent`` may be sync or async."""
        turn = self._turn(None, 0)
        while True:
            answer = await _answer(agent, turn)
            if answer is None:
                return self.outputs
            if turn.calls >= max_calls:
                raise calls_exhausted(self.transaction_id, max_calls)
            call = as_call(answer)
            try:
                await self.step(call.tool, call.arguments, call.raw_context)
                turn = self._turn(None, turn.calls + 1)
            except RollbackTriggered as rolled_back:
                turn = self._turn(rolled_back, turn.calls + 1)

    async def info(self) -> TransactionInfo:
        return await self.client.get_transaction(self.transaction_id)

    async def __aenter__(self) -> AsyncTransaction:
        await self.begin()
        return self

    async def __aexit__(
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
                await self.commit()
                return
            # Committing now would drop steps the server rewound: all or nothing, so abort.
            try:
                await self.rollback(reason=self._exit_reason(unfinished))
            except AgentTxError as abort_error:
                unfinished.add_note(f"agenttx: rolling back failed: {abort_error}")
            raise unfinished
        try:
            await self.rollback(reason=self._exit_reason(exc))
        except AgentTxError as abort_error:
            exc.add_note(f"agenttx: rolling back {self.transaction_id} failed: {abort_error}")


async def _answer(agent: AsyncAgent, turn: AgentTurn) -> Answer:
    answer = agent(turn)
    if inspect.isawaitable(answer):
        return await answer
    return answer
