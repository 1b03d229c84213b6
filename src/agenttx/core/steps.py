"""The step pipeline: check → parse → tool → references → validate → run under the timeout →
record. Three outcomes: succeed, fail (a hint, the controller's decision, a rewind) or
outcome-unknown. A tool's failure is data in the ``StepResult``, never an exception;
exceptions are for protocol misuse (wrong step, transaction not active, bad request).

Invariants:

- A tool with an outside effect first makes the step durable as RUNNING (EXECUTING), so a
  crash while it runs leaves evidence; a state-only step is ONE durable write at its end.
- Nothing of a step is durable before its output passed the size check: an output too big
  for the reply is a step failure, and its writes and staged effects are dropped.
- The success path does not suspend except in the store: no timer for bounded tools, no
  task switch (``eager.py``), no graph work (the graph is built lazily by ``TxRuntime``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agenttx import jsonpolicy
from agenttx.core.attempts import next_attempt, with_tried
from agenttx.core.audit import cause, step_event
from agenttx.core.cancels import RunningTools, StepCancelled
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import Failure, RollbackController
from agenttx.core.eager import leave_eager
from agenttx.core.hints import Category, Hint, HintCleaner, reference_category
from agenttx.core.hints.rules import HINT_PREFIX
from agenttx.core.images import NeedsLock, TxImages
from agenttx.core.limits import check_step_request, check_transaction_id, reply_room
from agenttx.core.masking import Redactor
from agenttx.core.offload import INLINE_HINT_CHARS, INLINE_JSON_CHARS, by_size
from agenttx.core.reconcile import ms_left, pending_record, uncertain_op
from agenttx.core.recovery import outcome_unknown_hint
from agenttx.core.refs import (
    Reference,
    ResolveLimits,
    UnresolvedReference,
    find_references,
    resolve,
    too_large,
)
from agenttx.core.requests import Request
from agenttx.core.rewind import Rewinder
from agenttx.core.runtime import StepRun, TxRuntime, Write
from agenttx.core.states import OPEN
from agenttx.errors import (
    AlreadyExists,
    ArgumentsRefused,
    FatalToolError,
    NotActive,
    OutboundRefused,
    OutcomeUnknownPending,
    RevisionConflict,
    StepLimitReached,
    UncertainOutcome,
    WrongStep,
)
from agenttx.jsonpolicy import JsonRefused
from agenttx.jsontext import compact
from agenttx.store.contract import StepRow, Store, TxUpdate
from agenttx.tools.context import ProgressSink, SyncToolContext, ToolContext
from agenttx.tools.contract import DEFAULT_TIMEOUT_S, ArgumentError, Tool
from agenttx.tools.registry import ToolRegistry
from agenttx.types import EffectClass, Isolation, StepResult, StepStatus, Strategy, TxStatus

_ACTIVE = TxStatus.ACTIVE.value
_EXECUTING = (TxStatus.EXECUTING.value,)
_INTERRUPTED = (TxStatus.EXECUTING.value, TxStatus.ROLLING_BACK.value)
_OUTSIDE_EFFECTS = frozenset(e.value for e in EffectClass if e.outside)
# Plain values of the members the success path uses: reading an enum member's ``value`` or a
# property of it runs Python code (~0.5-1 µs each on the step path, measured).
_SUCCESS = StepStatus.SUCCESS.value
_STEP_SUCCESS = StepStatus.SUCCESS
_NO_STRATEGY = Strategy.NONE
_TX_ACTIVE = TxStatus.ACTIVE
# Outputs up to this many characters fit any reply whatever their encoding (≤ 4 bytes each):
# only longer ones pay for measuring their UTF-8 size.
_SURELY_FITS_CHARS = 64 << 10


@dataclass(slots=True)
class Attempt:
    """What the step pipeline knows about the attempt it is running."""

    step_id: int
    seq: int  # unique per attempt across rewinds: orders the step rows
    attempt: int  # 1 + failed attempts of this step id so far
    tool_name: str
    effect: str  # the tool's EffectClass value, "" for an unknown tool
    arguments_json: str  # as stored: the resolved arguments once references are resolved
    raw_context: str
    started_at: float
    request: Request | None  # the call's request id, looked up and stored with the step
    resolved: Any = None
    references: list[Reference] = field(default_factory=list)
    # True iff ``arguments_json`` and ``raw_context`` have had their secrets masked
    # (``core.masking``); a row of an attempt that failed before that masks them itself.
    masked: bool = False
    # True iff the attempt runs without the store's lock: it may end only with its one
    # successful write (``lock_and_finish_step``); anything else raises ``NeedsLock``.
    unheld: bool = False


class StepExecutor:
    def __init__(
        self,
        images: TxImages,
        rewinder: Rewinder,
        finish_interrupted: Callable[[TxRuntime], Awaitable[str]],
        store: Store,
        registry: ToolRegistry,
        cleaner: HintCleaner,
        controller: RollbackController,
        config: EngineConfig,
        clock: Clock,
        guard: Callable[[int, str, str], None] | None = None,
        checkpoint: Callable[[StepRun, str, str, Any], Awaitable[None]] | None = None,
    ) -> None:
        self.images = images
        # Persists a running outside step's provider operation (``Reconciler.checkpoint``).
        self.checkpoint = checkpoint
        self.rewinder = rewinder  # undoes a failed step back to the controller's target
        # (step id, tool name, effect class) → raises PolicyViolation for a step the safety
        # policy forbids; None: no policy file, every step may run.
        self.guard = guard
        # Recovery's hook for a transaction a dead replica left mid-call (shared stores).
        self.finish_interrupted = finish_interrupted
        self.store = store
        self.registry = registry
        self.cleaner = cleaner  # raw error → one-line hint
        self.controller = controller  # failure → strategy and target
        self.config = config
        self.clock = clock
        # The tasks of running tools, so a caller may cancel its own step (``cancels.py``).
        self.running = RunningTools()
        # Masks secret fields in what is stored and returned; the tool gets real values.
        self.redactor = Redactor(config.redact_fields)

    async def run(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments_json: str,
        raw_context: str,
        request: Request | None,
        parsed: dict[str, Any] | None,
        progress: ProgressSink | None = None,
    ) -> StepResult:
        """Run step ``step_id`` of the transaction; ``parsed`` is the arguments already as a
        dict (then ``arguments_json`` is its text), else ``arguments_json`` is parsed here;
        ``progress`` receives what the tool reports with ``ToolContext.report_progress``.

        On a store shared by replicas a step whose tool touches managed state only (a
        bounded tool with no outside effect: ``kv.put``, ``record.*``) first runs without the
        store's lock, on the cached image, its one write taking the lock and validating the
        image by its compare-and-set (``Store.lock_and_finish_step``: one round trip on
        PostgreSQL). Running such a tool twice changes nothing outside, so if the write
        loses — another call moved the transaction — or the step needs more than that write,
        nothing of it is durable and it runs again the usual way, under the lock
        (``NeedsLock``): the outcome is the one the locked call alone would have had."""
        check_transaction_id(transaction_id)
        check_step_request(step_id, tool_name, raw_context)
        if self.images.unheld_steps:
            tool = self.registry.get(tool_name)
            if tool is not None and tool.bounded and not tool.effect.outside:
                try:
                    return await self._run(
                        transaction_id, step_id, tool_name, arguments_json, raw_context,
                        request, parsed, progress, unheld=True,
                    )  # fmt: skip
                except NeedsLock:
                    pass
        return await self._run(
            transaction_id, step_id, tool_name, arguments_json, raw_context, request, parsed,
            progress, unheld=False,
        )  # fmt: skip

    async def _run(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments_json: str,
        raw_context: str,
        request: Request | None,
        parsed: dict[str, Any] | None,
        progress: ProgressSink | None,
        *,
        unheld: bool,
    ) -> StepResult:
        """``run`` once: under the store's lock, or (``unheld``) without it, raising
        ``NeedsLock`` before anything durable wherever the cached image cannot decide."""
        async with self.images.locked(transaction_id, request=request, unheld=unheld) as rt:
            body = rt.row.body
            if unheld and (
                rt.row.status != _ACTIVE
                or body.get("outcome_unknown_step")
                or step_id != rt.row.next_step_id
                # A retry streak's end rewrites the body and the controller before its write.
                or str(step_id) in body.get("attempts", ())
            ):
                raise NeedsLock  # the cached image may be stale: only the lock can tell
            if rt.row.status != _ACTIVE:
                rt = await self._settle(rt)
            body = rt.row.body
            if body.get("outcome_unknown_step"):
                raise OutcomeUnknownPending(transaction_id, int(body["outcome_unknown_step"]))
            if step_id != rt.row.next_step_id:
                raise WrongStep(transaction_id, step_id, rt.row.next_step_id)
            if step_id > self.config.max_steps:
                raise StepLimitReached(transaction_id, self.config.max_steps)

            now = self.clock()
            seq = int(body.get("step_seq", 0)) + 1
            tool = self.registry.get(tool_name)
            if self.guard is not None:  # the safety policy refuses before anything runs
                self.guard(step_id, tool_name, str(tool.effect) if tool else "")
            att = Attempt(
                step_id=step_id,
                seq=seq,
                attempt=next_attempt(body, step_id),
                tool_name=tool_name,
                effect=str(tool.effect) if tool else "",  # a StrEnum's str is its value
                arguments_json=arguments_json,
                raw_context=raw_context,
                started_at=now,
                request=request,
                unheld=unheld,
            )
            self.controller.on_step_started(rt.ctl, step_id)

            # Parse → look up the tool → resolve references → validate, each a step failure.
            if parsed is not None:
                args: Any = parsed  # held to the JSON policy by the engine, before the step
            elif not arguments_json.strip():
                args = {}
            else:
                try:
                    if len(arguments_json) <= INLINE_JSON_CHARS:  # no coroutine on the hot path
                        args = jsonpolicy.parse(arguments_json)
                    else:
                        args = await by_size(
                            len(arguments_json), 0, jsonpolicy.parse, arguments_json
                        )
                except JsonRefused as exc:
                    if exc.rule == "json_syntax":  # the malformed_json rule reads the decoder
                        return await self._fail(
                            rt, att, f"invalid arguments JSON: {exc}", in_arguments=True
                        )
                    return await self._refused(rt, att, "arguments", exc.message)
            if tool is None:
                return await self._fail(
                    rt, att, self.registry.unknown_tool_message(tool_name), in_arguments=True
                )
            if "${" in arguments_json or (parsed is not None and _nested(parsed)):
                limits = ResolveLimits(
                    self.config.max_resolved_arguments_bytes,
                    self.config.max_references,
                    len(arguments_json),
                )
                try:
                    att.resolved, att.references = await by_size(
                        len(arguments_json) + rt.expansion_weight(arguments_json),
                        INLINE_JSON_CHARS,
                        resolve,
                        args,
                        rt.outputs,
                        step_id,
                        limits,
                    )
                except UnresolvedReference as exc:
                    att.references = find_references(args)
                    root = exc.step_id if 0 < exc.step_id < step_id else None
                    # Bad reference syntax (step 0) is the step's own text, no earlier step's.
                    return await self._fail(
                        rt, att, exc.message, key=exc.key, root=root, in_arguments=exc.step_id == 0
                    )
                except ArgumentsRefused as exc:
                    att.references = []  # none is used: the stored arguments are the sent ones
                    return await self._refused(rt, att, "references", exc.message)
            else:
                # No reference can be in them (their JSON text has no "${"). What ``resolve``
                # would return is a copy of them: text just parsed is one already, and a
                # flat dict of the caller's needs only a shallow one.
                att.resolved = args if parsed is None else dict(parsed)
            # Without references the resolved arguments are the sent ones: reuse their text.
            if att.references:
                # Checked exactly before anything is stored or handed to the tool: the
                # budget while resolving is a lower bound (escapes are not counted).
                try:
                    resolved_json = await by_size(
                        len(arguments_json) + rt.expansion_weight(arguments_json),
                        INLINE_JSON_CHARS,
                        self._resolved_text,
                        att.resolved,
                    )
                except (ArgumentsRefused, JsonRefused) as exc:
                    att.resolved = None  # never kept: the row stores the arguments as sent
                    return await self._refused(rt, att, "references", exc.message)
                att.arguments_json = resolved_json
            elif not arguments_json.strip():
                att.arguments_json = compact(att.resolved)
            # What is stored from here on has its secrets masked; the tool gets ``resolved``.
            att.arguments_json, att.raw_context = await by_size(
                len(att.arguments_json) + len(att.raw_context),
                INLINE_JSON_CHARS,
                self._masked_request,
                att.arguments_json,
                att.resolved,
                att.raw_context,
            )
            att.masked = True
            try:
                if tool.input_model is not None:
                    call_args = tool.validate(att.resolved)
                else:  # the tool validates its raw arguments; its schema names the allowed
                    tool.refuse_unknown(att.resolved)
                    call_args = None
            except ArgumentError as exc:
                return await self._fail(rt, att, str(exc), in_arguments=True)

            scope = StepRun(
                rt,
                self.store,
                step_id,
                f"{transaction_id}:{step_id}:{seq}",  # seq is unique per attempt, across rewinds
                self.config.files_for(rt.row.tenant),
                tool_name,
                now,
            )
            scope.progress = progress
            timeout = self._timeout(tool)
            outside = att.effect in _OUTSIDE_EFFECTS
            if outside:
                # Evidence first: a crash while the tool runs leaves a RUNNING step that
                # recovery turns into a retry (idempotent tools) or OUTCOME_UNKNOWN.
                running = self._step_row(rt, att, "RUNNING", live=False, detail={})
                running.lease_owner = self.config.owner
                running.lease_until = now + timeout + 30.0
                rt.body["step_seq"] = seq
                update = self.images.update(
                    rt,
                    TxStatus.EXECUTING,
                    rt.row.next_step_id,
                    rt.body,
                    OPEN,
                    audit=[step_event(running)],
                )
                # The request id is claimed before the outside call, in the same write: once
                # the call may have happened, no other request can take the id.
                claim = request.claim() if request is not None else None
                self.images.applied(rt, update, await self.store.start_step(update, running, claim))
                if request is not None:
                    request.claimed = True
                scope.running, scope.checkpointer = running, self.checkpoint
            try:
                output = await self._run_tool(tool, timeout, scope, att.resolved, call_args)
                output_json = compact(output)
                if len(output_json) > INLINE_JSON_CHARS:
                    # Even the needle test of a large output is milliseconds: off the loop.
                    output, output_json = await by_size(
                        len(output_json), 0, self.redactor.output, output, output_json
                    )
                elif self.redactor.may_hold(output_json):
                    output, output_json = self.redactor.output(output, output_json)
            except FatalToolError as exc:
                return await self._fail(rt, att, error_text(exc), fatal=True, scope=scope)
            except UncertainOutcome as exc:
                if not outside:  # nothing outside ran: an ordinary failure
                    return await self._fail(rt, att, error_text(exc), scope=scope)
                return await self._outcome_unknown(
                    rt, att, scope, error_text(exc), str(exc) or type(exc).__name__, exc
                )
            except TimeoutError:
                text = f"tool '{tool_name}' timed out after {int(timeout * 1000)} ms"
                if outside and not tool.idempotent:
                    return await self._outcome_unknown(rt, att, scope, text, text)
                return await self._fail(rt, att, text, scope=scope)
            except StepCancelled:
                if request is not None:
                    # Undone at its caller's word: not the request's outcome, so a retry with
                    # the same request id runs the step again (no stored reply, no rid).
                    request.final = False
                return await self._fail(rt, att, "", hint=cancelled_hint(att), scope=scope)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A tool that checks its own arguments says so with ArgumentError; a webhook
                # target the outbound guard refuses is one of the step's arguments too.
                local = isinstance(exc, ArgumentError | OutboundRefused)
                return await self._fail(rt, att, error_text(exc), scope=scope, in_arguments=local)
            try:
                # The output is stored and sent: it keeps the JSON policy too (a big one is
                # checked on a worker thread; a small one inline, with no coroutine).
                if len(output_json) <= INLINE_JSON_CHARS:
                    jsonpolicy.check(output, output_json)
                else:
                    await by_size(len(output_json), 0, jsonpolicy.check, output, output_json)
            except JsonRefused as exc:
                return await self._refused(rt, att, "output", exc.message, scope=scope)
            if len(output_json) > _SURELY_FITS_CHARS:
                too_big = self._oversized(rt, output_json)
                if too_big is not None:
                    return await self._fail(rt, att, too_big.text, hint=too_big, scope=scope)
            return await self._succeed(rt, att, scope, output, output_json)

    async def _settle(self, rt: TxRuntime) -> TxRuntime:
        """The image of a transaction that does not look ACTIVE, current with the store;
        ``NotActive`` unless it is ACTIVE after all."""
        # A stale cache may think otherwise; trust the store before refusing.
        rt = await self.images.reload(rt)
        if self.images.store_locks and rt.row.status in _INTERRUPTED:
            # We hold the transaction's locks, so no live call anywhere is working on it: its
            # owner died mid-call (or our own call's store write failed, e.g. on a full disk).
            # Finish that now rather than refuse this call.
            await self.finish_interrupted(rt)
            rt = await self.images.reload(rt)
        if rt.row.status != _ACTIVE:
            raise NotActive(rt.transaction_id, rt.row.status, "execute a step")
        return rt

    def _resolved_text(self, resolved: Any) -> str:
        """The resolved arguments' JSON text once it is known to keep the limits."""
        text = compact(resolved)
        limit = self.config.max_resolved_arguments_bytes
        if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
            raise too_large(limit)
        jsonpolicy.check(resolved, text)
        return text

    async def _refused(
        self,
        rt: TxRuntime,
        att: Attempt,
        what: str,
        message: str,
        *,
        scope: StepRun | None = None,
    ) -> StepResult:
        """A step failure for arguments, references or an output outside a limit or the JSON
        policy; ``message`` names the limit and says what to send instead."""
        subject = {
            "arguments": "the arguments are refused",
            "references": "the resolved arguments are refused",
            "output": "the tool's output is refused",
        }[what]
        text = f"{HINT_PREFIX}{subject}: {message}"
        hint = Hint(
            text if len(text) <= 240 else text[:239] + "…",
            # The step's own call is at fault: the agent resends it with other arguments.
            Category.MALFORMED_JSON.value if what == "arguments" else Category.TYPE_MISMATCH.value,
            f"{what}_refused",
            "",
        )
        return await self._fail(rt, att, hint.text, hint=hint, scope=scope)

    def _timeout(self, tool: Tool) -> float:
        # A tool that kept the default follows the engine's --step-timeout-s.
        return self.config.step_timeout_s if tool.timeout_s == DEFAULT_TIMEOUT_S else tool.timeout_s

    async def _run_tool(
        self,
        tool: Tool,
        timeout_s: float,
        scope: StepRun,
        resolved: Any,
        call_args: dict[str, Any] | None,
    ) -> Any:
        if tool.bounded:
            return await self._call_tool(tool, timeout_s, scope, resolved, call_args)
        await leave_eager()  # a timeout and user code follow: they need the call's task
        with self.running.track(scope.transaction_id, scope.step_id):
            return await self._call_tool(tool, timeout_s, scope, resolved, call_args)

    async def _call_tool(
        self,
        tool: Tool,
        timeout_s: float,
        scope: StepRun,
        resolved: Any,
        call_args: dict[str, Any] | None,
    ) -> Any:
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
            async with asyncio.timeout(timeout_s):
                return await coro
        loop = asyncio.get_running_loop()
        sctx = SyncToolContext(scope, loop)

        def call() -> Any:
            if call_args is None:
                return tool.fn(sctx, resolved) if tool.takes_context else tool.fn(resolved)
            return tool.fn(sctx, **call_args) if tool.takes_context else tool.fn(**call_args)

        # A plain function blocks: run it on a worker thread so the loop keeps serving others.
        # On timeout the thread cannot be killed; its result is ignored.
        async with asyncio.timeout(timeout_s):
            return await loop.run_in_executor(None, call)

    def _oversized(self, rt: TxRuntime, output_json: str) -> Hint | None:
        """The hint for an output too big to be delivered in the step's reply, or None."""
        room = reply_room(rt.body.get("constraints", ()))
        size = len(output_json.encode("utf-8", "surrogatepass"))
        if size <= room:
            return None
        return Hint(
            f"Hint: the tool's output is {size} bytes of JSON, over the {room}-byte limit of a "
            "step reply; call it so that it returns less (a page, a summary, a reference).",
            # The step's own call is at fault: the agent resends it with other arguments.
            Category.TYPE_MISMATCH.value,
            "output_too_large",
            "",
        )

    # ------------------------------------------------------------------ step outcomes

    async def _secrets(self, att: Attempt) -> list[str]:
        """The values of this step's secret arguments, to scrub from the texts a failure
        keeps (a validation error quotes the value it refused: "got string 'hunter2'")."""
        if att.resolved is None:
            return []
        size = len(att.arguments_json)
        if size > INLINE_JSON_CHARS:  # the needle test too runs off the loop
            return await by_size(size, 0, self._secret_values, att.arguments_json, att.resolved)
        return self._secret_values(att.arguments_json, att.resolved)

    def _secret_values(self, arguments_json: str, resolved: Any) -> list[str]:
        if not self.redactor.may_hold(arguments_json):
            return []
        return self.redactor.secret_values(resolved)

    def _masked_request(
        self, arguments_json: str, resolved: Any, raw_context: str
    ) -> tuple[str, str]:
        return self.redactor.json_text(arguments_json, resolved), self.redactor.text(raw_context)

    async def _mask_sent(self, att: Attempt) -> None:
        """Mask what a step that failed before its arguments were masked (bad JSON, an unknown
        tool, a reference that cannot resolve) stores of them: off the loop when large, as for
        every other step, instead of inline in ``_step_row``."""
        if att.masked:
            return
        att.arguments_json, att.raw_context = await by_size(
            len(att.arguments_json) + len(att.raw_context),
            INLINE_JSON_CHARS,
            self._masked_request,
            att.arguments_json,
            None,
            att.raw_context,
        )
        att.masked = True

    def _step_row(
        self, rt: TxRuntime, att: Attempt, status: str, *, live: bool, detail: dict[str, Any]
    ) -> StepRow:
        if att.references:
            # Kept on every attempt, so the graph can be rebuilt from any row that becomes live.
            detail = {
                "refs": [[r.step_id, list(r.path), list(r.arg_path)] for r in att.references],
                **detail,
            }
        if att.request is not None and att.request.final:
            # Kept although a successful step's reply is stored with it: a failure's reply is
            # written after its rewind, and a retry in between rebuilds it from this row.
            detail = {**detail, "rid": att.request.request_id}
        return StepRow(
            tx_id=rt.transaction_id,
            seq=att.seq,
            step_id=att.step_id,
            attempt=att.attempt,
            epoch=int(rt.body.get("epoch", 0)),
            tool=att.tool_name,
            effect=att.effect,
            status=status,
            live=live,
            arguments_json=(
                att.arguments_json if att.masked else self.redactor.json_text(att.arguments_json)
            ),
            output_json="",
            raw_context=att.raw_context if att.masked else self.redactor.text(att.raw_context),
            detail=detail,
            started_at=att.started_at,
            finished_at=self.clock(),
        )

    async def _succeed(
        self, rt: TxRuntime, att: Attempt, scope: StepRun, output: Any, output_json: str
    ) -> StepResult:
        writes = await self._deltas(rt, scope) if scope.writes else []
        detail: dict[str, Any] = {}
        if scope.reads:
            detail["reads"] = scope.committed_reads()
        if scope.state_reads:
            detail["state_reads"] = scope.state_reads
        if writes:
            detail["w"] = writes
        if scope.staged:
            detail["fx"] = [[e.channel, e.payload_json, e.idempotency_key] for e in scope.staged]
        if scope.undo_ids:
            # Tells another replica catching up on this step that it left undo records.
            detail["undo"] = len(scope.undo_ids)
        if scope.running is not None and "op" in scope.running.detail:
            detail["op"] = scope.running.detail["op"]  # the provider operation, as evidence
        row = self._step_row(rt, att, _SUCCESS, live=True, detail=detail)
        row.output_json = output_json
        next_step = att.step_id + 1
        cached = rt.row.body
        seq_before = cached.get("step_seq", 0)
        cached["step_seq"] = att.seq
        body: dict[str, Any] | None = None  # unchanged: the step row carries the news
        outside = att.effect in _OUTSIDE_EFFECTS
        if outside or str(att.step_id) in cached.get("attempts", {}):
            # A step with a retry streak has failed attempts, so its end is written here.
            self.controller.on_step_succeeded(rt.ctl, att.step_id)
            body = dict(cached, controller=rt.ctl.to_dict())
            # Only failed attempts are counted, so this map stays O(failing steps).
            body["attempts"] = {
                k: v for k, v in body.get("attempts", {}).items() if k != str(att.step_id)
            }
        # A plain TxUpdate, not images.update: ACTIVE/EXECUTING → ACTIVE is always legal.
        tx_id = rt.row.id
        images = self.images
        # A step whose write is its only one leaves its record pending: the next write that
        # carries records chains it (``images.py``). An outside step's RUNNING write chained
        # the records before it, so its end records eagerly, as does the step that fills the
        # batch (it chains the pending ones with its own).
        defer = not outside and images.defers(rt)
        audit = () if defer else images.step_audit(rt, rt.row.revision + 1, att.started_at, row)
        update = TxUpdate(
            tx_id=tx_id,
            expected_revision=rt.row.revision,
            from_statuses=_EXECUTING if outside else OPEN,
            status=_ACTIVE,
            next_step_id=next_step,
            body=body,
            now=att.started_at,
            audit=audit,
            audit_seq=images.watermark(rt) if audit else 0,
        )
        result = StepResult(
            transaction_id=tx_id,
            step_id=att.step_id,
            status=_STEP_SUCCESS,
            output=output,
            output_json=output_json,
            strategy=_NO_STRATEGY,
            next_step_id=next_step,
            constraints=list(cached.get("constraints", [])),
            transaction_status=_TX_ACTIVE,
            revision=update.expected_revision + 1,
        )
        # The reply goes in with the step (one commit, one statement), unless an outside
        # step's claim holds the id: its reply then fills the claim (RequestLog).
        request = att.request
        reply = request.reply(result) if request is not None and not request.claimed else None
        if att.unheld:
            try:
                revision = await self.store.lock_and_finish_step(
                    update, row, reply, self.config.lock_timeout_s
                )
            except (RevisionConflict, AlreadyExists):
                # Nothing was written: the image is put back as it was (the step counter
                # the row would have moved), for the locked run to catch it up.
                cached["step_seq"] = seq_before
                raise NeedsLock from None
        else:
            revision = await self.store.finish_step(update, row, reply)
        images.applied(rt, update, revision)
        if scope.reads:
            rt.note_reads(detail["reads"])  # durable now (a lost write must not add to it)
        if defer:
            rt.audit_pending.append(row)  # durable now: the next sealing write chains it
        if reply is not None:
            assert request is not None
            request.stored = True
        rt.steps[att.step_id] = row
        rt.outputs[att.step_id] = output
        if writes:
            rt.apply_writes(att.step_id, writes)
        rt.staged.extend(scope.staged)
        rt.add_to_graph(
            att.step_id,
            att.resolved,
            output,
            att.references,
            state_reads=scope.state_reads,
            state_writes=tuple(scope.writes),
            chars=len(row.arguments_json) + len(row.output_json),
        )
        return result

    async def _deltas(self, rt: TxRuntime, scope: StepRun) -> list[Write]:
        """The step's writes with the committed version each key had when first written."""
        deltas: list[Write] = []
        for key, value in scope.writes.items():
            base = rt.base_version(key)
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
        hint: Hint | None = None,
        in_arguments: bool = False,
    ) -> StepResult:
        if att.unheld:
            raise NeedsLock  # a failure writes more than one row: only under the lock
        started = time.perf_counter()
        await self._mask_sent(att)
        if hint is None:
            # A long error text (a tool's dump, a hostile reference path) is cleaned off the
            # loop; the rules are linear, so this bounds the time, the thread the stall.
            hint = await by_size(len(raw_error), INLINE_HINT_CHARS, self.cleaner.clean, raw_error)
        secrets = await self._secrets(att)
        if secrets:
            hint = dataclasses.replace(hint, text=self.redactor.scrub(hint.text, secrets))
        hint_key = key or hint.key
        inputs = att.resolved if att.resolved is not None else {}
        state_reads = scope.state_reads if scope is not None else ()
        graph = await rt.joined_graph()
        if root is None and hint_key:
            root = graph.root_cause(
                att.step_id,
                hint_key,
                inputs=inputs,
                references=att.references,
                state_reads=state_reads,
            )
        if root is not None and not 0 < root < att.step_id:
            root = None
        # Whether the value the failure names is one the agent typed into this very step: the
        # controller then retries it instead of undoing earlier, unrelated steps.
        literal = (
            root is None
            and self.controller.wants_literal(hint.category)
            and graph.is_literal(
                att.step_id,
                hint_key,
                inputs=inputs,
                references=att.references,
                state_reads=state_reads,
            )
        )
        failure = Failure(
            att.step_id,
            hint.category,
            hint_key,
            root,
            fatal,
            in_arguments=in_arguments,
            literal=literal,
        )
        decision = self.controller.decide(failure, rt.ctl, rt.policy)
        constraints = add_constraint(
            list(rt.body.get("constraints", [])), hint.text, self.config.max_constraints
        )
        detail: dict[str, Any] = {
            "hint": hint.text,
            "category": hint.category,
            "rule": hint.rule,
            "key": hint_key,
            # What the controller did, for history readers (the dashboard's arcs and
            # root-cause paths): the strategy, the step it rewound to, the root cause found.
            "strategy": decision.strategy.value,
            "target": decision.rollback_to_step,
            "root": root or 0,
        }
        if scope is not None and scope.reads:
            detail["reads"] = scope.committed_reads()
            rt.note_reads(detail["reads"])
        if scope is not None and scope.running is not None and "op" in scope.running.detail:
            detail["op"] = scope.running.detail["op"]  # the provider operation, as evidence
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
        why = cause(decision.strategy.value, "step_failure", step=att.step_id)
        errors, _ = await self.rewinder.rewind(rt, target, final, body, failed_row, why)
        latency = (time.perf_counter() - started) * 1000
        return StepResult(
            transaction_id=rt.transaction_id,
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
        self,
        rt: TxRuntime,
        att: Attempt,
        scope: StepRun,
        text: str,
        cause: str,
        exc: UncertainOutcome | None = None,
    ) -> StepResult:
        """The outside call may or may not have happened: keep its undo records and its
        provider operation, block the transaction until the step is reconciled
        (``reconcile_step`` / ``resolve_step``, ``reconcile.py``) or rolled back."""
        category = (await by_size(len(text), INLINE_HINT_CHARS, self.cleaner.clean, text)).category
        now = self.clock()
        held = scope.running.detail.get("op") if scope.running is not None else None
        op = uncertain_op(exc.operation_id if exc else None, exc.provider if exc else "", held)
        record = pending_record(att.step_id, now, op, exc.retry_after_ms if exc else None)
        retry_ms = ms_left(record, now)
        secrets = await self._secrets(att)
        # The cause (a tool's exception text) is quoted in the hint: masked like the error.
        hint = self.redactor.scrub(
            outcome_unknown_hint(att.step_id, self.redactor.text(cause), retry_ms), secrets
        )
        error = self.redactor.scrub(self.redactor.text(text[:4096]), secrets)
        detail: dict[str, Any] = {"hint": hint, "category": category, "error": error}
        if op:
            detail["op"] = op
        row = self._step_row(rt, att, StepStatus.OUTCOME_UNKNOWN.value, live=False, detail=detail)
        body = dict(rt.body, step_seq=att.seq, outcome_unknown_step=att.step_id, reconcile=record)
        # If it did not happen the step is sent again: as its next try (``core.attempts``).
        body = with_tried(body, [row])
        audit = self.images.step_audit(rt, rt.row.revision + 1, now, row)
        update = TxUpdate(
            tx_id=rt.transaction_id,
            expected_revision=rt.row.revision,
            from_statuses=_EXECUTING,
            status=_ACTIVE,
            next_step_id=att.step_id,
            body=body,
            now=now,
            audit=audit,
            audit_seq=self.images.watermark(rt, body) if audit else 0,
        )
        self.images.applied(rt, update, await self.store.finish_step(update, row))
        return StepResult(
            transaction_id=rt.transaction_id,
            step_id=att.step_id,
            status=StepStatus.OUTCOME_UNKNOWN,
            clean_hint=hint,
            strategy=Strategy.NONE,
            next_step_id=att.step_id,
            constraints=list(rt.body.get("constraints", [])),
            error_category=category,
            reference_category=reference_category(category),
            transaction_status=TxStatus.ACTIVE,
            revision=rt.row.revision,
            retry_after_ms=retry_ms,
            operation_provider=str((op or {}).get("provider", "")),
            operation_id=str((op or {}).get("id", "")),
        )


def cancelled_hint(att: Attempt) -> Hint:
    """The hint of a step whose tool its caller cancelled: transient (the same call may be
    sent again), the step's own call at fault, nothing earlier."""
    return Hint(
        f"Hint: step {att.step_id} ({att.tool_name}) was cancelled by its caller before the "
        "tool finished; what it did was undone. Send the step again, or another one.",
        Category.TIMEOUT.value,
        "cancelled",
        "",
    )


def _nested(arguments: dict[str, Any]) -> bool:
    """True iff a value of ``arguments`` is a container (``resolve`` copies those deeply)."""
    for value in arguments.values():  # noqa: SIM110 - a loop makes no generator per step
        if isinstance(value, dict | list):
            return True
    return False


_CORE_DIR = os.path.dirname(os.path.abspath(__file__))


def error_text(exc: BaseException) -> str:
    """The tool's exception as the raw error the hint cleaner reads: its message and the
    traceback from the tool's own frames on (the engine's frames say nothing about the
    failure and would only cost the cleaner time)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CORE_DIR):
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    if _internal(type(exc)) and str(exc):
        # An error of ours (a limit the tool context enforced, a built-in's argument check)
        # says everything in its message; its class path is no advice for an agent.
        own = traceback.format_exception_only(type(exc), exc)
        if lines[-len(own) :] == own:
            lines[-len(own) :] = [f"{exc}\n"]
    return "".join(lines).rstrip()


def _internal(cls: type[BaseException]) -> bool:
    module = cls.__module__
    return module == "agenttx" or module.startswith("agenttx.")


def add_constraint(constraints: list[str], hint: str, cap: int) -> list[str]:
    """De-duplicated, insertion-ordered, at most ``cap`` (oldest evicted)."""
    if hint in constraints:
        return constraints
    constraints.append(hint)
    return constraints[-cap:]
