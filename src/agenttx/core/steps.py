"""The step pipeline: check → parse → tool → references → validate → run under the timeout →
record. Failures become data (a hint, the controller's decision, a rewind), never exceptions.

A tool with an outside effect first makes the step durable as RUNNING (EXECUTING), so a crash
while it runs leaves evidence; a state-only step is one durable write at its end."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from agenttx.core.base import (
    OPEN,
    OUTSIDE_EFFECTS,
    Attempt,
    EngineBase,
    add_constraint,
    dumps_json,
    error_text,
)
from agenttx.core.controller import Failure
from agenttx.core.eager import leave_eager
from agenttx.core.hints import reference_category
from agenttx.core.limits import (
    MAX_OUTPUT_BYTES,
    check_step_request,
    check_transaction_id,
)
from agenttx.core.refs import UnresolvedReference, find_references, resolve
from agenttx.core.runtime import StepRun, TxRuntime, Write
from agenttx.errors import (
    FatalToolError,
    NotActive,
    OutcomeUnknownPending,
    UncertainOutcome,
    WrongStep,
)
from agenttx.store.contract import (
    TxUpdate,
)
from agenttx.tools.context import SyncToolContext, ToolContext
from agenttx.tools.contract import DEFAULT_TIMEOUT_S, ArgumentError, Tool
from agenttx.types import (
    Isolation,
    StepResult,
    StepStatus,
    Strategy,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")


_INTERRUPTED = (TxStatus.EXECUTING, TxStatus.ROLLING_BACK)


class StepPipeline(EngineBase):
    async def _execute_step(
        self,
        tx_id: str,
        step_id: int,
        tool_name: str,
        args_text: str,
        raw_context: str,
        request_id: str,
        parsed: dict[str, Any] | None = None,
    ) -> StepResult:
        check_transaction_id(tx_id)
        check_step_request(step_id, tool_name, raw_context)
        async with self._locked(tx_id) as rt:
            return await self._execute_locked(
                rt, step_id, tool_name, args_text, raw_context, request_id, parsed
            )

    async def _execute_locked(
        self,
        rt: TxRuntime,
        step_id: int,
        tool_name: str,
        args_text: str,
        raw_context: str,
        request_id: str,
        parsed: dict[str, Any] | None,
    ) -> StepResult:
        status = TxStatus(rt.row.status)
        if status is not TxStatus.ACTIVE:
            # A stale cache may think otherwise; trust the store before refusing.
            rt = await self._reload(rt)
            if self.store.shared and TxStatus(rt.row.status) in _INTERRUPTED:
                # We hold the transaction's lock, so no live call anywhere is working on it:
                # its owner died mid-call. Finish that now rather than refuse this call.
                await self._finish_interrupted(rt)
                rt = await self._reload(rt)
            status = TxStatus(rt.row.status)
            if status is not TxStatus.ACTIVE:
                raise NotActive(rt.id, status.value, "execute a step")
        if rt.body.get("outcome_unknown_step"):
            raise OutcomeUnknownPending(rt.id, int(rt.body["outcome_unknown_step"]))
        if step_id != rt.row.next_step_id:
            raise WrongStep(rt.id, step_id, rt.row.next_step_id)

        now = self.clock()
        seq = int(rt.body.get("step_seq", 0)) + 1
        attempt_no = int(rt.body.get("attempts", {}).get(str(step_id), 0)) + 1
        tool = self.registry.get(tool_name)
        att = Attempt(
            step_id=step_id,
            seq=seq,
            attempt=attempt_no,
            tool_name=tool_name,
            effect=tool.effect.value if tool else "",
            arguments_json=args_text,
            raw_context=raw_context,
            started_at=now,
            request_id=request_id,
        )
        self.controller.on_step_started(rt.ctl, step_id)

        # Parse → look up the tool → resolve references → validate, each a step failure.
        try:
            if parsed is not None:
                args: Any = parsed
            else:
                args = json.loads(args_text) if args_text.strip() else {}
        except json.JSONDecodeError as exc:
            return await self._fail(rt, att, f"invalid arguments JSON: {exc}")
        if tool is None:
            known = ", ".join(self.registry.names())
            return await self._fail(
                rt, att, f"unknown tool '{tool_name}'; registered tools: {known}"
            )
        try:
            att.resolved, att.references = resolve(args, rt.outputs, step_id)
        except UnresolvedReference as exc:
            att.references = find_references(args)
            root = exc.step_id if 0 < exc.step_id < step_id else None
            return await self._fail(rt, att, exc.message, key=exc.key, root=root)
        # Without references the resolved arguments are the sent ones: reuse their text.
        att.arguments_json = (
            dumps_json(att.resolved) if att.references or not args_text.strip() else args_text
        )
        try:
            call_args = tool.validate(att.resolved) if tool.input_model is not None else None
        except ArgumentError as exc:
            return await self._fail(rt, att, str(exc))

        scope = StepRun(
            rt,
            self.store,
            step_id,
            f"{rt.id}:{step_id}:{seq}",  # seq is unique per attempt, across rewinds too
            self.config.fs_root,
            tool_name,
            now,
        )
        if tool.effect.outside:
            # Evidence first: a crash while the tool runs leaves a RUNNING step that recovery
            # turns into a retry (idempotent tools) or OUTCOME_UNKNOWN.
            running = self._step_row(rt, att, "RUNNING", live=False, detail={})
            running.lease_owner = self.config.owner
            running.lease_until = now + self._timeout(tool) + 30.0
            rt.body["step_seq"] = seq
            update = self._update(rt, TxStatus.EXECUTING, rt.row.next_step_id, rt.body, OPEN)
            self._applied(rt, update, await self.store.start_step(update, running))
        try:
            output = await self._run_tool(tool, scope, att.resolved, call_args)
            output_json = dumps_json(output)
            if len(output_json) > MAX_OUTPUT_BYTES:
                raise ValueError(f"tool output exceeds {MAX_OUTPUT_BYTES} bytes")
        except FatalToolError as exc:
            return await self._fail(rt, att, error_text(exc), fatal=True, scope=scope)
        except UncertainOutcome as exc:
            return await self._outcome_unknown(rt, att, scope, error_text(exc))
        except TimeoutError:
            text = f"tool '{tool_name}' timed out after {int(self._timeout(tool) * 1000)} ms"
            if tool.effect.outside and not tool.idempotent:
                return await self._outcome_unknown(rt, att, scope, text)
            return await self._fail(rt, att, text, scope=scope)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._fail(rt, att, error_text(exc), scope=scope)
        return await self._succeed(rt, att, scope, output, output_json)

    def _timeout(self, tool: Tool) -> float:
        # A tool that kept the default follows the engine's --step-timeout-ms.
        return self.config.step_timeout_s if tool.timeout_s == DEFAULT_TIMEOUT_S else tool.timeout_s

    async def _run_tool(
        self, tool: Tool, scope: StepRun, resolved: Any, call_args: dict[str, Any] | None
    ) -> Any:
        timeout = self._timeout(tool)
        if not tool.bounded:
            await leave_eager()  # a timeout and user code follow: they need the call's task
        if tool.is_async:
            ctx: Any = ToolContext(scope)
            if call_args is None:
                coro = tool.fn(ctx, resolved) if tool.takes_context else tool.fn(resolved)
            else:
                coro = tool.fn(ctx, **call_args) if tool.takes_context else tool.fn(**call_args)
            if tool.bounded:
                # Touches only managed state: no outside wait to bound, so no timer (arming
                # and cancelling one costs more than the whole tool).
                return await coro
            async with asyncio.timeout(timeout):
                return await coro
        loop = asyncio.get_running_loop()
        sctx = SyncToolContext(scope, loop)

        def call() -> Any:
            if call_args is None:
                return tool.fn(sctx, resolved) if tool.takes_context else tool.fn(resolved)
            return tool.fn(sctx, **call_args) if tool.takes_context else tool.fn(**call_args)

        # A plain function blocks: run it on a worker thread so the loop keeps serving others.
        # On timeout the thread cannot be killed; its result is ignored.
        async with asyncio.timeout(timeout):
            return await loop.run_in_executor(None, call)

    # ------------------------------------------------------------------ step outcomes

    async def _succeed(
        self, rt: TxRuntime, att: Attempt, scope: StepRun, output: Any, output_json: str
    ) -> StepResult:
        writes = await self._deltas(rt, scope)
        detail: dict[str, Any] = {}
        if scope.reads:
            detail["reads"] = scope.committed_reads()
            rt.note_reads(detail["reads"])
        if scope.state_reads:
            detail["state_reads"] = scope.state_reads
        if writes:
            detail["w"] = writes
        if scope.staged:
            detail["fx"] = [[e.channel, e.payload_json, e.idempotency_key] for e in scope.staged]
        if scope.undo_ids:
            # Tells another replica catching up on this step that it left undo records.
            detail["undo"] = len(scope.undo_ids)
        row = self._step_row(rt, att, StepStatus.SUCCESS.value, live=True, detail=detail)
        row.output_json = output_json
        next_step = att.step_id + 1
        rt.body["step_seq"] = att.seq
        body: dict[str, Any] | None = None  # unchanged: the step row carries the news
        if att.effect in OUTSIDE_EFFECTS or str(att.step_id) in rt.body.get("attempts", {}):
            body = dict(rt.body, controller=rt.ctl.to_dict())
            # Only failed attempts are counted, so this map stays O(failing steps).
            body["attempts"] = {
                k: v for k, v in body.get("attempts", {}).items() if k != str(att.step_id)
            }
        from_statuses = (TxStatus.EXECUTING.value,) if att.effect in OUTSIDE_EFFECTS else OPEN
        update = TxUpdate(
            tx_id=rt.id,
            expected_revision=rt.row.revision,
            from_statuses=from_statuses,
            status=TxStatus.ACTIVE.value,
            next_step_id=next_step,
            body=body,
            now=att.started_at,
        )
        self._applied(rt, update, await self.store.finish_step(update, row))
        rt.steps[att.step_id] = row
        rt.outputs[att.step_id] = output
        rt.apply_writes(att.step_id, writes)
        rt.staged.extend(scope.staged)
        rt.add_to_graph(
            att.step_id,
            att.resolved,
            output,
            att.references,
            state_reads=scope.state_reads,
            state_writes=list(scope.writes),
        )
        return StepResult(
            transaction_id=rt.id,
            step_id=att.step_id,
            status=StepStatus.SUCCESS,
            output=output,
            output_json=output_json,
            strategy=Strategy.NONE,
            next_step_id=next_step,
            constraints=list(rt.body.get("constraints", [])),
            transaction_status=TxStatus.ACTIVE,
            revision=rt.row.revision,
        )

    async def _deltas(self, rt: TxRuntime, scope: StepRun) -> list[Write]:
        deltas: list[Write] = []
        for key, value in scope.writes.items():
            base = rt.base_versions.get(key)
            if base is None:
                if key in scope.reads:
                    base = scope.reads[key][1]
                elif rt.isolation is Isolation.READ_COMMITTED:
                    _, base = await self.store.read_state(rt.row.tenant, key, None)
                else:
                    base = rt.row.snapshot
            deltas.append((key, value, base))
        return deltas

    async def _fail(
        self,
        rt: TxRuntime,
        att: Attempt,
        raw_error: str,
        *,
        key: str = "",
        root: int | None = None,
        fatal: bool = False,
        scope: StepRun | None = None,
    ) -> StepResult:
        started = time.perf_counter()
        hint = self.cleaner.clean(raw_error)
        hint_key = key or hint.key
        if root is None and hint_key:
            root = rt.graph.root_cause(
                att.step_id,
                hint_key,
                inputs=att.resolved if att.resolved is not None else {},
                references=att.references,
                state_reads=scope.state_reads if scope is not None else (),
            )
        if root is not None and not 0 < root < att.step_id:
            root = None
        decision = self.controller.decide(
            Failure(att.step_id, hint.category, hint_key, root, fatal), rt.ctl, rt.policy
        )
        constraints = add_constraint(
            list(rt.body.get("constraints", [])), hint.text, self.config.max_constraints
        )
        detail: dict[str, Any] = {
            "hint": hint.text,
            "category": hint.category,
            "rule": hint.rule,
            "key": hint_key,
        }
        if scope is not None and scope.reads:
            detail["reads"] = scope.committed_reads()
            rt.note_reads(detail["reads"])
        failed_row = self._step_row(rt, att, StepStatus.FAILED.value, live=False, detail=detail)
        body = dict(rt.body, step_seq=att.seq, constraints=constraints, controller=rt.ctl.to_dict())
        body["attempts"] = dict(body.get("attempts", {}), **{str(att.step_id): att.attempt})
        abort = decision.strategy is Strategy.ABORT
        if abort:
            reason = decision.abort_reason or "aborted"
            body["abort_reason"] = f"{reason}: {hint.text}" if fatal else reason
        if decision.strategy is Strategy.GLOBAL_RESET:
            body["epoch"] = int(body.get("epoch", 0)) + 1
        final = TxStatus.FAILED if abort else TxStatus.ACTIVE
        target = 0 if abort else max(decision.target, 1)
        errors, _ = await self._rewind(rt, target, final, body, failed_row)
        latency = (time.perf_counter() - started) * 1000
        return StepResult(
            transaction_id=rt.id,
            step_id=att.step_id,
            status=StepStatus.FAILED if abort else StepStatus.ROLLBACK_TRIGGERED,
            clean_hint=hint.text,
            strategy=decision.strategy,
            rollback_to_step=decision.rollback_to_step,
            next_step_id=0 if abort else rt.row.next_step_id,
            constraints=constraints,
            context_reset=decision.context_reset,
            error_category=hint.category,
            reference_category=reference_category(hint.category),
            rollback_latency_ms=latency,
            abort_reason=str(rt.body.get("abort_reason", "")) if abort else "",
            compensation_errors=errors,
            transaction_status=TxStatus(rt.row.status),
            revision=rt.row.revision,
            hint_key=hint_key,
        )

    async def _outcome_unknown(
        self, rt: TxRuntime, att: Attempt, scope: StepRun, text: str
    ) -> StepResult:
        hint = self.cleaner.clean(text)
        detail = {"hint": hint.text, "category": hint.category, "error": text[:4096]}
        row = self._step_row(rt, att, StepStatus.OUTCOME_UNKNOWN.value, live=False, detail=detail)
        body = dict(rt.body, step_seq=att.seq, outcome_unknown_step=att.step_id)
        update = TxUpdate(
            tx_id=rt.id,
            expected_revision=rt.row.revision,
            from_statuses=(TxStatus.EXECUTING.value,),
            status=TxStatus.ACTIVE.value,
            next_step_id=att.step_id,
            body=body,
            now=self.clock(),
        )
        self._applied(rt, update, await self.store.finish_step(update, row))
        return StepResult(
            transaction_id=rt.id,
            step_id=att.step_id,
            status=StepStatus.OUTCOME_UNKNOWN,
            clean_hint=hint.text,
            strategy=Strategy.NONE,
            next_step_id=att.step_id,
            constraints=list(rt.body.get("constraints", [])),
            error_category=hint.category,
            reference_category=reference_category(hint.category),
            transaction_status=TxStatus.ACTIVE,
            revision=rt.row.revision,
        )
