"""The committer: validate a transaction per its isolation level, publish it in one store
transaction, and release its staged effects.

Invariants:

- One store transaction publishes the writes, enqueues the staged effects in the outbox and
  ends the transaction (``Store.commit`` with a ``CommitPlan``): there is no half-done commit.
- A conflict aborts: the plan's ``on_conflict`` makes the transaction ROLLING_BACK with its
  abort reason durably, then the rewinder compensates and ends it FAILED (``CommitConflict``
  names the keys). A crash in between is finished by recovery.
- Effects are released only after the commit is durable, outside the transaction's lock,
  through the ``EffectRelease`` handed in at construction (the outbox dispatcher). Without
  one, the commit claims nothing and leaves its effects ``pending`` for a dispatcher.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agenttx.audit import AuditKind
from agenttx.core.audit import cause
from agenttx.core.config import Clock
from agenttx.core.contracts import KeptUndo
from agenttx.core.eager import leave_eager
from agenttx.core.images import TxImages
from agenttx.core.requests import Request
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import OPEN
from agenttx.errors import CommitConflict, NotActive, OutcomeUnknownPending
from agenttx.store.contract import CommitPlan, OutboxRow, Store, VersionCheck
from agenttx.types import CommitResult, Isolation, TxStatus


class EffectRelease(Protocol):
    """What the committer needs of a dispatcher (``agenttx.effects.OutboxDispatcher``)."""

    lease_secs: float  # how long a commit's claim on its outbox rows lasts

    async def deliver_now(self, rows: Sequence[OutboxRow]) -> tuple[int, list[str]]:
        """Try each claimed row once: (delivered, errors); failures go back to the queue."""
        ...

    def wake(self) -> None:
        """Let the background delivery loop look at the queue now."""
        ...


class Committer:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        store: Store,
        dispatcher: EffectRelease | None,
        clock: Clock,
        *,
        kept: KeptUndo | None = None,
    ) -> None:
        self.images = images
        # Which undo records outlive the commit for a compensation (None: none do).
        self.kept = kept
        self.rewinder = rewinder  # aborts a transaction that lost validation
        self.store = store
        # Delivers a commit's effects right after it; None leaves them to a dispatcher.
        self.dispatcher = dispatcher
        self.clock = clock

    async def commit(
        self,
        transaction_id: str,
        request: Request | None = None,
        admit: Callable[[TxRuntime], Awaitable[dict[str, Any]]] | None = None,
    ) -> CommitResult:
        """Commit the transaction. With ``request``, its stored reply is looked up under the
        lock, and a commit that delivers nothing right away stores its reply in the commit's
        own store transaction; one that delivers effects counts them in its reply, so that
        reply is stored after delivery (``RequestLog``), with the commit's outcome and
        ``commit_request_id`` durable first for ``commit_replay``. ``admit`` (the snapshot,
        receipt and approval checks, ``Approvals.admit_commit``) runs under the lock before
        anything is written; what it returns joins the commit's audit record."""
        images = self.images
        request_id = request.request_id if request is not None else ""
        async with images.locked(transaction_id, request=request) as rt:
            status = TxStatus(rt.row.status)
            if status is not TxStatus.ACTIVE:
                raise NotActive(transaction_id, status.value, "commit")
            if rt.body.get("outcome_unknown_step"):
                raise OutcomeUnknownPending(transaction_id, int(rt.body["outcome_unknown_step"]))
            admitted = await admit(rt) if admit is not None else {}
            writes = rt.final_writes()
            steps_committed = len(rt.steps)
            now = self.clock()
            # The receipt the commit used: a view keeps showing it as decided, never expired.
            done_body = dict(
                rt.body,
                ended_at=now,
                commit_request_id=request_id,
                commit_receipt_id=str(admitted.get("receipt_id", "")),
            )
            keep: list[tuple[int, float]] = []
            if self.kept is not None and (rt.undo or rt.steps):
                entries, keep = self.kept.at_commit(rt.steps, rt.undo, now)
                if entries:
                    done_body["compensation_kept"] = entries
            # The reason is durable with the plan: a crash before the abort finishes still
            # leaves a FAILED transaction that says why.
            conflict_body = dict(
                rt.body,
                rewind={"target": 0, "final": TxStatus.FAILED.value},
                abort_reason="commit conflict: another transaction committed first",
                commit_request_id=request_id,
            )
            # The commit claims its effects (a lease) to deliver them itself right after, so
            # no background pass takes them first.
            dispatcher = self.dispatcher if rt.staged else None
            committed = {
                "steps": steps_committed,
                "writes": len(writes),
                "effects": len(rt.staged),
                "isolation": rt.isolation.value,
                "request_id": request_id,
                **admitted,
            }
            on_success = images.update(
                rt, TxStatus.COMMITTED, 0, done_body, OPEN, audit=[(AuditKind.COMMIT, committed)]
            )
            # Nothing to deliver now: the reply is known before the commit, and goes in with it.
            folded: CommitResult | None = None
            if request is not None and dispatcher is None:
                folded = CommitResult(
                    transaction_id=transaction_id,
                    committed=True,
                    steps_committed=steps_committed,
                    effects_dispatched=0,
                    dispatch_errors=[],
                    effects_queued=len(rt.staged),  # one outbox row per staged effect
                    transaction_status=TxStatus.COMMITTED,
                    revision=on_success.expected_revision + 1,
                )
            plan = CommitPlan(
                tenant=rt.row.tenant,
                writes=writes,
                effects=list(rt.staged),
                checks=validation_checks(rt, writes),
                on_success=on_success,
                on_conflict=images.update(
                    rt,
                    TxStatus.ROLLING_BACK,
                    rt.row.next_step_id,
                    conflict_body,
                    OPEN,
                    audit=[(AuditKind.COMMIT_CONFLICT, {"request_id": request_id})],
                ),
                claim_until=now + dispatcher.lease_secs if dispatcher is not None else 0.0,
                reply=request.reply(folded) if request is not None and folded else None,
                keep_undo=keep,
            )
            outcome = await self.store.commit(plan)
            applied = plan.on_success if outcome.committed else plan.on_conflict
            images.applied(rt, applied, outcome.revision)
            if not outcome.committed:
                keys = [c.key for c in outcome.conflicts]
                kind = outcome.conflicts[0].kind if outcome.conflicts else "write"
                body = dict(rt.body)
                body.pop("rewind", None)
                body["abort_reason"] = (
                    f"{kind} conflict on key `{keys[0]}`: it was committed by another transaction"
                )
                why = cause("ABORT", "commit_conflict", keys=keys[:32])
                errors, _ = await self.rewinder.rewind(rt, 0, TxStatus.FAILED, body, None, why)
                raise CommitConflict(transaction_id, keys, kind, errors)
            images.evict(rt)
        if folded is not None:
            assert request is not None
            request.stored = True
            return folded
        # Outside the lock: the transaction is over, delivery must not hold anything up.
        dispatched, dispatch_errors = await self.release(
            outcome.outbox if dispatcher is not None else []
        )
        return CommitResult(
            transaction_id=transaction_id,
            committed=True,
            steps_committed=steps_committed,
            effects_dispatched=dispatched,
            dispatch_errors=dispatch_errors,
            effects_queued=len(outcome.outbox),
            transaction_status=TxStatus.COMMITTED,
            revision=rt.row.revision,
        )

    async def release(self, rows: list[OutboxRow]) -> tuple[int, list[str]]:
        """Deliver the outbox rows a durable commit claimed, once each, right away, so the
        reply says how many went out: (delivered, errors). Failures go back to the queue for
        the dispatcher's retries."""
        if not rows or self.dispatcher is None:
            return 0, []
        await leave_eager()  # channels are user code, under a delivery timeout
        result = await self.dispatcher.deliver_now(rows)
        self.dispatcher.wake()
        return result


def validation_checks(rt: TxRuntime, writes: Mapping[str, str | None]) -> list[VersionCheck]:
    """Commit validation per isolation level (``docs/isolation.md``)."""
    if rt.isolation is Isolation.READ_COMMITTED:
        return [VersionCheck(k, rt.base_version(k) or 0, "write") for k in writes]
    checks = [VersionCheck(k, rt.row.snapshot, "write") for k in writes]
    if rt.isolation is Isolation.SERIALIZABLE:
        checks += [VersionCheck(k, rt.row.snapshot, "read") for k in rt.read_set if k not in writes]
    return checks
