"""Recovery: finish what a crash interrupted, settle unknown outcomes, reap idle transactions
and prune old state versions.

Invariants:

- Work a live call is doing is never taken over: recovery acts on a transaction only while
  holding its lock (which, on a shared store, also proves no other replica is in a call on
  it), and a RUNNING step of a one-process store only once its lease owner is gone
  (``leases.py``).
- An interrupted rewind is finished from its durable plan; an interrupted outside step
  becomes OUTCOME_UNKNOWN unless its tool is known to be idempotent (then it is undone and
  may be sent again). A timeout never means "nothing happened".
- The reaper never aborts a transaction with a call in flight or one that is EXECUTING.
"""

from __future__ import annotations

from agenttx.core.audit import cause, step_event
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.contracts import decided
from agenttx.core.images import TxImages
from agenttx.core.leases import lease_dead
from agenttx.core.reconcile import ms_left, pending_record
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import TxRuntime
from agenttx.core.undo_outcomes import still_unknown
from agenttx.errors import (
    DeadlineExceeded,
    NotActive,
    NotFound,
    RevisionConflict,
)
from agenttx.store.contract import StepRow, Store, TxRow
from agenttx.tools.registry import ToolRegistry
from agenttx.types import StepStatus, TxStatus

INTERRUPTED_TEXT = "the step was interrupted by a restart before it finished"


def outcome_unknown_hint(step_id: int, cause: str, retry_after_ms: int = 0) -> str:
    """The hint of an OUTCOME_UNKNOWN step: what the agent must do next. Sending the step
    again is refused until the outcome is settled, so the hint never says "retry"."""
    cause = " ".join(cause.split())
    if len(cause) > 60:
        cause = cause[:59] + "…"
    when = f" after {retry_after_ms} ms" if retry_after_ms > 0 else ""
    return (
        f"Hint: step {step_id} may or may not have taken effect ({cause}); reconcile the step "
        f"(reconcile_step{when}; no handler: resolve it happened / not happened) or roll back."
    )


class Recovery:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images
        self.rewinder = rewinder  # finishes interrupted rewinds, undoes idempotent steps, reaps
        self.store = store
        self.registry = registry  # whether an interrupted step's tool is idempotent
        self.config = config  # the idle timeout
        self.clock = clock

    # ------------------------------------------------------------------ after a crash

    async def recover(self) -> dict[str, int]:
        """Finish what a crash interrupted: rewinds and aborts in ROLLING_BACK, steps left
        EXECUTING by a dead process. Safe to run while serving."""
        counts = {"rewinds": 0, "interrupted_steps": 0}
        after = ""
        while True:
            rows = await self.store.list_transactions(
                statuses=(TxStatus.ROLLING_BACK.value, TxStatus.EXECUTING.value),
                limit=200,
                after_id=after,
            )
            if not rows:
                return counts
            after = rows[-1].id
            for row in rows:
                try:
                    kind = await self._recover_one(row)
                except (RevisionConflict, NotFound):
                    continue  # someone else recovered it meanwhile
                if kind:
                    counts[kind] += 1

    async def _recover_one(self, row: TxRow) -> str:
        rt = self.images.cache.get(row.id)
        if rt is not None and rt.lock.locked():
            return ""  # live in this process
        try:
            # Holding the transaction's lock proves no live call (here or on another replica)
            # is working on it; a replica that is still busy with it makes us skip it.
            async with self.images.locked(row.id, lock_timeout_s=0.5) as rt:
                return await self.finish_interrupted(await self.images.reload(rt))
        except DeadlineExceeded:
            return ""

    async def finish_interrupted(self, rt: TxRuntime) -> str:
        """Finish a rewind or a step a dead process left behind; the caller holds the
        transaction's lock. Returns what was finished ("rewinds", "interrupted_steps") or ""."""
        status = TxStatus(rt.row.status)
        if status is TxStatus.ROLLING_BACK:
            plan = rt.body.get("rewind") or {"target": 0, "final": TxStatus.FAILED.value}
            if plan.get("awaiting_approval") and not decided(plan):
                # Waits for ``approve_compensation`` / ``refuse_compensation``, not for
                # recovery; a decided plan is finished as the approver decided.
                return ""
            if still_unknown(plan.get("undo_unknown", ()), rt.undo):
                # Waits for its unknown undo's answer (``undo_reconcile``); an undo settled by
                # a call that crashed before its plan said so is finished here.
                return ""
            body = dict(rt.body)
            why = cause("RECOVERY", "restart")
            events = [(str(k), d) for k, d in plan.get("events", ())]  # an undo's record
            await self.rewinder.rewind(
                rt, int(plan["target"]), TxStatus(plan["final"]), body, None, why, events=events
            )
            return "rewinds"
        if status is TxStatus.EXECUTING:
            steps = await self.store.load_steps(rt.transaction_id, live_only=False)
            running = next((s for s in reversed(steps) if s.status == "RUNNING"), None)
            # A shared store's lock (held by the caller) already proves the owner is gone; a
            # file store relies on the step's lease and owner pid — and a step this very engine
            # owns is dead too: its call held the lock the caller holds now, so it has ended
            # (its last write failed, e.g. on a full disk).
            if (
                running is not None
                and not self.store.shared
                and running.lease_owner != self.config.owner
                and not lease_dead(running, self.clock())
            ):
                return ""
            await self._recover_step(rt, running)
            return "interrupted_steps"
        return ""

    async def _recover_step(self, rt: TxRuntime, running: StepRow | None) -> None:
        step_id = running.step_id if running else rt.row.next_step_id
        tool = self.registry.get(running.tool) if running else None
        # An unknown tool (registered on the replica that died, not here) may not be
        # idempotent either: only a tool known to be idempotent is simply undone and resent.
        if running is not None and (tool is None or not tool.idempotent):
            # The provider operation it checkpointed before the crash is what reconcile asks.
            op = running.detail.get("op")
            record = pending_record(step_id, self.clock(), op, None)
            running.status = StepStatus.OUTCOME_UNKNOWN.value
            running.detail = {
                "hint": outcome_unknown_hint(
                    step_id, INTERRUPTED_TEXT, ms_left(record, self.clock())
                ),
                "error": INTERRUPTED_TEXT,
                **({"op": op} if op else {}),
            }
            running.finished_at = self.clock()
            body = dict(rt.body, outcome_unknown_step=step_id, reconcile=record)
            update = self.images.update(
                rt,
                TxStatus.ACTIVE,
                step_id,
                body,
                (TxStatus.EXECUTING.value,),
                audit=[step_event(running)],
            )
            self.images.applied(rt, update, await self.store.finish_step(update, running))
            return
        # An idempotent tool: undo whatever it did and let the agent send it again.
        if running is not None:
            running.status = StepStatus.FAILED.value
            running.detail = {
                "hint": f"Hint: {INTERRUPTED_TEXT}; send the same step again.",
                "error": INTERRUPTED_TEXT,
            }
            running.finished_at = self.clock()
        why = cause("RETRY", "restart")
        await self.rewinder.rewind(rt, step_id, TxStatus.ACTIVE, dict(rt.body), running, why)

    # ------------------------------------------------------------------ maintenance

    async def reap_idle(self) -> int:
        """Abort ACTIVE transactions idle longer than the timeout; returns how many."""
        timeout = self.config.tx_idle_timeout_s
        if timeout <= 0:
            return 0
        cutoff = self.clock() - timeout
        reaped = 0
        rows = await self.store.list_transactions(
            statuses=(TxStatus.ACTIVE.value,), idle_before=cutoff, limit=500
        )
        for row in rows:
            rt = self.images.cache.get(row.id)
            if rt is not None and rt.lock.locked():
                continue  # a call is in flight: it is not idle
            try:
                rt = await self.images.get(row.id)
                async with rt.lock:
                    rt = await self.images.reload(rt)
                    if rt.row.status != TxStatus.ACTIVE.value or rt.row.last_activity_at >= cutoff:
                        continue
                    body = dict(rt.body, abort_reason=f"idle for more than {timeout:g} s")
                    why = cause("ABORT", "idle_timeout")
                    await self.rewinder.rewind(rt, 0, TxStatus.ROLLED_BACK, body, None, why)
                    reaped += 1
            except (RevisionConflict, NotFound, NotActive):
                continue
        return reaped

    async def prune_versions(self) -> int:
        """Drop committed versions no open transaction can see any more; returns how many."""
        horizon = await self.store.oldest_open_snapshot()
        if horizon is None:
            horizon = await self.store.current_version()
        return await self.store.prune_versions(horizon)
