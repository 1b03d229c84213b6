"""Uncertain outcomes, reconciled: the provider-operation checkpoint, ``reconcile_step`` and
the operator's ``resolve_step``.

A non-idempotent outside step that timed out, raised ``UncertainOutcome`` or was interrupted
by a crash is OUTCOME_UNKNOWN: the transaction's ``outcome_unknown_step`` names it and its
``reconcile`` record holds what reconciling needs::

    body["reconcile"] = {"step": N, "retry_at": unix s, "tries": n,
                         "op": {"provider", "id", "cursor"}   # iff checkpointed
                         "lease": {"owner", "until", "token"}  # iff a reconcile is running
                         "error": "…"}                         # the last reconcile's failure

Invariants:

- A checkpoint is durable on the step's RUNNING row before ``checkpoint_operation`` returns,
  and immutable: another provider or id is refused, the same again may move the cursor.
- Nothing sends the step's call again: the step settles only by asking the tool's reconcile
  handler (``reconcile``) or by an operator's word (``resolve``), or is rolled back.
- One reconcile at a time: it takes a lease in the record (a compare-and-set) before the
  handler runs, outside the transaction's lock; a second one is refused while the lease is
  live. A crash leaves the lease behind; it is free once its owner is gone (``leases``), so
  the step is reconcilable again after a restart.
- ``happened`` makes the step SUCCESS with the reconciled output, keeping its undo records;
  ``not_happened`` makes it FAILED (its undo records dropped unrun) and the step may be sent
  again; ``unknown`` keeps it pending with a new earliest reconcile time.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from agenttx import jsonpolicy
from agenttx.audit import AuditKind
from agenttx.core.audit import Event, step_event
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.images import TxImages
from agenttx.core.leases import lease_held
from agenttx.core.limits import check_transaction_id, reply_room, retry_ms
from agenttx.core.runtime import StepRun, TxRuntime
from agenttx.core.states import OPEN
from agenttx.core.views import step_references
from agenttx.errors import (
    FailedPrecondition,
    InvalidArgument,
    NoReconcileHandler,
    NotActive,
    OperationIdConflict,
    ReconcileInProgress,
    ReconcileNotDue,
)
from agenttx.jsonpolicy import JsonRefused
from agenttx.jsontext import compact
from agenttx.redaction import redact
from agenttx.store.contract import StepRow, Store, TxUpdate
from agenttx.tools.contract import Tool
from agenttx.tools.reconcile import ReconcileContext, Reconciled, as_reconciled
from agenttx.tools.registry import ToolRegistry
from agenttx.types import ReconcileResult, StepStatus, TxStatus

MAX_PROVIDER_BYTES = 128
MAX_OPERATION_ID_BYTES = 1024
MAX_CURSOR_BYTES = 4096  # the cursor's compact JSON
_ERROR_CHARS = 500
_EXECUTING = (TxStatus.EXECUTING.value,)


# ---------------------------------------------------------------------------- the record


def operation_ref(provider: Any, operation_id: Any, cursor: Any) -> dict[str, Any]:
    """A checked provider-operation reference; ``InvalidArgument`` naming the limit."""
    if not isinstance(provider, str) or not provider:
        raise InvalidArgument("checkpoint_operation: provider must be a non-empty string")
    if not isinstance(operation_id, str) or not operation_id:
        raise InvalidArgument("checkpoint_operation: operation_id must be a non-empty string")
    for name, value, limit in (
        ("provider", provider, MAX_PROVIDER_BYTES),
        ("operation_id", operation_id, MAX_OPERATION_ID_BYTES),
    ):
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise InvalidArgument(
                f"checkpoint_operation: {name} is {size} bytes, over the {limit}-byte limit; "
                "checkpoint the provider's short id, not a document"
            )
    ref: dict[str, Any] = {"provider": provider, "id": operation_id}
    if cursor is not None:
        try:
            text = compact(cursor)
            jsonpolicy.check(cursor, text)
        except (TypeError, ValueError, JsonRefused) as exc:
            raise InvalidArgument(f"checkpoint_operation: cursor is not JSON: {exc}") from None
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_CURSOR_BYTES:
            raise InvalidArgument(
                f"checkpoint_operation: cursor is {size} bytes of JSON, over the "
                f"{MAX_CURSOR_BYTES}-byte limit; keep a page token or offset, not the data"
            )
        ref["cursor"] = cursor
    return ref


def pending_record(
    step_id: int, now: float, op: Mapping[str, Any] | None, retry_after_ms: int | None
) -> dict[str, Any]:
    """The ``reconcile`` record of a step that just became OUTCOME_UNKNOWN."""
    record: dict[str, Any] = {
        "step": step_id,
        "retry_at": now + retry_ms(retry_after_ms) / 1000,
        "tries": 0,
    }
    if op:
        record["op"] = dict(op)
    return record


def ms_left(record: Mapping[str, Any], now: float) -> int:
    """Milliseconds until the record may be reconciled (0: now)."""
    return max(0, math.ceil((float(record.get("retry_at", 0)) - now) * 1000))


def lease_live(record: Mapping[str, Any], now: float) -> bool:
    """True iff a reconcile holds the record and its owner is still there."""
    return lease_held(record.get("lease"), now)


def uncertain_op(exc_op_id: str | None, provider: str, held: Any) -> dict[str, Any] | None:
    """The operation an unknown outcome keeps: the checkpointed one (immutable) wins over the
    id an ``UncertainOutcome`` reported."""
    if held:
        return dict(held)
    if exc_op_id:
        try:
            return operation_ref(provider or "unknown", exc_op_id, None)
        except InvalidArgument:
            return None  # an id over the limit is not kept; the error text still says it
    return None


def _event(row: StepRow, outcome: str, via: str, record: Mapping[str, Any], **more: Any) -> Event:
    _, data = step_event(row)
    op = record.get("op") or {}
    data = {
        **data,
        "outcome": outcome,
        "via": via,
        "provider": op.get("provider", ""),
        "operation_id": op.get("id", ""),
        "tries": int(record.get("tries", 0)),
        **more,
    }
    kind = AuditKind.RECONCILE if via == "handler" else AuditKind.STEP_RESOLVED
    return kind.value, data


def reconcile_result(
    rt: TxRuntime,
    step_id: int,
    outcome: str,
    hint: str,
    operation: tuple[Any, Any],
    **more: Any,
) -> ReconcileResult:
    """The reply of a reconcile or a resolve, of a step's outcome or of an undo's
    (``undo_reconcile``): ``outcome`` with the transaction as it now stands, and the outside
    operation (provider, id) the checkpoint named."""
    provider, operation_id = operation
    return ReconcileResult(
        transaction_id=rt.transaction_id,
        step_id=step_id,
        outcome=outcome,
        next_step_id=rt.row.next_step_id,
        transaction_status=TxStatus(rt.row.status),
        revision=rt.row.revision,
        clean_hint=hint,
        operation_provider=str(provider),
        operation_id=str(operation_id),
        **more,
    )


# ---------------------------------------------------------------------------- the part


class Reconciler:
    """Checkpoints, reconciles and resolves unknown outcomes (module docstring)."""

    def __init__(
        self,
        images: TxImages,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images
        self.store = store
        self.registry = registry  # the step's tool and its reconcile handler
        self.config = config  # this engine's owner name, for the lease
        self.clock = clock

    # ------------------------------------------------------------------ the checkpoint

    async def checkpoint(
        self, scope: StepRun, provider: str, operation_id: str, cursor: Any
    ) -> None:
        """Persist the provider operation on the step's RUNNING row (the caller, the tool,
        runs under the transaction's lock)."""
        row = scope.running
        assert row is not None
        ref = operation_ref(provider, operation_id, cursor)
        held = row.detail.get("op")
        if held:
            if held["provider"] != ref["provider"] or held["id"] != ref["id"]:
                raise OperationIdConflict(
                    scope.transaction_id, scope.step_id, f"{held['provider']}:{held['id']}",
                    f"{ref['provider']}:{ref['id']}",
                )  # fmt: skip
            if cursor is None or held.get("cursor") == cursor:
                return  # nothing new: the same id again is fine
        row.detail = dict(row.detail, op=ref)
        rt = scope.rt
        now = self.clock()
        op_data = {"step": row.step_id, "attempt": row.attempt, "provider": ref["provider"],
                   "operation_id": ref["id"], "cursor": "cursor" in ref}  # fmt: skip
        audit = self.images.chain(
            rt, rt.row.revision + 1, now, (AuditKind.STEP_CHECKPOINT.value, op_data)
        )
        # EXECUTING stays EXECUTING: a plain update, the transition table has no such edge.
        update = TxUpdate(
            tx_id=rt.transaction_id,
            expected_revision=rt.row.revision,
            from_statuses=_EXECUTING,
            status=TxStatus.EXECUTING.value,
            next_step_id=rt.row.next_step_id,
            body=None,
            now=now,
            audit=audit,
            audit_seq=self.images.watermark(rt) if audit else 0,
        )
        # finish_step replaces the attempt's row (same seq): it stays RUNNING, with its op.
        self.images.applied(rt, update, await self.store.finish_step(update, row))

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, transaction_id: str, step_id: int) -> ReconcileResult:
        check_transaction_id(transaction_id)
        token = uuid.uuid4().hex
        async with self.images.locked(transaction_id) as rt:
            record, row = await self._pending(rt, step_id)
            tool = self.registry.get(row.tool)
            if tool is None or tool.reconcile_fn is None:
                raise NoReconcileHandler(transaction_id, step_id, row.tool)
            now = self.clock()
            if lease_live(record, now):
                raise ReconcileInProgress(transaction_id, step_id)
            left = ms_left(record, now)
            if left > 0:
                raise ReconcileNotDue(transaction_id, step_id, left)
            tries = int(record.get("tries", 0)) + 1
            lease = {"owner": self.config.owner, "until": now + tool.timeout_s + 30.0,
                     "token": token}  # fmt: skip
            held = dict(record, lease=lease, tries=tries)
            body = dict(rt.body, reconcile=held)
            started = _event(row, "started", "handler", held)
            update = self.images.update(
                rt, TxStatus.ACTIVE, rt.row.next_step_id, body, OPEN, audit=[started]
            )
            self.images.applied(rt, update, await self.store.update_transaction(update))
            op = held.get("op") or {}
            ctx = ReconcileContext(
                transaction_id=transaction_id,
                step_id=step_id,
                idempotency_key=f"{transaction_id}:{step_id}:{row.seq}",
                provider=str(op.get("provider", "")),
                operation_id=op.get("id"),
                cursor=op.get("cursor"),
                attempt=tries,
            )
            arguments = json.loads(row.arguments_json) if row.arguments_json else {}
        # The handler asks the outside system: not under the lock (other readers go on), the
        # lease keeps a second reconcile out.
        try:
            answer, error = await self._ask(tool, ctx, arguments)
        except asyncio.CancelledError:
            # The caller gave up (an embedded caller's cancel): free the lease now rather than
            # let it block the next reconcile until it expires.
            await asyncio.shield(self._release(transaction_id, token))
            raise
        async with self.images.locked(transaction_id) as rt:
            record = rt.body.get("reconcile") or {}
            if (
                int(rt.body.get("outcome_unknown_step", 0)) != step_id
                or (record.get("lease") or {}).get("token") != token
            ):
                raise FailedPrecondition(
                    f"transaction {transaction_id}: step {step_id} was rolled back or resolved "
                    f"while it was being reconciled; the handler's answer "
                    f"({answer.outcome if answer else 'an error'}) is not applied"
                )
            record, row = await self._pending(rt, step_id)
            if answer is not None and answer.outcome == "happened":
                try:
                    output_json = self._output_text(rt, answer.output)
                except InvalidArgument as exc:
                    answer, error = None, f"the handler's output is refused: {exc}"
            if answer is None or answer.outcome == "unknown":
                return await self._still_unknown(rt, row, record, answer, error)
            if answer.outcome == "happened":
                return await self._happened(rt, row, record, answer.output, output_json, "handler")
            return await self._not_happened(rt, row, record, "handler")

    async def _release(self, transaction_id: str, token: str) -> None:
        async with self.images.locked(transaction_id) as rt:
            record = rt.body.get("reconcile") or {}
            if (record.get("lease") or {}).get("token") != token:
                return
            kept = {k: v for k, v in record.items() if k != "lease"}
            update = self.images.update(
                rt, TxStatus.ACTIVE, rt.row.next_step_id, dict(rt.body, reconcile=kept), OPEN
            )
            self.images.applied(rt, update, await self.store.update_transaction(update))

    async def _ask(
        self, tool: Tool, ctx: ReconcileContext, arguments: Any
    ) -> tuple[Reconciled | None, str]:
        """The handler's answer, or None and why it gave none (it raised, timed out, or
        answered nonsense): then the outcome stays unknown."""
        fn = tool.reconcile_fn
        assert fn is not None
        kwargs = dict(arguments) if isinstance(arguments, dict) else {}
        kwargs["operation_id"] = ctx.operation_id  # the checkpoint wins over an argument
        return await ask_handler(fn, ctx, kwargs, tool.timeout_s)

    def _output_text(self, rt: TxRuntime, output: Any) -> str:
        try:
            text = compact(output)
            jsonpolicy.check(output, text)
        except (TypeError, ValueError, JsonRefused) as exc:
            raise InvalidArgument(f"output is not JSON: {exc}") from None
        room = reply_room(rt.body.get("constraints", ()))
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > room:
            raise InvalidArgument(f"output is {size} bytes of JSON, over the {room}-byte limit")
        return text

    # ------------------------------------------------------------------ the operator

    async def resolve(
        self, transaction_id: str, step_id: int, outcome: str, output: Any, reason: str
    ) -> ReconcileResult:
        """An operator's word after checking the outside system: ``happened`` (with the
        step's ``output``) or ``not_happened``. No earliest time: a person looked."""
        check_transaction_id(transaction_id)
        outcome = outcome.replace("-", "_")
        if outcome not in ("happened", "not_happened"):
            raise InvalidArgument(
                f"resolve outcome must be happened or not_happened, got {outcome!r}"
            )
        async with self.images.locked(transaction_id) as rt:
            record, row = await self._pending(rt, step_id)
            if lease_live(record, self.clock()):
                raise ReconcileInProgress(transaction_id, step_id)
            if outcome == "happened":
                output_json = self._output_text(rt, output)
                return await self._happened(rt, row, record, output, output_json, "operator",
                                            reason)  # fmt: skip
            if output is not None:
                raise InvalidArgument("resolve not_happened takes no output")
            return await self._not_happened(rt, row, record, "operator", reason)

    # ------------------------------------------------------------------ settling

    async def _pending(self, rt: TxRuntime, step_id: int) -> tuple[dict[str, Any], StepRow]:
        """The step's reconcile record and its OUTCOME_UNKNOWN row; refusals otherwise."""
        status = TxStatus(rt.row.status)
        if status is not TxStatus.ACTIVE:
            raise NotActive(rt.transaction_id, status.value, "reconcile a step")
        if int(rt.body.get("outcome_unknown_step", 0)) != step_id:
            raise FailedPrecondition(
                f"transaction {rt.transaction_id}: step {step_id} has no unknown outcome to "
                "reconcile (get_transaction shows outcome_unknown_step)"
            )
        steps = await self.store.load_steps(rt.transaction_id, live_only=False)
        row = next(s for s in reversed(steps) if s.step_id == step_id)
        record = rt.body.get("reconcile") or pending_record(step_id, 0.0, row.detail.get("op"), 0)
        return dict(record), row

    def _result(
        self, rt: TxRuntime, row: StepRow, record: Mapping[str, Any], outcome: str, hint: str,
        **more: Any,
    ) -> ReconcileResult:  # fmt: skip
        op = record.get("op") or {}
        return reconcile_result(
            rt, row.step_id, outcome, hint, (op.get("provider", ""), op.get("id", "")), **more
        )

    async def _happened(
        self, rt: TxRuntime, row: StepRow, record: dict[str, Any], output: Any,
        output_json: str, via: str, reason: str = "",
    ) -> ReconcileResult:  # fmt: skip
        images = self.images
        step_id = row.step_id
        body = {k: v for k, v in rt.body.items() if k != "reconcile"}
        body["outcome_unknown_step"] = 0
        row.status = StepStatus.SUCCESS.value
        row.live = True
        row.output_json = output_json
        row.detail = dict(row.detail, resolved="happened", resolved_by=via)
        event = _event(row, "happened", via, record, reason=reason)
        # Its undo records stay pending: a later rollback still compensates the step.
        update = images.update(rt, TxStatus.ACTIVE, step_id + 1, body, OPEN, audit=[event])
        images.applied(rt, update, await self.store.finish_step(update, row))
        rt.steps[step_id] = row
        rt.outputs[step_id] = output
        rt.add_to_graph(
            step_id,
            json.loads(row.arguments_json) if row.arguments_json else None,
            output,
            step_references(row),
        )
        hint = (
            f"Hint: step {step_id}'s outside call did happen; its output is recorded, "
            f"continue with step {step_id + 1}."
        )
        return self._result(rt, row, record, "happened", hint, output=output,
                            output_json=output_json)  # fmt: skip

    async def _not_happened(
        self, rt: TxRuntime, row: StepRow, record: dict[str, Any], via: str, reason: str = ""
    ) -> ReconcileResult:
        images = self.images
        step_id = row.step_id
        # Nothing happened outside, so there is nothing to compensate: drop its undo unrun.
        for u in [u for u in rt.undo if u.step_id == step_id]:
            await self.store.set_undo_status(u.id, "done", u.attempts, "not happened")
        rt.undo = [u for u in rt.undo if u.step_id != step_id]
        body = {k: v for k, v in rt.body.items() if k != "reconcile"}
        body["outcome_unknown_step"] = 0
        row.status = StepStatus.FAILED.value
        row.detail = dict(row.detail, resolved="not_happened", resolved_by=via)
        event = _event(row, "not_happened", via, record, reason=reason)
        update = images.update(rt, TxStatus.ACTIVE, step_id, body, OPEN, audit=[event])
        images.applied(rt, update, await self.store.finish_step(update, row))
        hint = (
            f"Hint: step {step_id}'s outside call did not happen; send step {step_id} again "
            "(or another step), or roll back."
        )
        return self._result(rt, row, record, "not_happened", hint)

    async def _still_unknown(
        self, rt: TxRuntime, row: StepRow, record: dict[str, Any], answer: Reconciled | None,
        error: str,
    ) -> ReconcileResult:  # fmt: skip
        now = self.clock()
        delay_ms = retry_ms(answer.retry_after_ms if answer else None)
        kept = {k: v for k, v in record.items() if k not in ("lease", "error")}
        kept["retry_at"] = now + delay_ms / 1000
        if answer is not None and answer.cursor is not None and kept.get("op"):
            try:
                op = kept["op"]
                kept["op"] = operation_ref(op["provider"], op["id"], answer.cursor)
            except InvalidArgument as exc:
                error = f"the handler's cursor is refused: {exc}"
        if error:
            kept["error"] = error[:_ERROR_CHARS]
        body = dict(rt.body, reconcile=kept)
        event = _event(row, "unknown", "handler", kept, retry_after_ms=delay_ms,
                       error=error[:_ERROR_CHARS])  # fmt: skip
        update = self.images.update(
            rt, TxStatus.ACTIVE, rt.row.next_step_id, body, OPEN, audit=[event]
        )
        self.images.applied(rt, update, await self.store.update_transaction(update))
        why = f" ({error[:120]})" if error else ""
        hint = (
            f"Hint: step {row.step_id}'s outcome is still unknown{why}; call reconcile_step "
            f"again in {delay_ms} ms, or roll back."
        )
        return self._result(rt, row, kept, "unknown", hint, retry_after_ms=delay_ms)


async def ask_handler(
    fn: Any, ctx: ReconcileContext, kwargs: dict[str, Any], timeout_s: float
) -> tuple[Reconciled | None, str]:
    """Ask a reconcile handler (a step's or an undo's) under ``timeout_s``: its answer, or
    None and why it gave none (it raised, timed out, or answered nonsense)."""
    try:
        async with asyncio.timeout(timeout_s):
            if asyncio.iscoroutinefunction(fn):
                answer = await fn(ctx, **kwargs)
            else:  # a plain function blocks: a worker thread, as for tools
                loop = asyncio.get_running_loop()
                answer = await loop.run_in_executor(None, lambda: fn(ctx, **kwargs))
        return as_reconciled(answer), ""
    except TimeoutError:
        return None, f"the reconcile handler timed out after {int(timeout_s * 1000)} ms"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # Quoted in the step's hint, on every surface: the handler's secrets are masked.
        return None, redact(f"the reconcile handler failed: {type(exc).__name__}: {exc}")


def operation_of(detail: Mapping[str, Any]) -> tuple[str, str]:
    """(provider, operation id) a step row's detail holds, ("", "") if none."""
    op = detail.get("op") or {}
    return str(op.get("provider", "")), str(op.get("id", ""))
