"""The engine: transactions of tool calls over a ``Store``.

Every public method is one step of the lifecycle in ``docs/transactions.md``. The invariants:

- Each durable change is a compare-and-set on the transaction's revision (``TxUpdate``), so a
  stale in-memory image or a second replica is detected, never overwritten.
- Calls on one transaction run one at a time (``TxRuntime.lock``); other transactions run
  concurrently.
- A tool's failure is data in the ``StepResult``; exceptions are for protocol misuse only.
- Undo records of outside effects are durable before the outside call (``StepRun``), writes
  and staged effects of a step become durable with the step, and the commit publishes writes,
  enqueues effects and ends the transaction in one store transaction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agenttx.core.controller import ControllerState, Decision, Failure, RollbackController
from agenttx.core.graph import DependencyGraph
from agenttx.core.hints import Hint, HintCleaner
from agenttx.core.limits import (
    MAX_OUTPUT_BYTES,
    arguments_text,
    check_begin,
    check_step_request,
    check_transaction_id,
)
from agenttx.core.refs import Reference, UnresolvedReference, find_references, resolve
from agenttx.core.runtime import StepRun, TxRuntime, Write
from agenttx.core.states import check_transition
from agenttx.core.types import (
    BeginResult,
    CommitResult,
    ContextEntry,
    EffectClass,
    Isolation,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    StepStatus,
    StepView,
    Strategy,
    TransactionInfo,
    TxStatus,
)
from agenttx.errors import (
    AgentTxError,
    CommitConflict,
    FailedPrecondition,
    FatalToolError,
    InvalidArgument,
    NotActive,
    NotFound,
    OutcomeUnknownPending,
    RevisionConflict,
    UncertainOutcome,
    WrongStep,
)
from agenttx.store.contract import (
    CommitPlan,
    StagedEffect,
    StepRow,
    Store,
    TxRow,
    TxUpdate,
    UndoRow,
    VersionCheck,
)
from agenttx.tools.context import SyncToolContext, ToolContext
from agenttx.tools.contract import DEFAULT_TIMEOUT_S, ArgumentError, Tool
from agenttx.tools.registry import ToolRegistry

log = logging.getLogger("agenttx.engine")

Clock = Callable[[], float]

OPEN = (TxStatus.ACTIVE.value,)


@dataclass(frozen=True)
class EngineConfig:
    fs_root: Path
    step_timeout_s: float = DEFAULT_TIMEOUT_S
    tx_idle_timeout_secs: float = 900.0  # 0 turns the idle reaper off
    compensation_retries: int = 3
    compensation_backoff_s: float = 0.010  # 10 ms · 2^try, as the reference
    max_constraints: int = 32
    default_policy: RollbackPolicy = field(default_factory=RollbackPolicy)
    tenant: str = "default"
    owner: str = ""  # this process, for step leases: "host:pid:random"

    def __post_init__(self) -> None:
        if not 0 < self.step_timeout_s <= 86_400:
            raise InvalidArgument("step timeout must be in (0, 86400] seconds")
        if self.tx_idle_timeout_secs < 0:
            raise InvalidArgument("tx_idle_timeout_secs must be >= 0 (0 turns the reaper off)")
        if not 0 <= self.compensation_retries <= 100:
            raise InvalidArgument("compensation_retries must be 0..100")
        if not 1 <= self.max_constraints <= 4096:
            raise InvalidArgument("max_constraints must be 1..4096")


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class _Attempt:
    """What the step pipeline knows about the attempt it is running."""

    step_id: int
    seq: int
    attempt: int
    tool_name: str
    effect: str
    arguments_json: str
    raw_context: str
    started_at: float
    resolved: Any = None
    references: list[Reference] = field(default_factory=list)


class CoreEngine:
    """The transaction engine over a store; ``agenttx.Engine`` adds opening, background work
    (dispatcher, reaper, recovery) and closing."""

    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        config: EngineConfig,
        *,
        cleaner: HintCleaner | None = None,
        controller: RollbackController | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.config = config
        self.cleaner = cleaner or HintCleaner()
        self.controller = controller or RollbackController()
        self.clock = clock
        self._runtimes: dict[str, TxRuntime] = {}
        self._loading: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ begin / read

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        isolation: Isolation | str = Isolation.SNAPSHOT,
    ) -> BeginResult:
        meta = dict(metadata or {})
        check_begin(agent_id, meta)
        pol = self._policy(policy)
        try:
            iso = Isolation(isolation)
        except ValueError:
            allowed = ", ".join(i.value for i in Isolation)
            raise InvalidArgument(
                f"unknown isolation {isolation!r}; use one of {allowed}"
            ) from None
        now = self.clock()
        body: dict[str, Any] = {
            "metadata": meta,
            "policy": pol.to_dict(),
            "controller": ControllerState().to_dict(),
            "constraints": [],
            "epoch": 0,
            "step_seq": 0,
            "requires_human": False,
            "abort_reason": "",
            "compensation_errors": [],
            "outcome_unknown_step": 0,
        }
        row = TxRow(
            id=f"tx_{uuid.uuid4().hex}",
            tenant=self.config.tenant,
            agent_id=agent_id,
            status=TxStatus.ACTIVE.value,
            revision=1,
            next_step_id=1,
            snapshot=0,
            isolation=iso.value,
            body=body,
            created_at=now,
            updated_at=now,
            last_activity_at=now,
        )
        row = await self.store.create_transaction(row)
        self._runtimes[row.id] = TxRuntime(row, pol, iso, ControllerState())
        log.debug("begin %s agent=%s isolation=%s", row.id, agent_id, iso.value)
        return BeginResult(row.id, 1, TxStatus.ACTIVE, row.revision)

    def _policy(self, policy: RollbackPolicy | Mapping[str, Any] | None) -> RollbackPolicy:
        if policy is None:
            return self.config.default_policy
        if isinstance(policy, RollbackPolicy):
            return policy
        base = self.config.default_policy.to_dict()
        base.update({k: v for k, v in policy.items() if v is not None})
        return RollbackPolicy.from_dict(base)

    async def get_transaction(self, tx_id: str, *, history: bool = True) -> TransactionInfo:
        check_transaction_id(tx_id)
        row = await self.store.get_transaction(tx_id)
        if row is None:
            raise NotFound(f"transaction `{tx_id}` not found")
        steps = await self.store.load_steps(tx_id, live_only=not history)
        rt = self._runtimes.get(tx_id)
        edges = (
            [(e.source, e.target, e.key) for e in rt.graph.edges()]
            if rt is not None and rt.row.revision == row.revision
            else [(e.source, e.target, e.key) for e in _rebuild_graph(steps).edges()]
        )
        return _info(row, steps, edges)

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        limit: int = 100,
        after_id: str = "",
    ) -> list[TransactionInfo]:
        rows = await self.store.list_transactions(
            statuses=statuses, agent_id=agent_id, limit=limit, after_id=after_id
        )
        return [_info(r, [], []) for r in rows]

    def list_tools(self) -> list[dict[str, Any]]:
        return [t.describe() for t in self.registry]

    # ------------------------------------------------------------------ runtime cache

    async def _runtime(self, tx_id: str) -> TxRuntime:
        check_transaction_id(tx_id)
        rt = self._runtimes.get(tx_id)
        if rt is not None:
            return rt
        lock = self._loading.setdefault(tx_id, asyncio.Lock())
        async with lock:
            rt = self._runtimes.get(tx_id)
            if rt is None:
                rt = await self._load(tx_id)
                self._runtimes[tx_id] = rt
        self._loading.pop(tx_id, None)
        return rt

    async def _load(self, tx_id: str) -> TxRuntime:
        row = await self.store.get_transaction(tx_id)
        if row is None:
            raise NotFound(f"transaction `{tx_id}` not found")
        rt = TxRuntime(
            row,
            RollbackPolicy.from_dict(row.body.get("policy")),
            Isolation(row.isolation),
            ControllerState.from_dict(row.body.get("controller")),
        )
        steps = await self.store.load_steps(tx_id, live_only=True)
        for st in steps:
            if st.status != StepStatus.SUCCESS.value:
                continue
            rt.steps[st.step_id] = st
            rt.outputs[st.step_id] = json.loads(st.output_json) if st.output_json else None
            rt.apply_writes(st.step_id, [(w[0], w[1], int(w[2])) for w in st.detail.get("w", ())])
            rt.staged.extend(
                StagedEffect(st.step_id, fx[0], fx[1], fx[2]) for fx in st.detail.get("fx", ())
            )
        # Successful steps do not rewrite the body (one small UPDATE per step), so the counters
        # they advance are recomputed here from the steps themselves.
        if rt.steps:
            rt.ctl.furthest_step = max(rt.ctl.furthest_step, max(rt.steps))
            seq = max(st.seq for st in rt.steps.values())
            if seq > int(row.body.get("step_seq", 0)):
                row.body["step_seq"] = seq
        rt.undo = [u for u in await self.store.load_undo(tx_id) if u.status != "done"]
        rt.graph = _rebuild_graph(list(rt.steps.values()))
        return rt

    async def _reload(self, rt: TxRuntime) -> TxRuntime:
        fresh = await self._load(rt.id)
        fresh.lock = rt.lock  # callers hold this lock
        self._runtimes[rt.id] = fresh
        return fresh

    def _evict(self, rt: TxRuntime) -> None:
        if TxStatus(rt.row.status).terminal:
            self._runtimes.pop(rt.id, None)

    # ------------------------------------------------------------------ execute_step

    async def execute_step(
        self,
        tx_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
    ) -> StepResult:
        check_transaction_id(tx_id)
        check_step_request(step_id, tool_name, raw_context)
        args_text = arguments_text(arguments)
        rt = await self._runtime(tx_id)
        async with rt.lock:
            try:
                return await self._execute_locked(rt, step_id, tool_name, args_text, raw_context)
            except RevisionConflict:
                # Someone else (another process or replica) moved the transaction: reload and
                # report against the fresh state; the caller decides whether to resend.
                await self._reload(rt)
                raise

    async def _execute_locked(
        self, rt: TxRuntime, step_id: int, tool_name: str, args_text: str, raw_context: str
    ) -> StepResult:
        status = TxStatus(rt.row.status)
        if status is not TxStatus.ACTIVE:
            # A stale cache may think otherwise; trust the store before refusing.
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
        att = _Attempt(
            step_id=step_id,
            seq=seq,
            attempt=attempt_no,
            tool_name=tool_name,
            effect=tool.effect.value if tool else "",
            arguments_json=args_text,
            raw_context=raw_context,
            started_at=now,
        )
        self.controller.on_step_started(rt.ctl, step_id)

        # Parse → look up the tool → resolve references → validate, each a step failure.
        try:
            args: Any = json.loads(args_text) if args_text.strip() else {}
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
        att.arguments_json = _dumps(att.resolved)
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
            output_json = _dumps(output)
            if len(output_json) > MAX_OUTPUT_BYTES:
                raise ValueError(f"tool output exceeds {MAX_OUTPUT_BYTES} bytes")
        except FatalToolError as exc:
            return await self._fail(rt, att, _error_text(exc), fatal=True, scope=scope)
        except UncertainOutcome as exc:
            return await self._outcome_unknown(rt, att, scope, _error_text(exc))
        except TimeoutError:
            text = f"tool '{tool_name}' timed out after {int(self._timeout(tool) * 1000)} ms"
            if tool.effect.outside and not tool.idempotent:
                return await self._outcome_unknown(rt, att, scope, text)
            return await self._fail(rt, att, text, scope=scope)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._fail(rt, att, _error_text(exc), scope=scope)
        return await self._succeed(rt, att, scope, output, output_json)

    def _timeout(self, tool: Tool) -> float:
        # A tool that kept the default follows the engine's --step-timeout-ms.
        return self.config.step_timeout_s if tool.timeout_s == DEFAULT_TIMEOUT_S else tool.timeout_s

    async def _run_tool(
        self, tool: Tool, scope: StepRun, resolved: Any, call_args: dict[str, Any] | None
    ) -> Any:
        timeout = self._timeout(tool)
        if tool.is_async:
            ctx: Any = ToolContext(scope)
            if call_args is None:
                coro = tool.fn(ctx, resolved) if tool.takes_context else tool.fn(resolved)
            else:
                coro = tool.fn(ctx, **call_args) if tool.takes_context else tool.fn(**call_args)
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

    def _step_row(
        self, rt: TxRuntime, att: _Attempt, status: str, *, live: bool, detail: dict[str, Any]
    ) -> StepRow:
        if att.references:
            # Kept on every attempt, so the graph can be rebuilt from any row that becomes live.
            detail = {
                "refs": [[r.step_id, list(r.path), list(r.arg_path)] for r in att.references],
                **detail,
            }
        return StepRow(
            tx_id=rt.id,
            seq=att.seq,
            step_id=att.step_id,
            attempt=att.attempt,
            epoch=int(rt.body.get("epoch", 0)),
            tool=att.tool_name,
            effect=att.effect,
            status=status,
            live=live,
            arguments_json=att.arguments_json,
            output_json="",
            raw_context=att.raw_context,
            detail=detail,
            started_at=att.started_at,
            finished_at=self.clock(),
        )

    @staticmethod
    def _applied(rt: TxRuntime, update: TxUpdate, revision: int) -> None:
        """Mirror a durable update in the cached row."""
        row = rt.row
        row.revision = revision
        row.status = update.status
        row.next_step_id = update.next_step_id
        row.updated_at = update.now
        if update.touch_activity:
            row.last_activity_at = update.now
        if update.body is not None:
            row.body = update.body

    def _update(
        self,
        rt: TxRuntime,
        status: TxStatus,
        next_step_id: int,
        body: dict[str, Any] | None,
        from_statuses: tuple[str, ...],
        *,
        touch: bool = True,
    ) -> TxUpdate:
        check_transition(TxStatus(rt.row.status), status)
        return TxUpdate(
            tx_id=rt.id,
            expected_revision=rt.row.revision,
            from_statuses=from_statuses,
            status=status.value,
            next_step_id=next_step_id,
            body=body,
            now=self.clock(),
            touch_activity=touch,
        )

    async def _succeed(
        self, rt: TxRuntime, att: _Attempt, scope: StepRun, output: Any, output_json: str
    ) -> StepResult:
        writes = await self._deltas(rt, scope)
        detail: dict[str, Any] = {}
        if scope.reads:
            detail["reads"] = scope.committed_reads()
        if scope.state_reads:
            detail["state_reads"] = scope.state_reads
        if writes:
            detail["w"] = writes
        if scope.staged:
            detail["fx"] = [[e.channel, e.payload_json, e.idempotency_key] for e in scope.staged]
        row = self._step_row(rt, att, StepStatus.SUCCESS.value, live=True, detail=detail)
        row.output_json = output_json
        next_step = att.step_id + 1
        rt.body["step_seq"] = att.seq
        body: dict[str, Any] | None = None  # unchanged: the step row carries the news
        if att.effect in _OUTSIDE or str(att.step_id) in rt.body.get("attempts", {}):
            body = dict(rt.body, controller=rt.ctl.to_dict())
            # Only failed attempts are counted, so this map stays O(failing steps).
            body["attempts"] = {
                k: v for k, v in body.get("attempts", {}).items() if k != str(att.step_id)
            }
        from_statuses = (TxStatus.EXECUTING.value,) if att.effect in _OUTSIDE else OPEN
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
        rt.graph.add_step(
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
        att: _Attempt,
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
        constraints = _add_constraint(
            list(rt.body.get("constraints", [])), hint.text, self.config.max_constraints
        )
        detail = {"hint": hint.text, "category": hint.category, "rule": hint.rule, "key": hint_key}
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
            rollback_latency_ms=latency,
            abort_reason=str(rt.body.get("abort_reason", "")) if abort else "",
            compensation_errors=errors,
            transaction_status=TxStatus(rt.row.status),
            revision=rt.row.revision,
            hint_key=hint_key,
        )

    async def _outcome_unknown(
        self, rt: TxRuntime, att: _Attempt, scope: StepRun, text: str
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
            transaction_status=TxStatus.ACTIVE,
            revision=rt.row.revision,
        )

    async def resolve_outcome(
        self, tx_id: str, step_id: int, *, happened: bool, output: Any = None
    ) -> TransactionInfo:
        """Settle a step whose outside call had an unknown outcome (after checking the outside
        system): ``happened`` keeps it as a successful step with ``output``; otherwise its undo
        records are discarded unrun and the step can be sent again."""
        rt = await self._runtime(tx_id)
        async with rt.lock:
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
                last.output_json = _dumps(output)
                last.detail = dict(last.detail, resolved="happened")
                update = self._update(rt, TxStatus.ACTIVE, step_id + 1, body, OPEN)
                self._applied(rt, update, await self.store.finish_step(update, last))
                rt.steps[step_id] = last
                rt.outputs[step_id] = output
                rt.graph.add_step(
                    step_id,
                    json.loads(last.arguments_json) if last.arguments_json else None,
                    output,
                    _references(last),
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

    async def _rewind(
        self,
        rt: TxRuntime,
        target: int,
        final: TxStatus,
        body: dict[str, Any],
        failed_row: StepRow | None,
        *,
        strategy: Decision | None = None,
    ) -> tuple[list[str], int]:
        """Undo everything of steps ≥ target and leave the transaction in ``final`` with
        ``next_step_id = target`` (0 if it ended). Returns (compensation errors, compensations
        run). Durable in two phases when compensations must run: ROLLING_BACK with the plan,
        then the compensations, then the final state, so a crash in between resumes it."""
        target = max(target, 0)
        to_undo = [u for u in rt.undo if u.step_id >= target and u.status == "pending"]
        next_step = target if not final.terminal else 0
        if final.terminal:
            body = dict(body, ended_at=self.clock())
        from_statuses = (
            TxStatus.ACTIVE.value,
            TxStatus.EXECUTING.value,
            TxStatus.ROLLING_BACK.value,
            TxStatus.COMMITTING.value,
        )
        errors: list[str] = []
        if to_undo:
            plan = dict(body, rewind={"target": target, "final": final.value})
            update = self._update(
                rt, TxStatus.ROLLING_BACK, rt.row.next_step_id, plan, from_statuses
            )
            if failed_row is not None:
                revision = await self.store.finish_step(update, failed_row)
                failed_row = None
            else:
                revision = await self.store.update_transaction(update)
            self._applied(rt, update, revision)
            errors = await self._compensate(rt, to_undo)
            body = dict(rt.body)
            body.pop("rewind", None)
            if errors:
                body["requires_human"] = True
                body["compensation_errors"] = [*body.get("compensation_errors", []), *errors]
        if target <= 1 or int(body.get("outcome_unknown_step", 0)) >= target:
            body["outcome_unknown_step"] = 0
        update = self._update(rt, final, next_step, body, from_statuses, touch=True)
        self._applied(rt, update, await self.store.finish_rewind(update, target, failed_row))
        rt.drop_from(target)
        self._evict(rt)
        return errors, len(to_undo)

    async def _compensate(self, rt: TxRuntime, rows: list[UndoRow]) -> list[str]:
        """Run undo handlers newest first, each up to ``compensation_retries`` times with
        exponential backoff; a handler that keeps failing is reported and its record kept."""
        errors: list[str] = []
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
                    result = handler(_UndoContext(rt.id, row), **json.loads(row.args_json))
                    if asyncio.iscoroutine(result):
                        await result
                    ok = True
                    break
                except Exception as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    if n + 1 < tries:
                        await asyncio.sleep(self.config.compensation_backoff_s * (2**n))
            status = "done" if ok else "failed"
            row.status = status
            row.last_error = "" if ok else last
            await self.store.set_undo_status(row.id, status, row.attempts, row.last_error)
            if not ok:
                errors.append(f"undo {row.handler} of step {row.step_id}: {last}")
        return errors

    # ------------------------------------------------------------------ rollback / commit

    async def rollback(
        self, tx_id: str, to_step: int | None = None, reason: str = ""
    ) -> RollbackResult:
        rt = await self._runtime(tx_id)
        async with rt.lock:
            status = TxStatus(rt.row.status)
            if status.terminal:
                raise NotActive(rt.id, status.value, "roll back")
            if to_step:
                if to_step >= rt.row.next_step_id:
                    raise InvalidArgument(
                        f"invalid argument: to_step {to_step} must be lower than the next "
                        f"step {rt.row.next_step_id}"
                    )
                self.controller.on_manual_rewind(rt.ctl, to_step)
                body = dict(rt.body, controller=rt.ctl.to_dict())
                errors, ran = await self._rewind(rt, to_step, TxStatus.ACTIVE, body, None)
                return RollbackResult(
                    rt.id, True, rt.row.next_step_id, ran, errors, TxStatus.ACTIVE, rt.row.revision
                )
            body = dict(rt.body, abort_reason=reason or "rolled back on request")
            errors, ran = await self._rewind(rt, 0, TxStatus.ROLLED_BACK, body, None)
            return RollbackResult(
                rt.id, True, 0, ran, errors, TxStatus.ROLLED_BACK, rt.row.revision
            )

    async def commit(self, tx_id: str) -> CommitResult:
        rt = await self._runtime(tx_id)
        async with rt.lock:
            status = TxStatus(rt.row.status)
            if status is not TxStatus.ACTIVE:
                raise NotActive(rt.id, status.value, "commit")
            if rt.body.get("outcome_unknown_step"):
                raise OutcomeUnknownPending(rt.id, int(rt.body["outcome_unknown_step"]))
            writes = rt.final_writes()
            checks = self._checks(rt, writes)
            steps_committed = len(rt.steps)
            now = self.clock()
            done_body = dict(rt.body, ended_at=now)
            conflict_body = dict(rt.body, rewind={"target": 0, "final": TxStatus.FAILED.value})
            plan = CommitPlan(
                tenant=rt.row.tenant,
                writes=writes,
                effects=list(rt.staged),
                checks=checks,
                on_success=self._update(rt, TxStatus.COMMITTED, 0, done_body, OPEN),
                on_conflict=replace(
                    self._update(
                        rt, TxStatus.ROLLING_BACK, rt.row.next_step_id, conflict_body, OPEN
                    )
                ),
            )
            outcome = await self.store.commit(plan)
            applied = plan.on_success if outcome.committed else plan.on_conflict
            self._applied(rt, applied, outcome.revision)
            if not outcome.committed:
                keys = [c.key for c in outcome.conflicts]
                kind = outcome.conflicts[0].kind if outcome.conflicts else "write"
                body = dict(rt.body)
                body.pop("rewind", None)
                body["abort_reason"] = (
                    f"{kind} conflict on key `{keys[0]}`: it was committed by another transaction"
                )
                errors, _ = await self._rewind(rt, 0, TxStatus.FAILED, body, None)
                raise CommitConflict(rt.id, keys, kind, errors)
            self._evict(rt)
        # Outside the lock: the transaction is over, delivery must not hold anything up.
        dispatched, dispatch_errors = await self._release(outcome.outbox_ids)
        return CommitResult(
            transaction_id=rt.id,
            committed=True,
            steps_committed=steps_committed,
            effects_dispatched=dispatched,
            dispatch_errors=dispatch_errors,
            effects_queued=len(outcome.outbox_ids),
            transaction_status=TxStatus.COMMITTED,
            revision=rt.row.revision,
        )

    async def _release(self, outbox_ids: list[int]) -> tuple[int, list[str]]:
        """Hook run after a durable commit with its outbox rows: (delivered now, errors).
        The core engine delivers nothing itself; ``agenttx.Engine`` hands them to its
        dispatcher."""
        return 0, []

    def _checks(self, rt: TxRuntime, writes: Mapping[str, str | None]) -> list[VersionCheck]:
        """Commit validation per isolation level (``docs/isolation.md``)."""
        if rt.isolation is Isolation.READ_COMMITTED:
            return [VersionCheck(k, rt.base_versions.get(k, 0), "write") for k in writes]
        checks = [VersionCheck(k, rt.row.snapshot, "write") for k in writes]
        if rt.isolation is Isolation.SERIALIZABLE:
            checks += [
                VersionCheck(k, rt.row.snapshot, "read") for k in rt.read_set() if k not in writes
            ]
        return checks

    # ------------------------------------------------------------------ recovery & reaper

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
        rt = await self._runtime(row.id)
        async with rt.lock:
            rt = await self._reload(rt)
            status = TxStatus(rt.row.status)
            if status is TxStatus.ROLLING_BACK:
                plan = rt.body.get("rewind") or {"target": 0, "final": TxStatus.FAILED.value}
                body = dict(rt.body)
                await self._rewind(rt, int(plan["target"]), TxStatus(plan["final"]), body, None)
                return "rewinds"
            if status is TxStatus.EXECUTING:
                steps = await self.store.load_steps(rt.id, live_only=False)
                running = next((s for s in reversed(steps) if s.status == "RUNNING"), None)
                if running is not None and not _lease_dead(running, self.clock()):
                    return ""
                await self._recover_step(rt, running)
                return "interrupted_steps"
        return ""

    async def _recover_step(self, rt: TxRuntime, running: StepRow | None) -> None:
        step_id = running.step_id if running else rt.row.next_step_id
        tool = self.registry.get(running.tool) if running else None
        text = "the step was interrupted by a restart before it finished"
        if running is not None and tool is not None and not tool.idempotent:
            running.status = StepStatus.OUTCOME_UNKNOWN.value
            running.detail = {"hint": f"Hint: {text}; check whether it happened.", "error": text}
            running.finished_at = self.clock()
            body = dict(rt.body, outcome_unknown_step=step_id)
            update = self._update(rt, TxStatus.ACTIVE, step_id, body, (TxStatus.EXECUTING.value,))
            self._applied(rt, update, await self.store.finish_step(update, running))
            return
        # Idempotent (or unknown) tool: undo whatever it did and let the agent send it again.
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


_OUTSIDE = frozenset(e.value for e in EffectClass if e.outside)


class _UndoContext:
    """What an undo handler receives as ``ctx``."""

    def __init__(self, tx_id: str, row: UndoRow) -> None:
        self.transaction_id = tx_id
        self.step_id = row.step_id
        self.idempotency_key = row.idempotency_key


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
        return True  # this process restarted the engine: nothing of the old one runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def _add_constraint(constraints: list[str], hint: str, cap: int) -> list[str]:
    """De-duplicated, insertion-ordered, at most ``cap`` (oldest evicted)."""
    if hint in constraints:
        return constraints
    constraints.append(hint)
    return constraints[-cap:]


def _references(step: StepRow) -> list[Reference]:
    return [Reference(int(r[0]), tuple(r[1]), tuple(r[2])) for r in step.detail.get("refs", ())]


def _rebuild_graph(steps: Iterable[StepRow]) -> DependencyGraph:
    """The graph exactly as the live steps built it (the graph is a pure function of them)."""
    graph = DependencyGraph()
    for s in sorted(steps, key=lambda s: s.step_id):
        if s.status != StepStatus.SUCCESS.value or not s.live:
            continue
        refs = _references(s)
        graph.add_step(
            s.step_id,
            json.loads(s.arguments_json) if s.arguments_json else None,
            json.loads(s.output_json) if s.output_json else None,
            refs,
            state_reads=s.detail.get("state_reads", ()),
            state_writes=s.detail.get("writes", ()),
        )
    return graph


def _info(row: TxRow, steps: list[StepRow], edges: list[tuple[int, int, str]]) -> TransactionInfo:
    live = [s for s in steps if s.live and s.status == StepStatus.SUCCESS.value]
    return TransactionInfo(
        transaction_id=row.id,
        status=TxStatus(row.status),
        next_step_id=row.next_step_id,
        constraints=list(row.body.get("constraints", [])),
        global_resets=int(row.body.get("controller", {}).get("global_resets", 0)),
        context=[ContextEntry(s.step_id, s.tool, s.raw_context) for s in live],
        agent_id=row.agent_id,
        metadata=dict(row.body.get("metadata", {})),
        isolation=Isolation(row.isolation),
        policy=RollbackPolicy.from_dict(row.body.get("policy")),
        revision=row.revision,
        epoch=int(row.body.get("epoch", 0)),
        requires_human=bool(row.body.get("requires_human", False)),
        abort_reason=str(row.body.get("abort_reason", "")),
        compensation_errors=list(row.body.get("compensation_errors", [])),
        outcome_unknown_step=int(row.body.get("outcome_unknown_step", 0)),
        created_at=row.created_at,
        updated_at=row.updated_at,
        steps=[
            StepView(
                step_id=s.step_id,
                attempt=s.attempt,
                tool_name=s.tool,
                status=s.status,
                live=s.live,
                arguments=json.loads(s.arguments_json) if s.arguments_json else None,
                output=json.loads(s.output_json) if s.output_json else None,
                clean_hint=str(s.detail.get("hint", "")),
                error_category=str(s.detail.get("category", "")),
                epoch=s.epoch,
                started_at=s.started_at,
                finished_at=s.finished_at,
            )
            for s in steps
        ],
        edges=edges,
    )


__all__ = ["AgentTxError", "CoreEngine", "EngineConfig", "Hint", "new_owner"]
