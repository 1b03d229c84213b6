"""Dry runs: what step n would do, with nothing journaled.

``execute_step(..., dry_run=True)`` goes as far up the fidelity ladder as the tool declares
(``agenttx.types.Fidelity``; each level includes the ones below):

1. ``schema_only``: the arguments are parsed, their references resolved against the live
   steps (< n), and checked against the tool's schema;
2. ``policy_and_schema``: the ``ToolPolicy`` says allowed / needs approval / forbidden;
3. ``downstream_validation``: the tool's ``@validate`` handler runs (it may ask the outside
   system whether the call would be accepted; raising means it would not);
4. ``full_simulation``: its ``@simulate`` handler runs; a ``read``, ``state`` or ``staged`` tool
   without one runs itself, since everything such a tool does goes through its context.

Handlers run with a context whose writes, staged effects and undo registrations are captured
and then dropped (``DryRunScope``): they become the reply's ``changes``. A level whose handler
is missing is not reached (the reply's ``fidelity`` says how far it got, ``notes`` why).

Invariant: a dry run changes nothing durable — no step row, no revision, no undo record, no
audit record, no stored reply, no constraint — and ``next_step_id`` stays. It holds the
transaction's lock while it runs, so what it reads is one consistent image.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from agenttx import jsonpolicy
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.eager import leave_eager
from agenttx.core.hints import HintCleaner
from agenttx.core.images import TxImages
from agenttx.core.limits import check_step_request, check_transaction_id, reply_room
from agenttx.core.offload import INLINE_HINT_CHARS, INLINE_JSON_CHARS, by_size
from agenttx.core.refs import ResolveLimits, UnresolvedReference, resolve
from agenttx.core.runtime import StepRun, TxRuntime
from agenttx.core.tool_policy import PolicyDecision, ToolPolicy
from agenttx.errors import (
    ArgumentError,
    ArgumentsRefused,
    NotActive,
    OutcomeUnknownPending,
    StepLimitReached,
    WrongStep,
)
from agenttx.jsonpolicy import JsonRefused
from agenttx.jsontext import compact
from agenttx.store.contract import Store
from agenttx.tools.context import SyncToolContext, ToolContext
from agenttx.tools.contract import DEFAULT_TIMEOUT_S, Tool
from agenttx.tools.registry import ToolRegistry
from agenttx.types import (
    DryRunReport,
    EffectClass,
    Fidelity,
    StepResult,
    StepStatus,
    Strategy,
    TxStatus,
)

# Effect classes whose every effect goes through the tool context: running such a tool in a
# scope that keeps nothing is a faithful simulation.
_CONTEXT_ONLY = frozenset({EffectClass.READ, EffectClass.STATE, EffectClass.STAGED})
# A value shown in ``changes`` in full up to this many bytes of JSON; a longer one by its
# SHA-256 and size, so the reply stays small whatever the step would write.
MAX_SHOWN_VALUE_BYTES = 4096
# Writes (and effects) listed in ``changes``, at most; the rest are counted.
MAX_SHOWN_CHANGES = 1000


class DryRunScope:
    """The ``StepScope`` of a dry run: reads as the step would read, keeps every write, staged
    effect and undo registration in memory only (``StepRun`` buffers the first two until a
    step ends; undo records it would make durable at once, so they are captured here)."""

    def __init__(self, run: StepRun) -> None:
        self._run = run  # reads and buffers; never asked to make anything durable
        self.transaction_id = run.transaction_id
        self.step_id = run.step_id
        self.idempotency_key = run.idempotency_key
        self.fs_root = run.fs_root
        self.undo: list[dict[str, Any]] = []  # the undo records the step would register
        self.operations: list[dict[str, Any]] = []  # provider operations it would checkpoint

    @property
    def writes(self) -> dict[str, str | None]:
        return self._run.writes

    @property
    def staged(self) -> list[Any]:
        return self._run.staged

    async def state_get(self, key: str) -> Any:
        return await self._run.state_get(key)

    async def state_exists(self, key: str) -> bool:
        return await self._run.state_exists(key)

    def state_put(self, key: str, value: Any) -> None:
        self._run.state_put(key, value)

    async def state_delete(self, key: str) -> bool:
        return await self._run.state_delete(key)

    async def register_undo(self, handler: str | None, args: dict[str, Any]) -> None:
        compact(args)  # the same check a real step makes: undo arguments must be JSON
        self.undo.append({"handler": handler or f"{self._run.tool_name}#undo", "args": args})

    def stage_effect(self, channel: str, payload: Any, idempotency_key: str | None) -> str:
        return self._run.stage_effect(channel, payload, idempotency_key)

    async def report_progress(self, done: float, total: float | None, message: str | None) -> None:
        return None  # a dry run has no one to report to

    async def checkpoint_operation(self, provider: str, operation_id: str, cursor: Any) -> None:
        # A simulation makes no outside call, so there is no operation to reconcile; the
        # checkpoint is noted with the changes instead of journaled.
        self.operations.append({"provider": provider, "operation_id": operation_id})


class _Refused(Exception):
    """Control flow inside ``DryRunner``: a check failed at ``level`` with ``raw`` error."""

    def __init__(self, level: Fidelity, raw: str) -> None:
        super().__init__(raw)
        self.level = level
        self.raw = raw


class DryRunner:
    def __init__(
        self,
        images: TxImages,
        store: Store,
        registry: ToolRegistry,
        cleaner: HintCleaner,
        policy: ToolPolicy,
        config: EngineConfig,
        clock: Clock,
    ) -> None:
        self.images = images  # the image is read under its lock, never changed
        self.store = store  # committed state reads only
        self.registry = registry
        self.cleaner = cleaner  # a failed check's text → the hint a real step would give
        self.policy = policy  # the decision at policy_and_schema
        self.config = config
        self.clock = clock

    async def run(
        self,
        transaction_id: str,
        step_id: int,
        tool_name: str,
        arguments_json: str,
        raw_context: str,
        parsed: dict[str, Any] | None,
    ) -> StepResult:
        check_transaction_id(transaction_id)
        check_step_request(step_id, tool_name, raw_context)
        async with self.images.locked(transaction_id) as rt:
            if rt.row.status != TxStatus.ACTIVE.value:
                rt = await self.images.reload(rt)  # a stale cache may think otherwise
                if rt.row.status != TxStatus.ACTIVE.value:
                    raise NotActive(transaction_id, rt.row.status, "dry-run a step")
            if rt.body.get("outcome_unknown_step"):
                raise OutcomeUnknownPending(transaction_id, int(rt.body["outcome_unknown_step"]))
            if step_id != rt.row.next_step_id:
                raise WrongStep(transaction_id, step_id, rt.row.next_step_id)
            if self.config.max_steps and step_id > self.config.max_steps:
                raise StepLimitReached(transaction_id, self.config.max_steps)
            return await self._run(rt, step_id, tool_name, arguments_json, parsed)

    async def _run(
        self,
        rt: TxRuntime,
        step_id: int,
        tool_name: str,
        arguments_json: str,
        parsed: dict[str, Any] | None,
    ) -> StepResult:
        tool = self.registry.get(tool_name)
        declared = Fidelity(tool.dry_run) if tool is not None else Fidelity.SCHEMA_ONLY
        reached = Fidelity.SCHEMA_ONLY
        notes: list[str] = []
        decision = ""
        changes: dict[str, Any] = {}
        output: Any = None
        try:
            resolved = await self._arguments(rt, step_id, arguments_json, parsed)
            if tool is None:
                raise _Refused(reached, self.registry.unknown_tool_message(tool_name))
            call_args = self._validated(tool, resolved)
            scope = DryRunScope(
                StepRun(
                    rt,
                    self.store,
                    step_id,
                    f"{rt.transaction_id}:{step_id}:dry-run",
                    self.config.fs_root,
                    tool_name,
                    self.clock(),
                )
            )
            if declared.rank >= Fidelity.POLICY_AND_SCHEMA.rank:
                reached = Fidelity.POLICY_AND_SCHEMA
                verdict = self.policy.decide(rt.row, tool, resolved)
                decision = verdict.decision.value
                if verdict.decision is PolicyDecision.FORBIDDEN:
                    raise _Refused(
                        reached,
                        f"policy forbids tool '{tool_name}'"
                        + (f": {verdict.reason}" if verdict.reason else ""),
                    )
                if verdict.decision is PolicyDecision.NEEDS_APPROVAL:
                    notes.append(
                        "the commit will need an approved receipt"
                        + (f" ({verdict.reason})" if verdict.reason else "")
                    )
            if declared.rank >= Fidelity.DOWNSTREAM_VALIDATION.rank:
                if tool.validate_fn is not None:
                    reached = Fidelity.DOWNSTREAM_VALIDATION
                    said = await self._handler(tool, tool.validate_fn, scope, resolved, call_args)
                    if said is not None:
                        changes["validation"] = said
                elif declared is Fidelity.DOWNSTREAM_VALIDATION:
                    notes.append(f"tool '{tool_name}' declares {declared} but has no validate "
                                 "handler (@tool.validate)")  # fmt: skip
            if declared is Fidelity.FULL_SIMULATION:
                fn = tool.simulate_fn
                if fn is None and tool.effect in _CONTEXT_ONLY:
                    fn = tool.fn  # all it does goes through the scope, which keeps nothing
                if fn is None:
                    notes.append(f"tool '{tool_name}' declares {declared} but has no simulate "
                                 "handler (@tool.simulate)")  # fmt: skip
                else:
                    reached = Fidelity.FULL_SIMULATION
                    output = await self._handler(tool, fn, scope, resolved, call_args)
            changes.update(await self._changes(rt, scope))
        except _Refused as refused:
            return await self._reply(
                rt, step_id, declared, refused.level, decision, changes, None, notes, refused.raw
            )
        return await self._reply(rt, step_id, declared, reached, decision, changes, output, notes)

    # ------------------------------------------------------------------ the checks

    async def _arguments(
        self, rt: TxRuntime, step_id: int, arguments_json: str, parsed: dict[str, Any] | None
    ) -> Any:
        """The arguments parsed and resolved against the live steps, as a step resolves them
        (a large text or expansion on a worker thread, as a step's: ``by_size``)."""
        if parsed is not None:
            args: Any = parsed
        elif not arguments_json.strip():
            args = {}
        else:
            try:
                args = await by_size(
                    len(arguments_json), INLINE_JSON_CHARS, jsonpolicy.parse, arguments_json
                )
            except JsonRefused as exc:
                raise _Refused(Fidelity.SCHEMA_ONLY, f"invalid arguments JSON: {exc}") from None
        if "${" not in arguments_json and parsed is None:
            return args
        limits = ResolveLimits(
            self.config.max_resolved_arguments_bytes,
            self.config.max_references,
            len(arguments_json),
        )
        try:
            resolved, _ = await by_size(
                len(arguments_json) + rt.expansion_weight(arguments_json),
                INLINE_JSON_CHARS,
                resolve,
                args,
                rt.outputs,
                step_id,
                limits,
            )
        except (UnresolvedReference, ArgumentsRefused) as exc:
            raise _Refused(Fidelity.SCHEMA_ONLY, exc.message) from None
        return resolved

    def _validated(self, tool: Tool, resolved: Any) -> dict[str, Any] | None:
        try:
            if tool.input_model is not None:
                validated: dict[str, Any] = tool.validate(resolved)
                return validated
            tool.refuse_unknown(resolved)
            return None
        except ArgumentError as exc:
            raise _Refused(Fidelity.SCHEMA_ONLY, str(exc)) from None

    async def _handler(
        self,
        tool: Tool,
        fn: Callable[..., Any],
        scope: DryRunScope,
        resolved: Any,
        call_args: dict[str, Any] | None,
    ) -> Any:
        """Run a dry-run handler (or the tool itself) as the tool would be called, under the
        tool's timeout; its output must be JSON. A failure is a ``_Refused`` at the level."""
        level = Fidelity.FULL_SIMULATION if fn is not tool.validate_fn else (
            Fidelity.DOWNSTREAM_VALIDATION
        )  # fmt: skip
        timeout = self.config.step_timeout_s if tool.timeout_s == DEFAULT_TIMEOUT_S else (
            tool.timeout_s
        )  # fmt: skip
        await leave_eager()  # user code under a timeout follows: it needs the call's task
        try:
            async with asyncio.timeout(timeout):
                result = await _call(tool, fn, scope, resolved, call_args)
            if result is not None:
                jsonpolicy.check(result, compact(result))
            return result
        except TimeoutError:
            raise _Refused(level, f"tool '{tool.name}' timed out after {int(timeout * 1000)} ms"
                           " in its dry run") from None  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the handler's failure (or a non-JSON output) is data
            raise _Refused(level, f"{type(exc).__name__}: {exc}") from None

    # ------------------------------------------------------------------ the reply

    async def _changes(self, rt: TxRuntime, scope: DryRunScope) -> dict[str, Any]:
        """What the step would change: its writes (key, before, after), staged effects and undo
        registrations; only what the handlers that ran did through the context."""
        changes: dict[str, Any] = {}
        if scope.writes:
            writes = []
            for key, after in list(scope.writes.items())[:MAX_SHOWN_CHANGES]:
                before = await self._seen(rt, key)
                writes.append({"key": key, "before": _shown(before), "after": _shown(after)})
            changes["writes"] = writes
            if len(scope.writes) > MAX_SHOWN_CHANGES:
                changes["writes_omitted"] = len(scope.writes) - MAX_SHOWN_CHANGES
        if scope.staged:
            changes["effects"] = [
                {
                    "channel": e.channel,
                    "idempotency_key": e.idempotency_key,
                    "payload": _shown(e.payload_json),
                }
                for e in scope.staged[:MAX_SHOWN_CHANGES]
            ]
            if len(scope.staged) > MAX_SHOWN_CHANGES:
                changes["effects_omitted"] = len(scope.staged) - MAX_SHOWN_CHANGES
        if scope.undo:
            changes["undo"] = [u["handler"] for u in scope.undo[:MAX_SHOWN_CHANGES]]
        return changes

    async def _seen(self, rt: TxRuntime, key: str) -> str | None:
        """The value the transaction sees for ``key`` now (its own writes first)."""
        stack = rt.stacks.get(key)
        if stack:
            return stack[-1][1]
        value, _ = await self.store.read_state(rt.row.tenant, key, rt.read_version)
        return value

    async def _reply(
        self,
        rt: TxRuntime,
        step_id: int,
        declared: Fidelity,
        reached: Fidelity,
        decision: str,
        changes: dict[str, Any],
        output: Any,
        notes: list[str],
        raw_error: str = "",
    ) -> StepResult:
        ok = not raw_error
        output_json = compact(output) if output is not None else ""
        report = DryRunReport(
            declared=declared,
            fidelity=reached,
            would_succeed=ok,
            policy=decision,
            changes=changes,
            output=output,
            notes=notes,
        )
        room = reply_room(rt.body.get("constraints", ()))
        size = len(output_json.encode("utf-8", "surrogatepass")) + len(compact(changes).encode())
        if ok and size > room:
            raw_error = (
                f"the dry run's output and changes are {size} bytes of JSON, over the "
                f"{room}-byte limit of a step reply; dry-run a smaller call"
            )
            ok = False
            report = DryRunReport(declared, reached, False, decision, {}, None, notes)
            output_json = ""
        result = StepResult(
            transaction_id=rt.transaction_id,
            step_id=step_id,
            status=StepStatus.SUCCESS if ok else StepStatus.FAILED,
            output=report.output,
            output_json=output_json,
            strategy=Strategy.NONE,
            next_step_id=rt.row.next_step_id,
            constraints=list(rt.body.get("constraints", [])),
            transaction_status=TxStatus(rt.row.status),
            revision=rt.row.revision,
            dry_run=report,
        )
        if not ok:
            hint = await by_size(len(raw_error), INLINE_HINT_CHARS, self.cleaner.clean, raw_error)
            result.clean_hint = hint.text
            result.error_category = hint.category
            result.hint_key = hint.key
        return result


def _shown(value_json: str | None) -> Any:
    """A value for ``changes``: itself when small, else its SHA-256 and size."""
    if value_json is None:
        return None
    raw = value_json.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_SHOWN_VALUE_BYTES:
        return jsonpolicy.parse(value_json)
    return {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}


async def _call(
    tool: Tool,
    fn: Callable[..., Any],
    scope: DryRunScope,
    resolved: Any,
    call_args: dict[str, Any] | None,
) -> Any:
    """``fn`` called the way the engine calls the tool: with a context unless the tool takes
    none, validated keyword arguments (or the raw object for a schema tool); a plain function
    on a worker thread, with the blocking context."""
    if inspect.iscoroutinefunction(fn):
        ctx: Any = ToolContext(scope)
        if call_args is None:
            return await (fn(ctx, resolved) if tool.takes_context else fn(resolved))
        return await (fn(ctx, **call_args) if tool.takes_context else fn(**call_args))
    loop = asyncio.get_running_loop()
    sctx = SyncToolContext(scope, loop)

    def call() -> Any:
        if call_args is None:
            return fn(sctx, resolved) if tool.takes_context else fn(resolved)
        return fn(sctx, **call_args) if tool.takes_context else fn(**call_args)

    result = await loop.run_in_executor(None, call)
    if inspect.isawaitable(result):
        return await result
    return result
