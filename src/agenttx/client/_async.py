"""``AsyncAgentTxClient``: the asyncio client, and its transaction helper ``AsyncTransaction``.

This file is the source of both clients: scripts/gen_sync_client.py writes the
blocking one, ``_sync.py``, from it (``make sync-client``), and a test fails while the
two disagree. Edit this file, never ``_sync.py``; a behaviour that truly differs goes in
a helper pair (``_channel``, ``_loop.ask``). Same methods, same arguments, same results
and errors; every call is awaited, and the client belongs to the event loop it was made
on: create it inside that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agenttx.audit import AuditRecord, AuditVerification
from agenttx.client import _audit as audit_wire
from agenttx.client import _compensation as compensation_wire
from agenttx.client import _effects as effects_wire
from agenttx.client import _lookup as lookup_wire
from agenttx.client import _receipts as receipts
from agenttx.client import _reconcile as reconcile_wire
from agenttx.client import _wire as wire
from agenttx.client._auth import call_metadata, tls_credentials
from agenttx.client._channel import open_aio_channel
from agenttx.client._cursor import TransactionCursor
from agenttx.client._errors import RollbackTriggered
from agenttx.client._loop import DEFAULT_MAX_CALLS, AsyncAgent, as_call, ask_async, calls_exhausted
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
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.types import (
    BeginResult,
    CommitResult,
    CompensationPlan,
    CompensationResult,
    EffectInfo,
    EffectPage,
    FoundTransaction,
    ReceiptView,
    ReconcileResult,
    RollbackResult,
    StepResult,
    StepView,
    TransactionInfo,
    TxStatus,
    UndoResult,
)
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

_SERVICE = pb.DESCRIPTOR.services_by_name["AgentTxService"]


class AsyncAgentTxClient:
    """An asyncio client of ``agenttx.v1.AgentTxService``; one channel, on one event loop.

    ``AsyncAgentTxClient("host:port")`` opens an insecure channel; give ``credentials``
    (``grpc.ssl_channel_credentials(...)``) for TLS, or a ready ``channel``. ``timeout`` is the
    deadline of each call in seconds (None: none); ``metadata`` is sent with every call.
    ``api_key`` is sent as ``authorization: Bearer <key>`` on every call (a server started
    with ``--api-keys`` needs one); ``root_certificates`` (PEM bytes: the CA, or the server's
    self-signed certificate) opens a TLS channel, and ``client_certificate`` with
    ``client_key`` adds a client certificate for mutual TLS.
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
        api_key: str | None = None,
        root_certificates: bytes | None = None,
        client_certificate: bytes | None = None,
        client_key: bytes | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = tuple(metadata)
        credentials = tls_credentials(
            credentials, root_certificates, client_certificate, client_key
        )
        # Sent on every call: the caller's metadata, then what this client understands.
        # The key goes first and is kept nowhere else (never printed, not in ``metadata``).
        self._call_metadata = (*call_metadata(api_key, self.metadata), *wire.CLIENT_METADATA)
        self._owns_channel = channel is None
        opts = [*self.retry.channel_options(), *options]
        channel = open_aio_channel(channel, target, credentials, opts, interceptors)
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
        principal: str = "",
        mode: str = "",
    ) -> BeginResult:
        """Begin a transaction. ``policy`` overrides the server's rollback policy: a
        ``RollbackPolicy`` or a dict of some of its fields."""
        req = wire.begin_request(
            agent_id, metadata, policy, isolation, labels, request_id, principal, mode
        )
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
        dry_run: bool = False,
    ) -> StepResult:
        """Run one step. A tool failure is data in the result (ROLLBACK_TRIGGERED, FAILED,
        OUTCOME_UNKNOWN), never an exception; ``arguments`` is a JSON-able value or JSON text."""
        req = wire.step_request(
            transaction_id, step_id, tool_name, arguments, raw_context, request_id, dry_run
        )
        return wire.step_result(await self._call("ExecuteStep", req), req)

    async def undo_step(self, transaction_id: str, *, request_id: str | None = None) -> UndoResult:
        """Undo the last live step (``docs/undo.md``); ``UndoRefused`` with a hint if it
        cannot be undone."""
        req = wire.undo_request(transaction_id, request_id)
        return wire.undo_result(await self._call("UndoStep", req))

    async def redo_step(self, transaction_id: str, *, request_id: str | None = None) -> UndoResult:
        """Re-apply the step the last undo undid, exactly; ``RedoRefused`` with a hint if
        anything changed since (send the step again instead)."""
        req = wire.redo_request(transaction_id, request_id)
        return wire.undo_result(await self._call("RedoStep", req))

    async def commit(
        self,
        transaction_id: str,
        *,
        request_id: str | None = None,
        expected_revision: int | None = None,
        receipt_id: str = "",
    ) -> CommitResult:
        """Commit. ``expected_revision`` (a snapshot's revision) refuses a transaction that
        moved since (``SnapshotMismatch``); ``receipt_id`` commits exactly that preview's
        change (approved, when the mode or the server's policy asks for approval)."""
        req = wire.commit_request(transaction_id, request_id, expected_revision, receipt_id)
        return wire.commit_result(await self._call("CommitTransaction", req), transaction_id)

    async def preview_commit(self, transaction_id: str) -> Preview:
        """The exact change a commit would make now, with a receipt bound to it."""
        reply = await self._call("PreviewCommit", receipts.preview_request(transaction_id))
        return receipts.preview_result(reply)

    async def approve_commit(
        self, transaction_id: str, receipt_id: str, *, principal: str, roles: Sequence[str] = ()
    ) -> Approval:
        """Approve the receipt's change, once, as ``principal`` holding ``approver``."""
        req = receipts.approve_request(transaction_id, receipt_id, principal, roles)
        return receipts.approval_result(await self._call("ApproveCommit", req))

    async def refuse_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        reason: str,
        *,
        principal: str,
        roles: Sequence[str] = (),
    ) -> Refusal:
        """Refuse the receipt's change, once, as ``principal`` holding ``approver``, saying
        why; the transaction stays open and a commit naming the receipt is refused."""
        req = receipts.refuse_request(transaction_id, receipt_id, reason, principal, roles)
        return receipts.refusal_result(await self._call("RefuseCommit", req))

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str | None = None,
    ) -> RollbackResult:
        """Rewind to ``to_step`` and stay open, or (``to_step`` None or 0) abort."""
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
                return wire.with_history(info, pages, reply.decisions)

    async def find_transaction(
        self, *, receipt_id: str = "", request_id: str = ""
    ) -> FoundTransaction:
        """The transaction a preview receipt (``receipt_id``) or a call's ``request_id`` names
        — give exactly one — with how it ended and its receipts; ``NotFound`` if nothing
        matches. ``get_transaction(found.transaction_id)`` gives its steps."""
        req = lookup_wire.find_request(receipt_id, request_id)
        return lookup_wire.found(await self._call("FindTransaction", req))

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
        principal: str = "",
        tenant: str = "",
    ) -> TransactionListPage:
        """One page, oldest first; pass ``next_page_token`` back for the next one.
        ``principal``: only the transactions it began (of those the caller sees)."""
        req = wire.list_request(statuses, agent_id, label, page_size, page_token, principal, tenant)
        return wire.list_page(await self._call("ListTransactions", req))

    async def iter_transactions(
        self,
        *,
        statuses: Sequence[str | TxStatus] = (),
        agent_id: str = "",
        label: str = "",
        page_size: int = 0,
    ) -> AsyncIterator[TransactionSummary]:
        """Every matching transaction, fetching pages as it goes."""
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

    async def reconcile_step(self, transaction_id: str, step_id: int) -> ReconcileResult:
        """Ask the step's tool whether its uncertain outside call happened, and settle it:
        ``r.outcome`` happened / not_happened / unknown (then ``r.retry_after_ms``). Refused
        with ``ReconcileNotDue``, ``ReconcileInProgress`` or ``NoReconcileHandler``."""
        req = reconcile_wire.reconcile_request(transaction_id, step_id)
        return reconcile_wire.reconcile_result(await self._call("ReconcileStep", req))

    async def resolve_step(
        self,
        transaction_id: str,
        step_id: int,
        outcome: str,
        *,
        output: Any = None,
        reason: str = "",
    ) -> ReconcileResult:
        """An operator's word on an unknown outcome: ``outcome`` happened (with the step's
        ``output``) or not_happened."""
        req = reconcile_wire.resolve_request(transaction_id, step_id, outcome, output, reason)
        return reconcile_wire.reconcile_result(await self._call("ResolveStep", req))

    async def compensate(
        self, transaction_id: str, reason: str = "", *, principal: str = ""
    ) -> CompensationResult:
        """Compensate a committed transaction in a new compensating transaction
        (``k.transaction_id``, ``k.compensation_for``, ``k.status``)."""
        req = compensation_wire.compensate_request(transaction_id, reason, principal)
        return compensation_wire.result(await self._call("CompensateTransaction", req))

    async def compensation_plan(self, transaction_id: str) -> CompensationPlan:
        """What ``compensate`` would run, and what it would report as not undoable."""
        req = compensation_wire.compensate_request(transaction_id, "", "", preview=True)
        return compensation_wire.plan(await self._call("CompensateTransaction", req))

    async def approve_compensation(
        self, transaction_id: str, principal: str, roles: Sequence[str] = ()
    ) -> RollbackResult:
        """Approve the undo a rollback or compensating transaction waits for."""
        req = compensation_wire.approve_request(transaction_id, principal, roles)
        return compensation_wire.approval(await self._call("ApproveCompensation", req))

    async def refuse_compensation(
        self,
        transaction_id: str,
        reason: str,
        principal: str = "",
        roles: Sequence[str] = (),
    ) -> RollbackResult:
        """Refuse the undo a rollback or compensating transaction waits for, saying why: the
        refused undo actions never run, the rest goes on, and the transaction needs a human."""
        req = compensation_wire.refuse_request(transaction_id, reason, principal, roles)
        return compensation_wire.approval(await self._call("RefuseCompensation", req))

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

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = (),
        transaction_id: str = "",
        after_id: int = 0,
        page_size: int = 0,
    ) -> EffectPage:
        """One page of the server's outbox, oldest first, each effect with its last error
        (``statuses``: pending, delivering, delivered, dead; empty: all); ``next_after_id``
        continues it (0: no more)."""
        req = effects_wire.list_request(statuses, transaction_id, after_id, page_size)
        return effects_wire.page(await self._call("ListEffects", req))

    async def iter_effects(
        self, *, statuses: Sequence[str] = (), transaction_id: str = ""
    ) -> AsyncIterator[EffectInfo]:
        """Every matching effect, oldest first, fetching pages as it goes."""
        after = 0
        while True:
            page = await self.list_effects(
                statuses=statuses, transaction_id=transaction_id, after_id=after
            )
            for e in page.effects:
                yield e
            after = page.next_after_id
            if not after:
                return

    async def retry_effect(self, effect_id: int) -> EffectInfo:
        """Requeue a dead effect and have the server try it once now; returns it after that
        attempt (``status`` delivered, pending or dead, with ``last_error``)."""
        req = pb.RetryEffectRequest(effect_id=effect_id)
        return effects_wire.effect((await self._call("RetryEffect", req)).effect)

    async def watch(
        self, transaction_id: str, after_revision: int = 0
    ) -> AsyncIterator[TransactionEvent]:
        """The transaction's changes, one event per revision, until it ends. If the server
        becomes unreachable the stream resumes after the last event seen (bounded by
        ``retry``). Closing the iterator early cancels the stream."""
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
        """The server's health for ``service``: SERVING, NOT_SERVING, SERVICE_UNKNOWN …"""
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
        principal: str = "",
        mode: str = "",
    ) -> AsyncTransaction:
        """``async with client.transaction(...) as tx:`` begins a transaction, commits it when
        the block ends cleanly and rolls it back when the block raises — or when it ends cleanly
        while steps the server rolled back were not redone (then ``StepsNotRedone``)."""
        return AsyncTransaction(
            self, agent_id, metadata, policy, isolation, labels, principal, mode
        )

    # ------------------------------------------------------------------ calls

    async def call(self, rpc: str, request: Message) -> Message:
        """Send ``request`` as the RPC ``rpc`` of ``agenttx.v1.AgentTxService`` and return its
        reply message, retried and its errors raised as every method here does: the one call
        for an operation the client has no method of its own for (the operation table's rows,
        ``agenttx.api.operations``, as the CLI and ``agenttx mcp --server`` send them)."""
        method = _SERVICE.methods_by_name.get(rpc)
        if method is None or method.input_type is not request.DESCRIPTOR:
            raise ValueError(
                f"{rpc!r} is no RPC of {SERVICE_NAME} taking {request.DESCRIPTOR.name}"
            )
        reply: Message = await self._call(rpc, request)
        return reply

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


class AsyncTransaction(TransactionCursor["AsyncAgentTxClient"]):
    """One transaction driven step by step; made by ``AsyncAgentTxClient.transaction``.

    ``step`` sends the step id the server expects and returns the tool's output, or raises
    ``RollbackTriggered`` (the helper already points at ``next_step_id``: re-plan and call
    ``step`` again), ``TransactionAborted`` or ``OutcomeUnknown``. ``run(agent)`` is that loop,
    driven: the agent callback returns each next call.
    """

    async def begin(self) -> BeginResult:
        rid = self._begin_request_id()
        with self._sending():
            return self._begun(await self.client.begin(**self._begin_args, request_id=rid))

    async def step(self, tool: str, args: Any = None, raw_context: str = "") -> Any:
        arguments = wire.arguments_json(args)
        step_id = self.next_step_id
        rid = self._open_request_id(("step", step_id, tool, arguments, raw_context), "step")
        with self._sending():
            r = await self.client.execute_step(
                self.transaction_id, step_id, tool, arguments, raw_context, request_id=rid
            )
        return self._stepped(r, tool)

    async def dry_run(self, tool: str, args: Any = None, raw_context: str = "") -> StepResult:
        """What ``step(tool, args)`` would do, journaling nothing: the result's ``dry_run``
        says the fidelity reached and what would change; nothing is raised for a step that
        would fail (its status and hint say so) and ``next_step_id`` stays."""
        return await self.client.execute_step(
            self.transaction_id, self.next_step_id, tool, args, raw_context, dry_run=True
        )

    async def undo(self) -> UndoResult:
        """Undo the last live step; the helper then points at it again."""
        rid = self._open_request_id(("undo", self.next_step_id), "undo a step")
        with self._sending():
            return self._undid(await self.client.undo_step(self.transaction_id, request_id=rid))

    async def redo(self) -> UndoResult:
        """Re-apply the step just undone, exactly (its output stands again)."""
        rid = self._open_request_id(("redo", self.next_step_id), "redo a step")
        with self._sending():
            return self._redid(await self.client.redo_step(self.transaction_id, request_id=rid))

    async def commit(
        self, *, expected_revision: int | None = None, receipt_id: str | None = None
    ) -> CommitResult:
        """Commit now. After ``tx.preview()`` it commits that preview's exact change (its
        receipt and revision) unless told otherwise; ``receipt_id=""`` names no receipt."""
        revision, receipt = self._commit_args(expected_revision, receipt_id)
        # The payload of a bare commit stays ("commit",): a retry's request id is the same.
        bare = revision is None and not receipt
        payload: tuple[Any, ...] = ("commit",) if bare else ("commit", revision, receipt)
        rid = self._open_request_id(payload, "commit")
        with self._sending():
            r = await self.client.commit(
                self.transaction_id,
                request_id=rid,
                expected_revision=revision,
                receipt_id=receipt,
            )
        return self._committed(r)

    async def preview(self) -> Preview:
        """The exact change a commit would make now and a receipt bound to it; from now on
        the helper's commits (``tx.commit()``, the block's end) commit exactly this change."""
        self._check_open("preview a commit")
        return self._previewed(await self.client.preview_commit(self.transaction_id))

    async def wait_for_approval(
        self, max_wait: float = 900.0, interval: float = 1.0
    ) -> ReceiptView:
        """Wait until an approver decides the last preview's receipt: its view once approved;
        ``ReceiptRefused`` naming who refused it and why once refused (the transaction stays
        open: change it and preview again, or roll back), or ``why`` ``expired`` once it
        outlived its lifetime (a read shows it ``expired``); ``SnapshotMismatch`` once a
        change voided it (a read shows it ``voided``); ``NotActive`` once the transaction
        ended; ``DeadlineExceeded`` after ``max_wait`` seconds. Polls the transaction every
        ``interval`` seconds (``_approval_wait`` decides each read)."""
        wait = self._approval_wait(max_wait, interval)
        while True:
            answer = self._waited(wait, await self.info())
            if isinstance(answer, ReceiptView):
                return answer
            await asyncio.sleep(answer)

    async def rollback(self, to_step: int | None = None, reason: str = "") -> RollbackResult:
        """Rewind to ``to_step`` (the transaction stays open), or abort when it is None."""
        rid = self._open_request_id(("rollback", to_step, reason), "roll back")
        with self._sending():
            r = await self.client.rollback(self.transaction_id, to_step, reason, request_id=rid)
        return self._rolled_back(r)

    async def run(self, agent: AsyncAgent, *, max_calls: int = DEFAULT_MAX_CALLS) -> dict[int, Any]:
        """Drive the resume loop: ask ``agent(turn)`` for each next call and send it; after a
        rollback the next turn carries the hint, the constraints and where to resume. Ends
        when the agent returns None, with the outputs of the steps that stand; the block's end
        then commits (or refuses, if rewound steps were not redone). ``TransactionAborted``
        and ``OutcomeUnknown`` end it early; more than ``max_calls`` calls is an error. The
        agent may be a coroutine function."""
        turn = self._turn(None, 0)
        while True:
            answer = await ask_async(agent, turn)
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
            # The block's exception is what the caller needs to see; say the abort failed.
            exc.add_note(f"agenttx: rolling back {self.transaction_id} failed: {abort_error}")
