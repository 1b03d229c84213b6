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

``await Engine.open(url)`` is the factory, kept outside the core (``agenttx.app.open_engine``,
bound to the class): it opens (and migrates) the store, registers the built-in and user
tools, builds the outbox dispatcher, finishes what a crash interrupted (``recover``) and
starts the background work (delivery and maintenance loops). ``await engine.close()`` stops
them and the store. Every part is built once, in ``__init__``; none is set later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from agenttx.audit import AuditKind, AuditRecord, AuditVerification
from agenttx.core.access import PRINCIPAL_KEY, Access, Action, read_owner
from agenttx.core.approvals import Approvals, check_principal, check_receipt_id, check_roles
from agenttx.core.audit import AuditReader, cause
from agenttx.core.background import Background, DeliveryLoop
from agenttx.core.callargs import (
    check_number,
    check_policy,
    check_string_map,
    check_strings,
    check_text,
)
from agenttx.core.commit import Committer, EffectRelease
from agenttx.core.compensate import Compensator
from agenttx.core.compensation_approval import (
    CompensationApprovals,
    refuse_unsupported,
    rollback_result,
)
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.contracts import KeptUndo
from agenttx.core.controller import RollbackController
from agenttx.core.dryrun import DryRunner
from agenttx.core.events import EventBus, TxEvent
from agenttx.core.hints import HintCleaner
from agenttx.core.images import TxImages
from agenttx.core.leases import LIVE_OWNERS
from agenttx.core.limits import (
    arguments_text,
    check_approval,
    check_begin,
    check_compensation_reason,
    check_labels,
    check_refusal_reason,
    check_transaction_id,
)
from agenttx.core.lookup import TransactionFinder
from agenttx.core.outbox import EffectDesk
from agenttx.core.reads import TransactionReader
from agenttx.core.reconcile import Reconciler
from agenttx.core.recovery import Recovery
from agenttx.core.requests import Request, RequestLog
from agenttx.core.retention import Pruned, Retention
from agenttx.core.revisions import RevisionRules
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime, first_row
from agenttx.core.safety import SafetyPolicy
from agenttx.core.steps import StepExecutor
from agenttx.core.tool_policy import ALLOW_ALL, ToolPolicy
from agenttx.core.undo import StepHistory
from agenttx.core.undo_reconcile import UndoReconciler
from agenttx.errors import (
    InvalidArgument,
    NotActive,
    NotFound,
    PermissionDenied,
    WrongStep,
)
from agenttx.numbers import EXPECTED_REVISION
from agenttx.receipts import Approval, Mode, Preview, Refusal
from agenttx.settings import Settings
from agenttx.store.contract import Store
from agenttx.tools.context import ProgressSink
from agenttx.tools.registry import ToolRegistry
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
    TxStatus,
    UndoResult,
)

log = logging.getLogger("agenttx.engine")


class _NotBoundYet:
    """``Engine.open`` until ``agenttx.app`` binds it: a clear error for code that reached the
    class through the private ``agenttx.core.engine`` without loading the composition root."""

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        raise AttributeError(
            "Engine.open is built by the composition root, agenttx.app, which is not loaded: "
            "use agenttx.Engine.open (it loads it), or import agenttx.app first"
        )


class OpenEngine(Protocol):
    """``Engine.open``'s shape: a store URL, the ``Settings`` (defaults without them), and
    keywords — each a setting by name, checked by ``Settings.of``, or one of the parts
    ``agenttx.app.open_engine`` lists (tool objects, channels, a clock …)."""

    def __call__(
        self, url: str = ..., settings: Settings | None = None, **overrides: Any
    ) -> Awaitable[Engine]: ...


class Dispatcher(EffectRelease, DeliveryLoop, Protocol):
    """What the engine needs of its outbox dispatcher (``agenttx.effects.OutboxDispatcher``,
    built by the composition root): the committer's release, the background loop, and
    ``aclose`` when the engine closes."""

    async def aclose(self) -> None:
        """Release what delivery holds (connections); called once, after the loops stop."""
        ...


class Engine:
    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        dispatcher: Dispatcher,
        *,
        cleaner: HintCleaner | None = None,
        controller: RollbackController | None = None,
        clock: Clock = time.time,
        safety: SafetyPolicy | None = None,
        tool_policy: ToolPolicy = ALLOW_ALL,
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
        # The safety policy file's rules (``--policy``); the default allows everything.
        self.safety = safety or SafetyPolicy()
        # Crashed work, unknown outcomes, the idle reaper, pruning.
        # Crashed work, the idle reaper, pruning.
        self.recovery = Recovery(self.images, self.rewinder, store, registry, config, clock)
        # Unknown outcomes: the provider-operation checkpoint, reconcile, the operator's word.
        self.reconciler = Reconciler(self.images, store, registry, config, clock)
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
            guard=self.safety.check_step if safety is not None else None,
            checkpoint=self.reconciler.checkpoint,
        )
        # Masks secret-looking fields in what is stored and returned (``core.masking``).
        self.redactor = self.steps.redactor
        # Validation, the one-transaction publish, conflict abort, effect release.
        self.committer = Committer(
            self.images,
            self.rewinder,
            store,
            dispatcher,
            clock,
            kept=KeptUndo(registry, config.compensation_keep_s),
        )
        # What may be undone or redone, and the revision counters views show.
        self.revisions = RevisionRules(registry, config.max_steps)
        # Compensating committed transactions: new transactions that run the kept undos.
        self.compensator = Compensator(self.images, self.rewinder, store, registry, config, clock)
        # Approvals of rollbacks and compensations whose contracts ask for an approver.
        # Undo actions whose outcome is unknown: asked of their undo_reconcile handler, or
        # settled by an operator, then the rollback or compensation goes on.
        self.undo_reconciler = UndoReconciler(
            self.images, store, registry, self.rewinder, clock, self.compensator.resume
        )
        self.compensation_approvals = CompensationApprovals(
            self.images, self.rewinder, clock, self.compensator.resume
        )
        # Views, listings and event streams: reads only, never a durable change.
        self.reader = TransactionReader(
            store, self.images, self.events, self.revisions, clock, self.safety
        )
        # The policy's decision on a tool call (allowed / needs approval / forbidden).
        self.tool_policy = tool_policy
        # Dry runs: the fidelity ladder, with nothing journaled.
        self.dry_runs = DryRunner(
            self.images, store, registry, self.cleaner, tool_policy, config, clock
        )
        # undo_step / redo_step of single steps.
        self.history = StepHistory(
            self.images, self.rewinder, store, self.revisions, self.controller, config, clock
        )
        # What maintenance deletes once retention lets it go.
        self.retention = Retention(store, config, clock)
        # The delivery and maintenance loops; running iff started and not closed.
        self.background = Background(
            self.recovery,
            dispatcher,
            store,
            config,
            clock,
            self.retention,
            compensations=self.compensator.recover,
        )
        # The audit chains as stored, and their verification: reads only.
        self.audit = AuditReader(store, config.audit_keys)
        # Preview receipts, approvals, and what a commit must show before it runs.
        self.approvals = Approvals(self.images, store, config, self.safety, registry, clock)
        # The outbox for operators: effects with their last error, dead letters retried.
        self.effects = EffectDesk(store, dispatcher, config.tenant, clock)
        # Who may do what to a transaction, for calls that carry a ``Caller`` (server mode).
        self.access = Access(store, self.images)
        # A transaction found by a receipt id or a request id, under the same read rule.
        self.finder = TransactionFinder(store, self.access, clock, config.tenant)
        # What else closes with the engine, after its loops and before its store (the MCP
        # gateway's sessions, whose calls the loops may be making), in order.
        self.on_close: list[Callable[[], Awaitable[None]]] = []

    # ``await Engine.open(url, settings, **overrides)``: the composition root,
    # ``agenttx.app.open_engine``, bound to the class by ``agenttx.app`` (which
    # ``agenttx.Engine`` loads on first use), so the core builds no store, channel, tool
    # registry or dispatcher (docs/architecture.md).
    if TYPE_CHECKING:
        open: ClassVar[OpenEngine]
    else:
        open = _NotBoundYet()

    def start_background(self) -> None:
        self.background.start()

    async def close(self) -> None:
        LIVE_OWNERS.discard(self.config.owner)
        await self.background.stop()
        for closing in self.on_close:
            try:
                await closing()
            except Exception:  # the store closes whatever a part did on its way out
                log.exception("closing %r failed", closing)
        await self.dispatcher.aclose()
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
        principal: str = "",
        mode: Mode | str = Mode.TRANSACTIONAL,
        caller: Caller | None = None,
    ) -> BeginResult:
        """Begin a transaction. ``principal``: who acts (in server mode, from the caller's
        credentials); ``mode``: ``transactional``, ``approval_required`` (commit needs a
        receipt approved by another principal holding ``approver``) or
        ``autonomous_trusted`` (``docs/safety.md``). ``caller`` (server mode) owns it, in the
        caller's tenant, and is the principal whatever ``principal`` says."""
        check_text("agent_id", agent_id)
        principal = check_principal("principal", principal)
        if caller is not None:  # server mode: who acts is who the credentials say
            principal = caller.acting_as(principal)[0]
        mode = _mode(mode, principal)
        self.safety.check_begin(mode)
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
        if principal or mode is not Mode.TRANSACTIONAL:  # older stored payloads stay equal
            payload.update(principal=principal, mode=mode.value)
        result = await self.requests.run(
            request_id,
            "begin",
            payload,
            BeginResult,
            lambda req: self._begin(
                agent_id, metadata, policy, isolation, labels, req, principal, mode, caller
            ),
            lookup_first=True,  # no transaction to lock yet: a plain read
            tenant=caller.tenant if caller is not None else None,
        )
        # A replay's payload equals this one, mode included; a reply stored before results
        # carried the mode replays the default, so the mode asked for is the one to show.
        if result.mode != mode.value:
            result = dataclasses.replace(result, mode=mode.value)
        return result

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
        """Run one step. ``progress`` receives the tool's ``report_progress`` calls (none:
        they are dropped). ``dry_run``: say what the step would do, as far as the tool's
        fidelity goes (``result.dry_run``), journaling nothing; ``next_step_id`` stays, and
        a ``request_id`` is not recorded (a dry run is safe to repeat)."""
        check_text("transaction_id", transaction_id)
        check_number("step_id", step_id)
        check_text("tool_name", tool_name)
        check_text("raw_context", raw_context)
        check_text("request_id", request_id)
        if not isinstance(dry_run, bool):
            raise InvalidArgument(f"dry_run must be a bool, got {type(dry_run).__name__}")
        await self.access.check(caller, transaction_id, Action.ACT)
        arguments_json = arguments_text(arguments)
        # A dict is used as given (no parse of the text just made from it); a string is parsed
        # inside the step, where bad JSON is a step failure with a hint.
        parsed = arguments if isinstance(arguments, dict) else None
        if dry_run:
            return await self.dry_runs.run(
                transaction_id, step_id, tool_name, arguments_json, raw_context, parsed
            )
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
        return await self.requests.run(
            request_id,
            "execute_step",
            payload,
            StepResult,
            call,
            tenant=_tenant(caller),
            transaction_id=transaction_id,
        )

    def cancel_step(
        self, transaction_id: str, step_id: int, *, caller: Caller | None = None
    ) -> bool:
        """Cancel the tool step ``step_id`` of the transaction is running in this process: the
        step then fails with a hint saying so, and is undone like any failed step. False iff
        no such tool is running here (it finished, or cannot be interrupted), or ``caller``
        may not act on the transaction."""
        if caller is not None:
            rt = self.images.cache.get(transaction_id)  # a running step's image is cached
            if rt is None or not self.access.may(caller, rt.row, Action.ACT):
                return False
        return self.steps.running.cancel(transaction_id, step_id)

    async def commit(
        self,
        transaction_id: str,
        *,
        request_id: str = "",
        expected_revision: int | None = None,
        receipt_id: str = "",
        caller: Caller | None = None,
    ) -> CommitResult:
        """Commit. ``expected_revision`` (the snapshot's revision the caller echoes) refuses a
        transaction that moved since with ``SnapshotMismatch``; ``receipt_id`` (a preview's)
        commits only that exact change, and is required — approved — when the transaction's
        mode or the safety policy asks for approval (``ApprovalRequired``)."""
        check_text("transaction_id", transaction_id)
        check_text("request_id", request_id)
        await self.access.check(caller, transaction_id, Action.ACT)
        if expected_revision is not None:
            # A revision is a store's 64-bit integer (uint64 on the wire, in range there).
            check_number("expected_revision", expected_revision, maximum=EXPECTED_REVISION.high)
        if receipt_id:
            check_receipt_id(receipt_id)
        else:
            check_text("receipt_id", receipt_id)

        async def admit(rt: TxRuntime) -> dict[str, Any]:
            return await self.approvals.admit_commit(rt, expected_revision, receipt_id)

        async def call(req: Request | None) -> CommitResult:
            try:
                return await self.committer.commit(transaction_id, req, admit)
            except NotActive:
                # This very commit may have happened while its reply was lost: the commit
                # records its request id with the outcome, in the same store transaction.
                replay = await self.requests.commit_replay(transaction_id, request_id)
                if replay is None:
                    raise
                return replay

        payload: list[Any] = [transaction_id]
        if expected_revision is not None or receipt_id:  # older stored payloads stay equal
            payload += [expected_revision or 0, receipt_id]
        return await self.requests.run(
            request_id,
            "commit",
            payload,
            CommitResult,
            call,
            tenant=_tenant(caller),
            transaction_id=transaction_id,
        )

    async def preview_commit(self, transaction_id: str, *, caller: Caller | None = None) -> Preview:
        """The exact change a commit would make now (``p.changes``), its ``p.change_hash``, and
        a receipt (``p.receipt_id``) bound to both and to ``p.revision``, until
        ``p.expires_at``. Changes nothing of the transaction (no revision)."""
        check_text("transaction_id", transaction_id)
        await self.access.check(caller, transaction_id, Action.READ)
        return await self.approvals.preview(transaction_id)

    async def approve_commit(
        self,
        transaction_id: str,
        receipt_id: str,
        *,
        principal: str,
        roles: Sequence[str] = (),
        caller: Caller | None = None,
    ) -> Approval:
        """Approve the receipt's exact change, once, as ``principal`` (not the transaction's
        own) holding the ``approver`` role. Any later change of the transaction voids it. In
        server mode the approver is the ``caller`` (its principal and roles), whatever the call
        says."""
        check_text("transaction_id", transaction_id)
        if caller is not None:
            await self.access.check(caller, transaction_id, Action.APPROVE)
            principal, roles = caller.acting_as(principal, roles)
        check_roles(roles)
        return await self.approvals.approve(transaction_id, receipt_id, principal, roles)

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
        """Refuse the receipt's change, once, as ``principal`` (not the transaction's own)
        holding the ``approver`` role, saying why (``reason``, required, at most 4096 bytes;
        secrets in it are masked). The transaction stays ACTIVE; a commit naming the receipt
        is refused with who refused it and why. The same rules as ``approve_commit`` for who
        may; of an approval and a refusal of one receipt, exactly one wins."""
        check_text("transaction_id", transaction_id)
        check_text("reason", reason)
        if caller is not None:
            await self.access.check(caller, transaction_id, Action.APPROVE)
            principal, roles = caller.acting_as(principal, roles)
        check_roles(roles)
        check_refusal_reason(reason)
        # Free text shown to the agent, in listings and in the audit chain: secrets masked.
        reason = self.redactor.text(reason)
        return await self.approvals.refuse(transaction_id, receipt_id, principal, roles, reason)

    async def rollback(
        self,
        transaction_id: str,
        to_step: int | None = None,
        reason: str = "",
        *,
        request_id: str = "",
        caller: Caller | None = None,
    ) -> RollbackResult:
        check_text("transaction_id", transaction_id)
        if to_step is not None:
            check_number("to_step", to_step, minimum=0)
        check_text("reason", reason)
        check_text("request_id", request_id)
        await self.access.check(caller, transaction_id, Action.ACT)
        return await self.requests.run(
            request_id,
            "rollback",
            [transaction_id, to_step or 0, reason],
            RollbackResult,
            lambda req: self._rollback(transaction_id, to_step, reason, req),
            tenant=_tenant(caller),
            transaction_id=transaction_id,
        )

    async def undo_step(
        self, transaction_id: str, *, request_id: str = "", caller: Caller | None = None
    ) -> UndoResult:
        """Undo the last live step: its compensations run, its staged effects drop, its
        writes leave; ``next_step_id`` goes back to it. ``UndoRefused`` (with a hint) if it
        cannot be undone. A state-only step undone this way can be redone (``redo_step``)."""
        return await self._move_history(
            "undo_step", self.history.undo, transaction_id, request_id, caller
        )

    async def redo_step(
        self, transaction_id: str, *, request_id: str = "", caller: Caller | None = None
    ) -> UndoResult:
        """Re-apply the step the last ``undo_step`` undid, exactly (its recorded writes and
        output, no tool call), if it was state-only and nothing changed the transaction since;
        else ``RedoRefused`` with a hint (send the step again instead)."""
        return await self._move_history(
            "redo_step", self.history.redo, transaction_id, request_id, caller
        )

    async def _move_history(
        self,
        operation: str,
        move: Callable[[str, Request | None], Awaitable[UndoResult]],
        transaction_id: str,
        request_id: str,
        caller: Caller | None,
    ) -> UndoResult:
        """``undo_step`` and ``redo_step`` are one move of the step history, back or forth:
        the same checks, and one idempotent request keyed by ``operation`` (a retried undo
        replays its reply instead of undoing a second step)."""
        check_text("transaction_id", transaction_id)
        check_text("request_id", request_id)
        await self.access.check(caller, transaction_id, Action.ACT)
        return await self.requests.run(
            request_id,
            operation,
            [transaction_id],
            UndoResult,
            lambda req: move(transaction_id, req),
            tenant=_tenant(caller),
            transaction_id=transaction_id,
        )

    async def reconcile_step(
        self, transaction_id: str, step_id: int, *, caller: Caller | None = None
    ) -> ReconcileResult:
        """Ask the tool's ``@tool.reconcile`` handler whether step ``step_id``'s uncertain
        outside call happened, and settle it: ``r.outcome`` "happened" (the step succeeded
        with ``r.output``), "not_happened" (send the step again) or "unknown" (reconcile
        again in ``r.retry_after_ms``). Refused before the earliest reconcile time
        (``ReconcileNotDue``), while another reconcile runs (``ReconcileInProgress``) and for
        a tool without a handler (``NoReconcileHandler``: ``resolve_step`` it). While a
        rollback or compensation waits on an unknown undo of step ``step_id``, it asks that
        undo's ``@tool.undo_reconcile`` handler instead ("happened": the undo took effect)."""
        check_text("transaction_id", transaction_id)
        check_number("step_id", step_id)
        await self.access.check(caller, transaction_id, Action.ACT)
        if await self.undo_reconciler.holds(transaction_id, step_id):
            return await self.undo_reconciler.reconcile(transaction_id, step_id)
        return await self.reconciler.reconcile(transaction_id, step_id)

    async def resolve_step(
        self, transaction_id: str, step_id: int, outcome: str, *, output: Any = None,
        reason: str = "", caller: Caller | None = None,
    ) -> ReconcileResult:  # fmt: skip
        """An operator settles step ``step_id``'s unknown outcome after checking the outside
        system: ``outcome`` "happened" (the step succeeds with ``output``, its undo kept) or
        "not_happened" (its undo records are dropped unrun; the step may be sent again).
        While a rollback or compensation waits on an unknown undo of step ``step_id``, it
        settles that undo instead: "happened" (it took effect) or "not_happened" (the step's
        effect stays; reported, the transaction needs a human); no ``output``."""
        check_text("transaction_id", transaction_id)
        check_number("step_id", step_id)
        check_text("outcome", outcome)
        check_text("reason", reason)
        check_compensation_reason(reason)  # the same bound as every reason a person gives
        await self.access.check(caller, transaction_id, Action.ACT)
        if await self.undo_reconciler.holds(transaction_id, step_id):
            reason = self.redactor.text(reason)  # shown in the audit chain: secrets masked
            return await self.undo_reconciler.resolve(
                transaction_id, step_id, outcome, output, reason
            )
        return await self.reconciler.resolve(transaction_id, step_id, outcome, output, reason)

    async def resolve_outcome(
        self,
        transaction_id: str,
        step_id: int,
        *,
        happened: bool,
        output: Any = None,
        caller: Caller | None = None,
    ) -> TransactionInfo:
        """``resolve_step`` with a bool, returning the transaction's view (kept for callers
        of the first version)."""
        await self.access.check(caller, transaction_id, Action.ACT)
        outcome = "happened" if happened else "not_happened"
        await self.resolve_step(transaction_id, step_id, outcome, output=output)
        return await self.get_transaction(transaction_id, history=True)

    async def recover(self) -> dict[str, int]:
        """Finish what a crash interrupted (rewinds, steps of a dead process); safe to run
        while serving. Returns how many of each kind were finished."""
        counts = await self.recovery.recover()
        counts["compensations"] = await self.compensator.recover()
        return counts

    async def reap_idle(self) -> int:
        """Abort ACTIVE transactions idle longer than the timeout; returns how many."""
        return await self.recovery.reap_idle()

    async def prune_retained(self) -> Pruned:
        """Delete what retention lets go (``core.retention``): ended transactions, delivered
        effects and stored replies past ``retention_days``, dead letters and audit chains past
        theirs."""
        return await self.retention.prune()

    async def prune_versions(self) -> int:
        """Drop committed versions no open transaction can see any more; returns how many."""
        return await self.recovery.prune_versions()

    # ------------------------------------------------------------------ compensation

    async def compensate(
        self,
        transaction_id: str,
        reason: str = "",
        *,
        principal: str = "",
        caller: Caller | None = None,
    ) -> CompensationResult:
        """Compensate a committed transaction: a new compensating transaction (``k.transaction_id``,
        ``k.compensation_for``) runs the undo actions its commit kept, newest first, and
        settles ``k.status`` "compensated" or "failed" with the evidence — or waits
        ("awaiting_approval") when a step's contract asks for an approver."""
        check_transaction_id(transaction_id)
        check_text("reason", reason)
        check_text("principal", principal)
        check_compensation_reason(reason)
        if caller is not None:  # server mode: the caller acts, and is the one recorded
            await self.access.check(caller, transaction_id, Action.ACT)
            principal = caller.acting_as(principal)[0]
        return await self.compensator.compensate(transaction_id, reason, principal)

    async def compensation_plan(
        self, transaction_id: str, *, caller: Caller | None = None
    ) -> CompensationPlan:
        """What ``compensate`` would run (committed) or would run once committed (open)."""
        check_transaction_id(transaction_id)
        await self.access.check(caller, transaction_id, Action.READ)
        return await self.compensator.plan(transaction_id)

    async def compensation(
        self, compensating_id: str, *, caller: Caller | None = None
    ) -> CompensationResult:
        """A compensating transaction's outcome as it stands."""
        check_transaction_id(compensating_id)
        await self.access.check(caller, compensating_id, Action.READ)
        return await self.compensator.result(compensating_id)

    async def approve_compensation(
        self,
        transaction_id: str,
        principal: str,
        roles: Sequence[str] = (),
        *,
        caller: Caller | None = None,
    ) -> RollbackResult:
        """Approve the undo a rollback (or a compensating transaction) waits for; the
        approver holds the ``approver`` role and is not the transaction's own principal. The
        rollback or compensation then goes on; the reply says how it stands."""
        check_transaction_id(transaction_id)
        if caller is not None:  # server mode: the approver is who the credentials say
            await self.access.check(caller, transaction_id, Action.APPROVE)
            principal, roles = caller.acting_as(principal, roles)
        check_text("principal", principal)
        roles = check_strings("roles", roles)
        check_approval(principal, roles)
        return await self.compensation_approvals.approve(transaction_id, principal, roles)

    async def refuse_compensation(
        self,
        transaction_id: str,
        reason: str,
        principal: str = "",
        roles: Sequence[str] = (),
        *,
        caller: Caller | None = None,
    ) -> RollbackResult:
        """Refuse the undo a rollback (or a compensating transaction) waits for, saying why
        (``reason``, required, at most 4096 bytes; secrets in it are masked), under the same
        rules as ``approve_compensation``. The undo actions that waited are not run: each is
        reported ``refused`` with the reason, the transaction needs a human, and every other
        undo action runs; the reply says how the rollback or compensation ended."""
        check_transaction_id(transaction_id)
        check_text("reason", reason)
        if caller is not None:  # server mode: the refuser is who the credentials say
            await self.access.check(caller, transaction_id, Action.APPROVE)
            principal, roles = caller.acting_as(principal, roles)
        check_text("principal", principal)
        roles = check_strings("roles", roles)
        check_approval(principal, roles)
        check_refusal_reason(
            reason, say="say why the undo is refused (the person who settles the step reads it)"
        )
        # Free text shown to the agent, in the evidence and in the audit chain: secrets masked.
        reason = self.redactor.text(reason)
        return await self.compensation_approvals.refuse(transaction_id, principal, roles, reason)

    async def prune_kept_undo(self) -> int:
        """Delete undo records kept after commits whose compensation window ended."""
        return await self.store.prune_kept_undo(self.clock())

    # ------------------------------------------------------------------ the audit chain

    async def verify_audit(
        self, transaction_id: str, *, caller: Caller | None = None
    ) -> AuditVerification:
        """Check the transaction's audit chain: ``v.ok``, ``v.records``, ``v.first_bad`` (the
        seq of the first edited, missing or misplaced record; 0 iff ok), ``v.reason``."""
        check_transaction_id(transaction_id)  # the id's byte limit, as every other call has
        await self.access.check(caller, transaction_id, Action.READ)
        await self.images.seal_active(transaction_id)  # pending step records first
        return await self.audit.verify(transaction_id)

    async def audit_records(
        self,
        transaction_id: str,
        *,
        after_seq: int = 0,
        limit: int = 10_000,
        caller: Caller | None = None,
    ) -> list[AuditRecord]:
        """The transaction's audit records with ``seq > after_seq``, oldest first."""
        check_transaction_id(transaction_id)
        await self.access.check(caller, transaction_id, Action.READ)
        await self.images.seal_active(transaction_id)  # pending step records first
        return await self.audit.records(transaction_id, after_seq=after_seq, limit=limit)

    def verify_all_audit(self) -> AsyncIterator[AuditVerification]:
        """Every chain of the store (and every transaction without one), in id order."""
        return self.audit.verify_all()

    async def verify_audit_page(
        self, *, after_id: str = "", limit: int = 100, caller: Caller | None = None
    ) -> tuple[list[AuditVerification], str]:
        """Up to ``limit`` chains after transaction ``after_id`` checked, and the id to
        continue after ("" at the end). Every tenant's chains: for the operator only."""
        if caller is not None:
            raise PermissionDenied(
                "verifying every audit chain spans all tenants: verify one transaction's chain, "
                "or run `agenttx audit verify --store URL` on the server's host"
            )
        return await self.audit.verify_page(after_id=after_id, limit=limit)

    # ------------------------------------------------------------------ the outbox

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = (),
        transaction_id: str = "",
        after_id: int = 0,
        limit: int = 100,
        caller: Caller | None = None,
    ) -> EffectPage:
        """Effects of this tenant's outbox, oldest first, with their last error: filtered by
        ``statuses`` (pending, delivering, delivered, dead) and transaction; a page of
        ``limit`` after effect ``after_id``, and the id to continue after (0 at the end).
        A payload is its transaction's data: with a ``caller``, only the effects of the
        transactions it may read (``core.access``); naming another principal's transaction
        is refused as reading it is."""
        if transaction_id:
            check_transaction_id(transaction_id)
            await self.access.check(caller, transaction_id, Action.READ)
        return await self.effects.list_effects(
            statuses=statuses,
            transaction_id=transaction_id,
            after_id=after_id,
            limit=limit,
            tenant=_tenant(caller),
            owner=read_owner(caller),
        )

    async def retry_effect(self, effect_id: int, *, caller: Caller | None = None) -> EffectInfo:
        """Requeue a dead effect and try it once now; returns it after that attempt. With a
        ``caller``: an effect of its tenant, and one of its own transactions unless it is an
        admin (a retry sends the mail or request again)."""
        if caller is not None:
            effect = await self.effects.get(effect_id, caller.tenant)
            await self.access.check(caller, effect.tx_id, Action.ACT)
        return await self.effects.retry_effect(effect_id, _tenant(caller))

    # ------------------------------------------------------------------ reads

    async def get_transaction(
        self,
        transaction_id: str,
        *,
        history: bool = True,
        recent: int | None = None,
        caller: Caller | None = None,
    ) -> TransactionInfo:
        """The transaction's public view; ``history`` includes failed and rewound attempts;
        ``recent``: only the newest that many attempts (and no edges), the rest counted in
        ``earlier_steps_omitted``."""
        check_transaction_id(transaction_id)
        await self.access.check(caller, transaction_id, Action.READ)
        return await self.reader.get_transaction(transaction_id, history=history, recent=recent)

    async def find_transaction(
        self, *, receipt_id: str = "", request_id: str = "", caller: Caller | None = None
    ) -> FoundTransaction:
        """The transaction a preview receipt (``receipt_id``) or a call's ``request_id`` names
        — give exactly one — with how it ended and its receipts (``core.lookup``). A request
        id names a call: the begin that made the transaction, or a step, commit, rollback,
        undo or redo sent to it (``request_method`` says which). ``NotFound`` if nothing
        matches; ``caller``: the read rule of ``get_transaction``."""
        return await self.finder.find(receipt_id=receipt_id, request_id=request_id, caller=caller)

    async def watch(
        self,
        transaction_id: str,
        after_revision: int = 0,
        *,
        caller: Caller | None = None,
        opened: asyncio.Event | None = None,
    ) -> AsyncIterator[TxEvent]:
        """The transaction's state changes, newest revision first if it is past
        ``after_revision``, then one event per durable change, until it ends; ``opened`` is
        set once it is found, readable by ``caller`` and watched."""
        check_transaction_id(transaction_id)
        await self.access.check(caller, transaction_id, Action.READ)
        # aclosing: a watcher that stops early unsubscribes now, not when collected.
        watching = self.reader.watch(transaction_id, after_revision, opened)
        async with contextlib.aclosing(watching) as it:
            async for event in it:
                yield event

    async def may_read(self, transaction_id: str, *, caller: Caller | None = None) -> bool:
        """True iff ``caller`` may read the transaction (its tenant, and its own or with the
        admin or approver role; ``None``, the operator, always): what a listing or a stream of
        every transaction (``/v1/events``) shows it. Never raises for a refusal."""
        try:
            await self.check_read(transaction_id, caller=caller)
        except (NotFound, PermissionDenied):
            return False
        return True

    async def check_read(self, transaction_id: str, *, caller: Caller | None = None) -> None:
        """Raise what a read of the transaction by ``caller`` is refused with (``NotFound`` for
        another tenant's, ``PermissionDenied`` for another principal's without the role);
        a stream whose key changed asks this to know whether it may go on."""
        if caller is not None:
            await self.access.check(caller, transaction_id, Action.READ)

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        limit: int = 100,
        after_id: str = "",
        caller: Caller | None = None,
    ) -> list[TransactionInfo]:
        return await self.reader.list_transactions(
            statuses=statuses, agent_id=agent_id, limit=limit, after_id=after_id, caller=caller
        )

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        label: str | None = None,
        page_size: int = 50,
        page_token: str = "",
        caller: Caller | None = None,
        principal: str | None = None,
        newest_first: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
        tenant: str | None = None,
    ) -> TransactionPage:
        """One page of transactions, oldest first (``newest_first``: newest first), created
        in [``created_after``, ``created_before``) when given, of one ``tenant`` if named;
        ``page_token`` continues a listing. With a ``caller``: its tenant's, and only its own
        unless it is an admin or approver."""
        return await self.reader.list_transactions_page(
            statuses=statuses,
            agent_id=agent_id,
            label=label,
            page_size=page_size,
            page_token=page_token,
            caller=caller,
            principal=principal,
            newest_first=newest_first,
            created_after=created_after,
            created_before=created_before,
            tenant=tenant or None,
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
        principal: str,
        mode: Mode,
        caller: Caller | None,
    ) -> BeginResult:
        meta = dict(metadata or {})
        check_begin(agent_id, meta)
        # Stored and listed: a secret-looking entry is masked like a step's argument.
        meta = self.redactor.value(meta)
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
        own: dict[str, Any] = {"mode": mode.value, "principal": principal}
        if caller is not None:  # the owner (``core.access``); never changes
            own[PRINCIPAL_KEY] = caller.acting_as(principal)[0]
        row = first_row(
            transaction_id_at(now),
            tenant=_tenant(caller) or self.config.tenant,
            agent_id=agent_id,
            status=TxStatus.ACTIVE,
            next_step_id=1,
            isolation=iso.value,
            policy=pol,
            metadata=meta,
            labels=labels,
            now=now,
            **own,
        )
        result = BeginResult(row.id, 1, TxStatus.ACTIVE, row.revision, mode.value)
        # The reply goes in with the transaction: one durable write for both.
        reply = request.reply(result) if request is not None else None
        begun = {
            "agent_id": agent_id,
            "isolation": iso.value,
            "labels": list(labels),
            "metadata_keys": sorted(meta),
            "policy": row.body["policy"],
            "request_id": request.request_id if request is not None else "",
        }
        if principal or mode is not Mode.TRANSACTIONAL:
            begun.update(principal=principal, mode=mode.value)
        audit = self.images.chain(None, row.revision, now, (AuditKind.BEGIN, begun), row=row)
        row = await self.store.create_transaction(row, reply, audit)
        if request is not None:
            request.stored = True
        self.images.add(row, pol, iso, audit)
        if self.events.listened(row.id):
            # A begin inserts rather than updates, so it is told here: listeners (the
            # dashboard's live list, /v1/events) see a transaction from its first revision.
            self.events.publish(TxEvent(row.id, row.revision, TxStatus.ACTIVE, 1, "begin", now))
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
                # A partial rollback is refused, before anything changes, if it would need
                # the undo of a step its tool says cannot be undone (an abort is not).
                refuse_unsupported(rt, to_step, self.registry, self.clock())
                self.controller.on_manual_rewind(rt.ctl, to_step)
                body = dict(rt.body, controller=rt.ctl.to_dict())
                why = cause("MANUAL", "request", reason=reason)
                errors, ran = await self.rewinder.rewind(
                    rt, to_step, TxStatus.ACTIVE, body, None, why
                )
                return rollback_result(rt, ran, errors)
            # Free text from the caller, shown in listings: secrets in it are masked.
            reason = self.redactor.text(reason)
            body = dict(rt.body, abort_reason=reason or "rolled back on request")
            why = cause("ABORT", "request", reason=reason)
            errors, ran = await self.rewinder.rewind(rt, 0, TxStatus.ROLLED_BACK, body, None, why)
            return rollback_result(rt, ran, errors)


def transaction_id_at(now: float) -> str:
    """A new transaction id: ``tx_`` and 32 hex digits, the first 12 the begin's time in
    milliseconds, the other 20 random (80 bits). Begun one after another, transactions get ids
    in order, so their rows (steps, audit records, keyed by the id first) go in at the end of
    each table's B-tree instead of into the middle of a full page: a random id split a page
    (three siblings and their parent rewritten) every few steps (issue 24)."""
    return f"tx_{round(now * 1000) & 0xFFFF_FFFF_FFFF:012x}{secrets.token_hex(10)}"


def _mode(mode: object, principal: str) -> Mode:
    if not isinstance(mode, str):
        raise InvalidArgument(f"mode must be a string, got {type(mode).__name__}")
    try:
        chosen = Mode(mode or Mode.TRANSACTIONAL.value)
    except ValueError:
        allowed = ", ".join(m.value for m in Mode)
        raise InvalidArgument(f"unknown mode {mode!r}; use one of {allowed}") from None
    if chosen is Mode.APPROVAL_REQUIRED and not principal:
        raise InvalidArgument(
            "mode approval_required needs the principal who begins the transaction, so that "
            "a different one can approve its commit"
        )
    return chosen


def _tenant(caller: Caller | None) -> str | None:
    """The tenant a call runs in: the caller's, or (None) the engine's own."""
    return caller.tenant if caller is not None else None


__all__ = ["Dispatcher", "Engine", "EngineConfig"]
