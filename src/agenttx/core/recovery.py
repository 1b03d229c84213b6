"""Finishing what a crash interrupted, settling unknown outcomes, and the idle reaper."""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Any

from agenttx.core.base import LIVE_OWNERS, OPEN, dumps_json
from agenttx.core.runtime import TxRuntime
from agenttx.core.steps import StepPipeline
from agenttx.core.views import step_references
from agenttx.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    NotActive,
    NotFound,
    RevisionConflict,
)
from agenttx.store.contract import (
    StepRow,
    TxRow,
)
from agenttx.types import (
    StepStatus,
    TransactionInfo,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")


class Maintenance(StepPipeline):
    async def resolve_outcome(
        self, tx_id: str, step_id: int, *, happened: bool, output: Any = None
    ) -> TransactionInfo:
        """Settle a step whose outside call had an unknown outcome (after checking the outside
        system): ``happened`` keeps it as a successful step with ``output``; otherwise its undo
        records are discarded unrun and the step can be sent again."""
        async with self._locked(tx_id) as rt:
            pending = int(rt.body.get("outcome_unknown_step", 0))
            if pending == 0 or pending != step_id:
                raise FailedPrecondition(
                    f"transaction {tx_id}: step {step_id} has no unknown outcome to resolve"
                )
            steps = await self.store.load_steps(tx_id, live_only=False)
            last = next(s for s in reversed(steps) if s.step_id == step_id)
            body = dict(rt.body, outcome_unknown_step=0)
            if happened:
                last.status = StepStatus.SUCCESS.value
                last.live = True
                last.output_json = dumps_json(output)
                last.detail = dict(last.detail, resolved="happened")
                update = self._update(rt, TxStatus.ACTIVE, step_id + 1, body, OPEN)
                self._applied(rt, update, await self.store.finish_step(update, last))
                rt.steps[step_id] = last
                rt.outputs[step_id] = output
                rt.add_to_graph(
                    step_id,
                    json.loads(last.arguments_json) if last.arguments_json else None,
                    output,
                    step_references(last),
                )
            else:
                for u in [u for u in rt.undo if u.step_id == step_id]:
                    await self.store.set_undo_status(u.id, "done", u.attempts, "not happened")
                rt.undo = [u for u in rt.undo if u.step_id != step_id]
                last.status = StepStatus.FAILED.value
                last.detail = dict(last.detail, resolved="not_happened")
                update = self._update(rt, TxStatus.ACTIVE, step_id, body, OPEN)
                self._applied(rt, update, await self.store.finish_step(update, last))
            return await self.get_transaction(tx_id, history=True)

    # ------------------------------------------------------------------ rewind

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
        rt = self._runtimes.get(row.id)
        if rt is not None and rt.lock.locked():
            return ""  # live in this process
        try:
            # Holding the transaction's lock proves no live call (here or on another replica)
            # is working on it; a replica that is still busy with it makes us skip it.
            async with self._locked(row.id, lock_timeout_s=0.5) as rt:
                return await self._recover_locked(await self._reload(rt))
        except DeadlineExceeded:
            return ""

    async def _finish_interrupted(self, rt: TxRuntime) -> None:
        await self._recover_locked(rt)

    async def _recover_locked(self, rt: TxRuntime) -> str:
        status = TxStatus(rt.row.status)
        if status is TxStatus.ROLLING_BACK:
            plan = rt.body.get("rewind") or {"target": 0, "final": TxStatus.FAILED.value}
            body = dict(rt.body)
            await self._rewind(rt, int(plan["target"]), TxStatus(plan["final"]), body, None)
            return "rewinds"
        if status is TxStatus.EXECUTING:
            steps = await self.store.load_steps(rt.id, live_only=False)
            running = next((s for s in reversed(steps) if s.status == "RUNNING"), None)
            # A shared store's lock (held by the caller) already proves the owner is gone; one
            # process per store relies on the step's lease and owner pid.
            if (
                running is not None
                and not self.store.shared
                and not _lease_dead(running, self.clock())
            ):
                return ""
            await self._recover_step(rt, running)
            return "interrupted_steps"
        return ""

    async def _recover_step(self, rt: TxRuntime, running: StepRow | None) -> None:
        step_id = running.step_id if running else rt.row.next_step_id
        tool = self.registry.get(running.tool) if running else None
        text = "the step was interrupted by a restart before it finished"
        # An unknown tool (registered on the replica that died, not here) may not be
        # idempotent either: only a tool known to be idempotent is simply undone and resent.
        if running is not None and (tool is None or not tool.idempotent):
            running.status = StepStatus.OUTCOME_UNKNOWN.value
            running.detail = {"hint": f"Hint: {text}; check whether it happened.", "error": text}
            running.finished_at = self.clock()
            body = dict(rt.body, outcome_unknown_step=step_id)
            update = self._update(rt, TxStatus.ACTIVE, step_id, body, (TxStatus.EXECUTING.value,))
            self._applied(rt, update, await self.store.finish_step(update, running))
            return
        # An idempotent tool: undo whatever it did and let the agent send it again.
        if running is not None:
            running.status = StepStatus.FAILED.value
            running.detail = {"hint": f"Hint: {text}; send the same step again.", "error": text}
            running.finished_at = self.clock()
        await self._rewind(rt, step_id, TxStatus.ACTIVE, dict(rt.body), running)

    async def reap_idle(self) -> int:
        """Abort ACTIVE transactions idle longer than the timeout; returns how many."""
        timeout = self.config.tx_idle_timeout_secs
        if timeout <= 0:
            return 0
        cutoff = self.clock() - timeout
        reaped = 0
        rows = await self.store.list_transactions(
            statuses=(TxStatus.ACTIVE.value,), idle_before=cutoff, limit=500
        )
        for row in rows:
            rt = self._runtimes.get(row.id)
            if rt is not None and rt.lock.locked():
                continue  # a call is in flight: it is not idle
            try:
                rt = await self._runtime(row.id)
                async with rt.lock:
                    rt = await self._reload(rt)
                    if rt.row.status != TxStatus.ACTIVE.value or rt.row.last_activity_at >= cutoff:
                        continue
                    body = dict(rt.body, abort_reason=f"idle for more than {timeout:g} s")
                    await self._rewind(rt, 0, TxStatus.ROLLED_BACK, body, None)
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


def _lease_dead(step: StepRow, now: float) -> bool:
    """True iff the process that ran ``step`` is gone: its lease expired, or it was a process
    on this host that no longer exists (so a restart resumes at once after a crash)."""
    if step.lease_until <= now:
        return True
    host, _, rest = step.lease_owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        # This process: dead iff no engine of ours that is still open ran it (a restarted
        # engine, not a second engine open on the same file).
        return step.lease_owner not in LIVE_OWNERS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
