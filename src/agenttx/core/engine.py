"""``agenttx.Engine``: transactions of tool calls over a ``Store``, made of named parts.

Every public method is one step of the lifecycle in ``docs/transactions.md``; each hands its
work to the one part that owns it (the map is in ``agenttx.core``). The engine's invariants:

- Each durable change is a compare-and-set on the transaction's revision (``TxImages``), so a
  stale in-memory image or a second replica is detected, never overwritten.
- Calls on one transaction run one at a time; other transactions run concurrently.
- A tool's failure is data in the ``StepResult``; exceptions are for protocol misuse only.
- Undo records of outside effects are durable before the outside call (``StepRun``), writes
  and staged effects of a step become durable with the step, and the commit publishes writes,
  enqueues effects and ends the transaction in one store transaction.
- Each mutating call may carry a ``request_id``: a retry with the same id and payload returns
  the stored reply instead of running again (``RequestLog``).

``await Engine.open(url)`` is the factory: it opens (and migrates) the store, registers the
built-in and user tools, finishes what a crash interrupted (``recover``) and starts the
background work (the outbox dispatcher and the maintenance loop). ``await engine.close()``
stops them and the store. Every part is built once, in ``__init__``; none is set later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agenttx.audit import AuditKind, AuditRecord, AuditVerification
from agenttx.core.audit import AuditReader, cause
from agenttx.core.background import Background
from agenttx.core.callargs import (
    check_number,
    check_policy,
    check_string_map,
    check_strings,
    check_text,
)
from agenttx.core.commit import Committer
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import ControllerState, RollbackController
from agenttx.core.events import EventBus, TxEvent
from agenttx.core.hints import HintCleaner
from agenttx.core.images import TxImages
from agenttx.core.leases import LIVE_OWNERS, new_owner
from agenttx.core.limits import (
    MAX_REFERENCES,
    MAX_RESOLVED_ARGUMENTS_BYTES,
    arguments_text,
    check_begin,
    check_labels,
    check_transaction_id,
)
from agenttx.core.reads import TransactionReader
from agenttx.core.recovery import Recovery
from agenttx.core.requests import Request, RequestLog
from agenttx.core.rewind import Rewinder
from agenttx.core.steps import StepExecutor
from agenttx.effects.channels import Channel, JsonlChannel
from agenttx.effects.dispatcher import OutboxDispatcher
from agenttx.errors import InvalidArgument, NotActive, WrongStep
from agenttx.store.contract import Store, TxRow
from agenttx.store.factory import open_store
from agenttx.tools.builtin import BUILTIN_TOOLS
from agenttx.tools.builtin.fs import RESTORE_HANDLER, restore_file
from agenttx.tools.context import ProgressSink
from agenttx.tools.contract import Tool
from agenttx.tools.registry import ToolRegistry, load_tools
from agenttx.types import (
    BeginResult,
    CommitResult,
    Isolation,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    TransactionInfo,
    TransactionPage,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")

DEFAULT_URL = "sqlite:///agenttx-data/agenttx.db"


class Engine:
    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        dispatcher: OutboxDispatcher,
        *,
        cleaner: HintCleaner | None = None,
        controller: RollbackController | None = None,
        clock: Clock = time.time,
    ) -> None:
        # Every durable operation; opened before the engine is built, closed by ``close``.
        self.store = store
        # The tools and undo handlers by name; fixed once the engine is open.
        self.registry = registry
        self.config = config  # frozen; every part reads the same one
        self.cleaner = cleaner or HintCleaner()  # raw error → one-line hint
        self.controller = controller or RollbackController()  # failure → strategy, target
        self.clock = clock  # wall time for rows, leases and the reaper
        # One event per durable change, published after it is durable (WatchTransaction).
        self.events = EventBus()
        # Delivers committed effects: right after a commit, and in the background.
        self.dispatcher = dispatcher
        # The stored replies of mutating calls carrying a request_id.
        self.requests = RequestLog(store, config.tenant, clock)
        # The cached image of each open transaction; the only way to change one durably.
        self.images = TxImages(store, config, self.events, clock)
        # Undo from a step on (compensations newest first), two-phase when it must be.
        self.rewinder = Rewinder(self.images, store, registry, config, clock)
        # Crashed work, unknown outcomes, the idle reaper, pruning.
        self.recovery = Recovery(self.images, self.rewinder, store, registry, config, clock)
        # check → parse → tool → references → validate → run → record.
        self.steps = StepExecutor(
            self.images,
            self.rewinder,
            self.recovery.finish_interrupted,
            store,
            registry,
            self.cleaner,
            self.controller,
            config,
            clock,
        )
        # Validation, the one-transaction publish, conflict abort, effect release.
        self.committer = Committer(self.images, self.rewinder, store, dispatcher, clock)
        # Views, listings and event streams: reads only, never a durable change.
        self.reader = TransactionReader(store, self.images, self.events)
        # The delivery and maintenance loops; running iff started and not closed.
        self.background = Background(self.recovery, dispatcher, store, config, clock)
        # The audit chains as stored, and their verification: reads only.
        self.audit = AuditReader(store)

    @classmethod
    async def open(
        cls,
        url: str = DEFAULT_URL,
        *,
        fs_root: str | Path | None = None,
        outbox_path: str | Path | None = None,
        tools: Iterable[Tool] = (),
        tool_modules: Iterable[str] = (),
        channels: Mapping[str, Channel] | None = None,
        policy: RollbackPolicy | None = None,
        sync_writes: bool = False,
        step_timeout_s: float = 30.0,
        tx_idle_timeout_secs: float = 900.0,
        compensation_retries: int = 3,
        max_constraints: int = 32,
        max_resolved_arguments_bytes: int = MAX_RESOLVED_ARGUMENTS_BYTES,
        max_references: int = MAX_REFERENCES,
        hint_rule_files: Sequence[str | Path] = (),
        tenant: str = "default",
        clock: Clock = time.time,
        background: bool = True,
        audit_chain: bool = True,
        dispatch_lease_secs: float = 30.0,
        dispatch_max_attempts: int = 8,
        dispatch_backoff_s: float = 0.5,
        store: Store | None = None,
    ) -> Engine:
        """Open an engine. Relative paths default next to the SQLite file: ``files/`` for the
        fs sandbox and ``outbox.jsonl`` for effects on channels without a dispatcher."""
        # Backends are reached only through the factory, which imports them lazily.
        store = store or open_store(url, sync_writes=sync_writes)
        await store.open()
        base = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite") else Path()
        registry = ToolRegistry(BUILTIN_TOOLS)
        registry.register_undo(RESTORE_HANDLER, restore_file)
        for t in tools:
            registry.register(t)
        for spec in tool_modules:
            for t in load_tools(spec):
                registry.register(t)
        config = EngineConfig(
            fs_root=Path(fs_root) if fs_root is not None else base / "files",
            step_timeout_s=step_timeout_s,
            tx_idle_timeout_secs=tx_idle_timeout_secs,
            compensation_retries=compensation_retries,
            max_constraints=max_constraints,
            max_resolved_arguments_bytes=max_resolved_arguments_bytes,
            max_references=max_references,
            default_policy=policy or RollbackPolicy(),
            tenant=tenant,
            owner=new_owner(),
            audit_chain=audit_chain,
        )
        outbox = Path(outbox_path) if outbox_path is not None else base / "outbox.jsonl"
        dispatcher = OutboxDispatcher(
            store,
            channels or {},
            default=JsonlChannel(outbox),
            clock=clock,
            lease_secs=dispatch_lease_secs,
            max_attempts=dispatch_max_attempts,
            backoff_base_s=dispatch_backoff_s,
        )
        engine = cls(
            store,
            registry,
            config,
            dispatcher,
            cleaner=HintCleaner(hint_rule_files),
            controller=RollbackController(),
            clock=clock,
        )
        LIVE_OWNERS.add(config.owner)
        if not store.shared and store.opened_alone:
            # This process alone serves the store: effects a dead predecessor had claimed
            # (mid-delivery, or committed and not yet sent) go out now, not after the lease.
            await store.release_claims(now=clock())
        elif not store.shared:
            # Another live process has the file open (a second server, several MCP
            # processes): its claims are its own; calls coordinate per transaction.
            log.info("another process has %s open; sharing it", store.url)
        await engine.recover()
        if background:
            engine.start_background()
        return engine

    def start_background(self) -> None:
        self.background.start()

    async def close(self) -> None:
        LIVE_OWNERS.discard(self.config.owner)
        await self.background.stop()
        await self.store.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the lifecycle

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        isolation: Isolation | str = Isolation.SNAPSHOT,
        *,
        labels: Sequence[str] = (),
        request_id: str = "",
    ) -> BeginResult:
        check_text("agent_id", agent_id)
        metadata = check_string_map("metadata", metadata)
        if policy is not None and not isinstance(policy, RollbackPolicy):
            policy = check_policy(policy)
        if not isinstance(isolation, str):  # an Isolation is a str
            raise InvalidArgument(f"isolation must be a string, got {type(isolation).__name__}")
        labels = check_strings("labels", labels)
        check_text("request_id", request_id)
        payload = {
            "agent_id": agent_id,
            "metadata": dict(metadata or {}),
            "policy": policy.to_dict() if isinstance(policy, RollbackPolicy) else policy,
            "isolation": str(isolation),
            "labels": list(labels),
        }
        return await self.requests.run(
            request_id,
            "begin",
            payload,
            BeginResult,
            lambda req: self._begin(agent_id, metadata, policy, isolation, labels, req),
            lookup_first=True,  # no transaction to lock yet: a plain read
        )

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
    ) -> StepResult:
        """Run one step. ``progress`` receives the tool's ``report_progress`` calls (none:
        they are dropped)."""
        check_text("transaction_id", transaction_id)
        check_number("step_id", step_id)
        check_text("tool_name", tool_name)
        check_text("raw_context", raw_context)
        check_text("request_id", request_id)
        arguments_json = arguments_text(arguments)
        # A dict is used as given (no parse of the text just made from it); a string is parsed
        # inside the step, where bad JSON is a step failure with a hint.
        parsed = arguments if isinstance(arguments, dict) else None
        if not request_id:
            return await self.steps.run(
                transaction_id,
                step_id,
                tool_name,
                arguments_json,
                raw_context,
                None,
                parsed,
                progress,
            )

        async def call(req: Request | None) -> StepResult:
            try:
                return await self.steps.run(
                    transaction_id,
                    step_id,
                    tool_name,
                    arguments_json,
                    raw_context,
                    req,
                    parsed,
                    progress,
                )
            except (WrongStep, NotActive):
                # The step may have run while its reply was lost (a crash before the reply
                # was stored): its attempt row carries the request id.
                replay = await self.requests.step_replay(transaction_id, step_id, request_id)
                if replay is None:
                    raise
                return replay

        payload = [transaction_id, step_id, tool_name, arguments_json, raw_context]
        return await self.requests.run(request_id, "execute_step", payload, StepResult, call)

    def cancel_step(self, transaction_id: str, step_id: int) -> bool:
        """Cancel the tool step ``step_id`` of the transaction is running in this process: the
        step then fails with a hint saying so, and is undone like any failed step. False iff
        no such tool is running here (it finished, or cannot be interrupted)."""
        return self.steps.running.cancel(transaction_id, step_id)

    async def commit(self, transaction_id: str, *, request_id: str = "") -> CommitResult:
        check_text("transaction_id", transaction_id)
        check_text("request_id", request_id)

        async def call(req: Request | None) -> CommitResult:
            try:
                return await self.committer.commit(transaction_id, req)
            except NotActive:
                # This very commit may have happened while its reply was lost: the commit
                # records its request id with the outcome, in the same store transaction.
                replay = await self.requests.commit_replay(transaction_id, request_id)
                if replay is None:
                    raise
                return replay

        return await self.requests.run(request_id, "commit", [transaction_id], CommitResult, call)

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str = "",
    ) -> RollbackResult:
        check_text("transaction_id", transaction_id)
        if to_step is not None:
            check_number("to_step", to_step, minimum=0)
        check_text("reason", reason)
        check_text("request_id", request_id)
        return await self.requests.run(
            request_id,
            "rollback",
            [transaction_id, to_step or 0, reason],
            RollbackResult,
            lambda req: self._rollback(transaction_id, to_step, reason, req),
        )

    async def resolve_outcome(
        self, transaction_id: str, step_id: int, *, happened: bool, output: Any = None
    ) -> TransactionInfo:
        """Settle a step whose outside call had an unknown outcome (after checking the outside
        system): ``happened`` keeps it as a successful step with ``output``; otherwise its undo
        records are discarded unrun and the step can be sent again."""
        check_text("transaction_id", transaction_id)
        check_number("step_id", step_id)
        await self.recovery.resolve_outcome(
            transaction_id, step_id, happened=happened, output=output
        )
        return await self.get_transaction(transaction_id, history=True)

    async def recover(self) -> dict[str, int]:
        """Finish what a crash interrupted (rewinds, steps of a dead process); safe to run
        while serving. Returns how many of each kind were finished."""
        return await self.recovery.recover()

    async def reap_idle(self) -> int:
        """Abort ACTIVE transactions idle longer than the timeout; returns how many."""
        return await self.recovery.reap_idle()

    async def prune_versions(self) -> int:
        """Drop committed versions no open transaction can see any more; returns how many."""
        return await self.recovery.prune_versions()

    # ------------------------------------------------------------------ the audit chain

    async def verify_audit(self, transaction_id: str) -> AuditVerification:
        """Check the transaction's audit chain: ``v.ok``, ``v.records``, ``v.first_bad`` (the
        seq of the first edited, missing or misplaced record; 0 iff ok), ``v.reason``."""
        check_transaction_id(transaction_id)  # the id's byte limit, as every other call has
        return await self.audit.verify(transaction_id)

    async def audit_records(
        self, transaction_id: str, *, after_seq: int = 0, limit: int = 10_000
    ) -> list[AuditRecord]:
        """The transaction's audit records with ``seq > after_seq``, oldest first."""
        check_transaction_id(transaction_id)
        return await self.audit.records(transaction_id, after_seq=after_seq, limit=limit)

    def verify_all_audit(self) -> AsyncIterator[AuditVerification]:
        """Every chain of the store (and every transaction without one), in id order."""
        return self.audit.verify_all()

    async def verify_audit_page(
        self, *, after_id: str = "", limit: int = 100
    ) -> tuple[list[AuditVerification], str]:
        """Up to ``limit`` chains after transaction ``after_id`` checked, and the id to
        continue after ("" at the end)."""
        return await self.audit.verify_page(after_id=after_id, limit=limit)

    # ------------------------------------------------------------------ reads

    async def get_transaction(
        self, transaction_id: str, *, history: bool = True
    ) -> TransactionInfo:
        """The transaction's public view; ``history`` includes failed and rewound attempts."""
        return await self.reader.get_transaction(transaction_id, history=history)

    def watch(self, transaction_id: str, after_revision: int = 0) -> AsyncIterator[TxEvent]:
        """The transaction's state changes, newest revision first if it is past
        ``after_revision``, then one event per durable change, until it ends."""
        return self.reader.watch(transaction_id, after_revision)

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        limit: int = 100,
        after_id: str = "",
    ) -> list[TransactionInfo]:
        return await self.reader.list_transactions(
            statuses=statuses, agent_id=agent_id, limit=limit, after_id=after_id
        )

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        label: str | None = None,
        page_size: int = 50,
        page_token: str = "",
    ) -> TransactionPage:
        """One page of transactions, oldest first; ``page_token`` continues a listing."""
        return await self.reader.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id,
            label=label,
            page_size=page_size,
            page_token=page_token,
        )

    def list_tools(self) -> list[dict[str, Any]]:
        return [t.describe() for t in self.registry]

    # ------------------------------------------------------------------ begin and rollback

    async def _begin(
        self,
        agent_id: str,
        metadata: Mapping[str, str] | None,
        policy: RollbackPolicy | Mapping[str, Any] | None,
        isolation: Isolation | str,
        labels: Sequence[str],
        request: Request | None,
    ) -> BeginResult:
        meta = dict(metadata or {})
        check_begin(agent_id, meta)
        check_labels(labels)
        pol = self._policy(policy)
        try:
            iso = Isolation(isolation)
        except ValueError:
            allowed = ", ".join(i.value for i in Isolation)
            raise InvalidArgument(
                f"unknown isolation {isolation!r}; use one of {allowed}"
            ) from None
        now = self.clock()
        body: dict[str, Any] = {
            "metadata": meta,
            "policy": pol.to_dict(),
            "controller": ControllerState().to_dict(),
            "constraints": [],
            "epoch": 0,
            "step_seq": 0,
            "requires_human": False,
            "abort_reason": "",
            "compensation_errors": [],
            "outcome_unknown_step": 0,
            "labels": list(labels),
        }
        row = TxRow(
            id=f"tx_{uuid.uuid4().hex}",
            tenant=self.config.tenant,
            agent_id=agent_id,
            status=TxStatus.ACTIVE.value,
            revision=1,
            next_step_id=1,
            snapshot=0,
            isolation=iso.value,
            body=body,
            created_at=now,
            updated_at=now,
            last_activity_at=now,
        )
        result = BeginResult(row.id, 1, TxStatus.ACTIVE, row.revision)
        # The reply goes in with the transaction: one durable write for both.
        reply = request.reply(result) if request is not None else None
        begun = {
            "agent_id": agent_id,
            "isolation": iso.value,
            "labels": list(labels),
            "metadata_keys": sorted(meta),
            "policy": body["policy"],
            "request_id": request.request_id if request is not None else "",
        }
        audit = self.images.chain(None, row.revision, now, (AuditKind.BEGIN, begun), row=row)
        row = await self.store.create_transaction(row, reply, audit)
        if request is not None:
            request.stored = True
        self.images.add(row, pol, iso, audit)
        log.debug("begin %s agent=%s isolation=%s", row.id, agent_id, iso.value)
        return result

    def _policy(self, policy: RollbackPolicy | Mapping[str, Any] | None) -> RollbackPolicy:
        if policy is None:
            return self.config.default_policy
        if isinstance(policy, RollbackPolicy):
            return policy
        base = self.config.default_policy.to_dict()
        base.update({k: v for k, v in policy.items() if v is not None})
        return RollbackPolicy.from_dict(base)

    async def _rollback(
        self, transaction_id: str, to_step: int | None, reason: str, request: Request | None
    ) -> RollbackResult:
        # Its reply is stored after the rewind (``RequestLog``): a write of its own.
        async with self.images.locked(transaction_id, request=request) as rt:
            status = TxStatus(rt.row.status)
            if status.terminal:
                raise NotActive(transaction_id, status.value, "roll back")
            if to_step:
                if to_step >= rt.row.next_step_id:
                    raise InvalidArgument(
                        f"invalid argument: to_step {to_step} must be lower than the next "
                        f"step {rt.row.next_step_id}"
                    )
                self.controller.on_manual_rewind(rt.ctl, to_step)
                body = dict(rt.body, controller=rt.ctl.to_dict())
                why = cause("MANUAL", "request", reason=reason)
                errors, ran = await self.rewinder.rewind(
                    rt, to_step, TxStatus.ACTIVE, body, None, why
                )
                return RollbackResult(
                    transaction_id,
                    True,
                    rt.row.next_step_id,
                    ran,
                    errors,
                    TxStatus.ACTIVE,
                    rt.row.revision,
                )
            body = dict(rt.body, abort_reason=reason or "rolled back on request")
            why = cause("ABORT", "request", reason=reason)
            errors, ran = await self.rewinder.rewind(rt, 0, TxStatus.ROLLED_BACK, body, None, why)
            return RollbackResult(
                transaction_id, True, 0, ran, errors, TxStatus.ROLLED_BACK, rt.row.revision
            )


__all__ = ["DEFAULT_URL", "Engine", "EngineConfig"]
