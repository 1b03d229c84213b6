"""The rewinder: undo everything a transaction did from a step on, and leave it in a final
status — the one mechanism behind a failed step's rollback, a manual rollback, an abort, a
commit conflict and an idle reap.

Order (the reference's): compensate the undo records of steps ≥ target newest first (each up
to ``compensation_retries`` times, backoff 10 ms · 2^try; a failure is reported and its record
kept) → drop staged effects ≥ target → restore state → truncate steps, context and graph.

Durability: without compensations the rewind is one store transaction. With them it is two
phases: ROLLING_BACK with the plan (``body["rewind"]``), then the compensations, then the
final state; a crash in between is finished by recovery from that plan, and compensations
already done (their records marked ``done``) are not run again.

Audit: the failed attempt (if any) and the rollback with its ``cause`` (strategy, trigger) go
in the chain with the phase that makes them durable; each compensation with its own record.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from agenttx.audit import AuditKind
from agenttx.core.audit import compensation_event, rollback_event, step_event
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.eager import leave_eager
from agenttx.core.images import TxImages
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import UNFINISHED
from agenttx.store.contract import StepRow, Store, UndoRow
from agenttx.tools.registry import ToolRegistry
from agenttx.types import TxStatus


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
    ) -> tuple[list[str], int]:
        """Undo everything of steps ≥ target and leave the transaction in ``final`` with
        ``next_step_id = target`` (0 if it ended); ``failed_row`` (the attempt that caused
        it) becomes durable with the first phase. ``cause`` (strategy, trigger) goes in the
        rollback's audit record. Returns (compensation errors, compensations run). The caller
        holds the transaction's lock."""
        images = self.images
        target = max(target, 0)
        to_undo = [u for u in rt.undo if u.step_id >= target and u.status == "pending"]
        next_step = target if not final.terminal else 0
        if final.terminal:
            body = dict(body, ended_at=self.clock())
        errors: list[str] = []
        why = cause or {}
        failed = [step_event(failed_row)] if failed_row is not None else []
        if to_undo:
            plan = dict(body, rewind={"target": target, "final": final.value})
            started = rollback_event(
                AuditKind.ROLLBACK_STARTED, target, final.value, why, compensations=len(to_undo)
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
            errors = await self.compensate(rt, to_undo)
            body = dict(rt.body)
            if errors:
                body["requires_human"] = True
                body["compensation_errors"] = [*body.get("compensation_errors", []), *errors]
        if target <= 1 or int(body.get("outcome_unknown_step", 0)) >= target:
            body["outcome_unknown_step"] = 0
        body = {k: v for k, v in body.items() if k != "rewind"}  # the plan is done
        ended = rollback_event(
            AuditKind.ROLLBACK,
            target,
            final.value,
            why,
            compensations=len(to_undo),
            compensation_errors=len(errors),
            reason=str(body.get("abort_reason", "")) if final.terminal else "",
        )
        update = images.update(rt, final, next_step, body, UNFINISHED, audit=[*failed, ended])
        images.applied(rt, update, await self.store.finish_rewind(update, target, failed_row))
        rt.drop_from(target)
        images.evict(rt)
        return errors, len(to_undo)

    async def compensate(self, rt: TxRuntime, rows: list[UndoRow]) -> list[str]:
        """Run undo handlers newest first, each up to ``compensation_retries`` times with
        exponential backoff; a handler that keeps failing is reported and its record kept."""
        errors: list[str] = []
        if rows:
            await leave_eager()  # undo handlers are user code
        for row in sorted(rows, key=lambda u: u.id, reverse=True):
            handler = self.registry.undo_handler(row.handler)
            last = ""
            ok = False
            tries = max(self.config.compensation_retries, 1)
            for n in range(tries):
                row.attempts += 1
                if handler is None:
                    last = f"no undo handler named {row.handler!r} is registered"
                    break
                try:
                    result = handler(
                        UndoContext(rt.transaction_id, row), **json.loads(row.args_json)
                    )
                    if asyncio.iscoroutine(result):
                        await result
                    ok = True
                    break
                except Exception as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    if n + 1 < tries:
                        # Backoff between tries: the outside system may need a moment.
                        await asyncio.sleep(self.config.compensation_backoff_s * (2**n))
            status = "done" if ok else "failed"
            row.status = status
            row.last_error = "" if ok else last
            records = self.images.chain(rt, rt.row.revision, self.clock(), compensation_event(row))
            await self.store.set_undo_status(row.id, status, row.attempts, row.last_error, records)
            self.images.appended(rt, records)
            if not ok:
                errors.append(f"undo {row.handler} of step {row.step_id}: {last}")
        return errors


class UndoContext:
    """What an undo handler receives as ``ctx``."""

    def __init__(self, transaction_id: str, row: UndoRow) -> None:
        self.transaction_id = transaction_id
        self.step_id = row.step_id
        self.idempotency_key = row.idempotency_key
