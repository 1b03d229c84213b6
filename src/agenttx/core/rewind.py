"""The rewinder: undo everything a transaction did from a step on, and leave it in a final
status — the one mechanism behind a failed step's rollback, a manual rollback, an abort, a
commit conflict and an idle reap.

Order (the reference's): compensate the undo records of steps ≥ target newest first (each up
to ``compensation_retries`` times, backoff 10 ms · 2^try; a failure is reported and its record
kept) → drop staged effects ≥ target → restore state → truncate steps, context and graph.

Each run of an undo handler is bounded by its tool's ``undo_timeout``. One that times out or
raises ``UncertainOutcome`` is not tried again: its record becomes ``outcome_unknown`` (durable
before the next undo runs), the other undo actions run, and the rewind waits in ROLLING_BACK
until that outcome is reconciled or resolved (``undo_outcomes``).

Durability: without compensations the rewind is one store transaction. With them it is two
phases: ROLLING_BACK with the plan (``body["rewind"]``), then the compensations, then the
final state; a crash in between is finished by recovery from that plan, and compensations
already done (their records marked ``done``) are not run again.

Audit: the failed attempt (if any) and the rollback with its ``cause`` (strategy, trigger) go
in the chain with the phase that makes them durable; each compensation with its own record.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.attempts import with_tried
from agenttx.core.audit import compensation_event, rollback_event, step_event
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.contracts import (
    AWAITING,
    BLOCKED,
    RUN,
    describe_evidence,
    evidence,
    merged_evidence,
    refusal_reason,
    rewind_actions,
    tool_of,
)
from agenttx.core.eager import leave_eager
from agenttx.core.images import Event, TxImages
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import UNFINISHED
from agenttx.core.undo_outcomes import UNKNOWN, records_for, unknown_line, unknown_record
from agenttx.errors import UncertainOutcome
from agenttx.redaction import redact
from agenttx.store.contract import StepRow, Store, UndoRow
from agenttx.tools.contract import DEFAULT_TIMEOUT_S
from agenttx.tools.registry import ToolRegistry
from agenttx.types import CompensationAction, TxStatus


class Rewinder:
    def __init__(
        self,
        images: TxImages,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images  # builds and mirrors the durable updates
        self.store = store
        self.registry = registry  # where undo handlers are found by name
        self.config = config  # compensation retries and backoff
        self.clock = clock

    async def rewind(
        self,
        rt: TxRuntime,
        target: int,
        final: TxStatus,
        body: dict[str, Any],
        failed_row: StepRow | None,
        cause: Mapping[str, Any] | None = None,
        events: Sequence[Event] = (),
    ) -> tuple[list[str], int]:
        """Undo everything of steps ≥ target and leave the transaction in ``final`` with
        ``next_step_id = target`` (0 if it ended); ``failed_row`` (the attempt that caused
        it) becomes durable with the first phase. ``cause`` (strategy, trigger) goes in the
        rollback's audit record; ``events`` follow it in the final write (an undo's own).
        Returns (compensation errors, compensations run). The caller holds the lock."""
        images = self.images
        target = max(target, 0)
        to_undo = [u for u in rt.undo if u.step_id >= target and u.status == "pending"]
        next_step = target if not final.terminal else 0
        if final.terminal:
            body = dict(body, ended_at=self.clock())
        ran = 0
        fresh: list[dict[str, Any]] = []
        why = cause or {}
        failed = [step_event(failed_row)] if failed_row is not None else []
        # The contracts decide which undo actions may run (``contracts``): an approval asked
        # for and not given makes the rewind wait; past-window, unsupported and refused ones
        # are not run, and the transaction needs a human. The approver's decision (approved_*
        # or refused_* / refusal_reason) stays in the plan until the rewind ends, so a restart
        # that finishes it decides the same way.
        approval = {
            k: v for k, v in (body.get("rewind") or {}).items() if k.startswith(("approv", "refus"))
        }
        actions = rewind_actions(
            rt.steps,
            to_undo,
            target,
            self.registry,
            self.clock(),
            approved=bool(approval.get("approved_by")),
            refused=refusal_reason(approval),
            failed_row=failed_row,
            next_step_id=rt.row.next_step_id,
        )
        verdicts = {a.undo_id: a.verdict for a in actions if a.undo_id}
        awaiting = [a.step_id for a in actions if a.verdict == AWAITING]
        blocked = [a for a in actions if a.verdict in BLOCKED]
        # The evidence of what is not undone is kept in the plan too: a restart that finishes
        # this rewind after those undo records were marked skipped (no longer pending, so not
        # judged again) still reports them.
        not_undone = merged_evidence(
            (body.get("rewind") or {}).get("not_undone", ()), map(evidence, blocked)
        )
        # The undo records this rewind covers, fixed by its first write. A restart that
        # finishes it still reports the ones whose undo failed before the crash: they are no
        # longer pending, so they are neither run again nor judged, and without this the
        # transaction would end as if every undo had worked. (Records of failed undos from an
        # earlier rewind share step numbers with this one's, hence the ids, not the steps.)
        covered = {int(i) for i in (body.get("rewind") or {}).get("undo_ids", ())}
        errors = [undo_error(u) for u in rt.undo if u.id in covered and u.status == "failed"]
        if to_undo:
            plan = dict(body, rewind={"target": target, "final": final.value, **approval})
            plan["rewind"]["undo_ids"] = sorted(covered | {u.id for u in to_undo})
            if not_undone:
                plan["rewind"]["not_undone"] = not_undone
            if awaiting:
                plan["rewind"]["awaiting_approval"] = awaiting
                plan["rewind"]["cause"] = dict(why)
            if events:  # kept with the plan: a restart that finishes it still records them
                plan["rewind"]["events"] = [[kind, dict(data)] for kind, data in events]
            started = rollback_event(
                AuditKind.ROLLBACK_STARTED,
                target,
                final.value,
                why,
                compensations=len(to_undo),
                **({"awaiting_approval": awaiting} if awaiting else {}),
            )
            update = images.update(
                rt,
                TxStatus.ROLLING_BACK,
                rt.row.next_step_id,
                plan,
                UNFINISHED,
                audit=[*failed, started],
            )
            failed = []
            if failed_row is not None:
                revision = await self.store.finish_step(update, failed_row)
                failed_row = None
            else:
                revision = await self.store.update_transaction(update)
            images.applied(rt, update, revision)
            if awaiting:
                # Waits in ROLLING_BACK for ``approve_compensation``; recovery leaves it be.
                return [], 0
            await self.skip(rt, [u for u in to_undo if verdicts.get(u.id) in BLOCKED], blocked)
            to_run = [u for u in to_undo if verdicts.get(u.id, RUN) == RUN]
            failures, fresh = await self.compensate(rt, to_run)
            errors += failures
            ran = len(to_run)
            body = dict(rt.body)
        # An undo whose outcome is unknown (now, or before a crash) is never run again: the
        # rewind waits for its answer (``undo_outcomes``) instead of ending as if it worked.
        mine = covered | {u.id for u in to_undo}
        unknown = [u for u in rt.undo if u.id in mine and u.status == UNKNOWN]
        if unknown:
            plan = dict(body.get("rewind") or {}, target=target, final=final.value, cause=dict(why))
            plan["undo_ids"] = sorted(mine)
            if not_undone:
                plan["not_undone"] = not_undone
            if events:
                plan["events"] = [[kind, dict(data)] for kind, data in events]
            known = [*plan.get("undo_unknown", ()), *fresh]
            plan["undo_unknown"] = records_for(
                unknown, known, lambda u: self.tool_name(rt, u), self.clock()
            )
            update = images.update(
                rt, TxStatus.ROLLING_BACK, rt.row.next_step_id, dict(body, rewind=plan), UNFINISHED
            )
            images.applied(rt, update, await self.store.update_transaction(update))
            tx = rt.transaction_id
            return [*errors, *(unknown_line(tx, r) for r in plan["undo_unknown"])], ran
        if not_undone:
            body = dict(
                body,
                compensation_evidence=[*body.get("compensation_evidence", []), *not_undone],
            )
            errors = [*map(describe_evidence, not_undone), *errors]
        if errors:
            body["requires_human"] = True
            body["compensation_errors"] = [*body.get("compensation_errors", []), *errors]
        if target <= 1 or int(body.get("outcome_unknown_step", 0)) >= target:
            body["outcome_unknown_step"] = 0
            body.pop("reconcile", None)  # its reconcile record goes with it (reconcile.py)
        body = {k: v for k, v in body.items() if k != "rewind"}  # the plan is done
        ended = rollback_event(
            AuditKind.ROLLBACK,
            target,
            final.value,
            why,
            compensations=ran,
            compensation_errors=len(errors),
            reason=str(body.get("abort_reason", "")) if final.terminal else "",
        )
        audit = [*failed, ended, *events]
        if not final.terminal:  # the steps undone are sent again as their next tries
            body = with_tried(body, [s for n, s in rt.steps.items() if n >= target])
        update = images.update(rt, final, next_step, body, UNFINISHED, audit=audit)
        images.applied(rt, update, await self.store.finish_rewind(update, target, failed_row))
        rt.drop_from(target)
        images.evict(rt)
        return errors, ran

    async def skip(
        self, rt: TxRuntime, rows: list[UndoRow], blocked: list[CompensationAction]
    ) -> None:
        """Mark undo records their contract does not let run ``skipped``, each with its
        audit record saying why: evidence, never run later."""
        why = {a.undo_id: a.reason for a in blocked}
        for row in rows:
            row.status = "skipped"
            row.last_error = why.get(row.id, "")
            records = self.images.chain(rt, rt.row.revision, self.clock(), compensation_event(row))
            sealed = self.images.seal_seq(rt)
            await self.store.set_undo_status(
                row.id, "skipped", row.attempts, row.last_error, records, audit_seq=sealed
            )
            self.images.appended(rt, records, sealed)

    async def compensate(
        self, rt: TxRuntime, rows: list[UndoRow], *, on_behalf_of: str = ""
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Run undo handlers newest first, each up to ``compensation_retries`` times with
        exponential backoff and each run under its tool's ``undo_timeout``; a handler that
        keeps failing is reported and its record kept (``failed``). One that times out or
        raises ``UncertainOutcome`` is not tried again: its record becomes ``outcome_unknown``
        at once. Each outcome is durable, with its audit record in ``rt``'s chain, before the
        next undo runs; a handler sees the transaction ``on_behalf_of`` (default ``rt``'s) —
        a compensating transaction's handlers see the committed one they undo. Returns (the
        failures' ``compensation_errors`` lines, the unknown undos' waiting records)."""
        errors: list[str] = []
        unknown: list[dict[str, Any]] = []
        if rows:
            await leave_eager()  # undo handlers are user code
        for row in sorted(rows, key=lambda u: u.id, reverse=True):
            handler = self.registry.undo_handler(row.handler)
            tool = tool_of(rt.steps.get(row.step_id), row.handler, self.registry)
            timeout = tool.undo_timeout if tool is not None else DEFAULT_TIMEOUT_S
            last = ""
            status = "failed"
            uncertain: UncertainOutcome | None = None
            tries = max(self.config.compensation_retries, 1)
            for n in range(tries):
                row.attempts += 1
                if handler is None:
                    last = f"no undo handler named {row.handler!r} is registered"
                    break
                ctx = UndoContext(on_behalf_of or rt.transaction_id, row)
                try:
                    async with asyncio.timeout(timeout) as limit:
                        await _run_undo(handler, ctx, json.loads(row.args_json))
                    status = "done"
                    break
                except TimeoutError as exc:
                    # A timeout is no proof the undo did not happen: never sent again blindly.
                    status = UNKNOWN
                    last = (
                        f"the undo handler timed out after {int(timeout * 1000)} ms"
                        if limit.expired()
                        else redact(f"TimeoutError: {exc}")
                    )
                    break
                except UncertainOutcome as exc:
                    status, uncertain = UNKNOWN, exc
                    op = f" (operation {exc.operation_id})" if exc.operation_id else ""
                    last = redact(f"UncertainOutcome: {exc}{op}")
                    break
                except Exception as exc:
                    # The handler's own words reach every reply's compensation_errors:
                    # its secrets are masked before they are kept.
                    last = redact(f"{type(exc).__name__}: {exc}")
                    if n + 1 < tries:
                        # Backoff between tries: the outside system may need a moment.
                        await asyncio.sleep(self.config.compensation_backoff_s * (2**n))
            row.status = status
            row.last_error = "" if status == "done" else last
            records = self.images.chain(rt, rt.row.revision, self.clock(), compensation_event(row))
            sealed = self.images.seal_seq(rt)
            # The checkpoint of an unknown outcome too: durable before anything else runs.
            await self.store.set_undo_status(
                row.id, status, row.attempts, row.last_error, records, audit_seq=sealed
            )
            self.images.appended(rt, records, sealed)
            if status == "failed":
                errors.append(undo_error(row))
            elif status == UNKNOWN:
                unknown.append(
                    unknown_record(
                        row,
                        self.tool_name(rt, row),
                        self.clock(),
                        provider=uncertain.provider if uncertain else "",
                        operation_id=(uncertain.operation_id or "") if uncertain else "",
                        retry_after_ms=uncertain.retry_after_ms if uncertain else None,
                    )
                )
        return errors, unknown

    def tool_name(self, rt: TxRuntime, row: UndoRow) -> str:
        """The name of the tool whose step left the undo record ``row``."""
        tool = tool_of(rt.steps.get(row.step_id), row.handler, self.registry)
        return tool.name if tool is not None else row.handler.removesuffix("#undo")


async def _run_undo(handler: Any, ctx: UndoContext, arguments: dict[str, Any]) -> None:
    """Run one undo handler: a coroutine function on the loop, a plain function on a worker
    thread (it may block; the timeout then stops the wait, not the thread)."""
    if asyncio.iscoroutinefunction(handler):
        await handler(ctx, **arguments)
        return
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(None, functools.partial(handler, ctx, **arguments))
    if asyncio.iscoroutine(result):
        await result


def undo_error(row: UndoRow) -> str:
    """The line ``compensation_errors`` gets for an undo that kept failing."""
    return f"undo {row.handler} of step {row.step_id}: {row.last_error}"


class UndoContext:
    """What an undo handler receives as ``ctx``."""

    def __init__(self, transaction_id: str, row: UndoRow) -> None:
        self.transaction_id = transaction_id
        self.step_id = row.step_id
        self.idempotency_key = row.idempotency_key
