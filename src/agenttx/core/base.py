"""The engine's shared core: configuration, the cache of open transactions, durable
compare-and-set updates and the rewind.

A rewind is durable in two phases when compensations must run: ROLLING_BACK with the plan,
then the compensations (newest first, retried with backoff), then the final state; a crash in
between is finished by ``recover``. Without compensations it is one store transaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttx.core.controller import ControllerState, Decision, RollbackController
from agenttx.core.eager import leave_eager
from agenttx.core.events import EventBus, event_for
from agenttx.core.hints import HintCleaner
from agenttx.core.limits import (
    check_transaction_id,
)
from agenttx.core.refs import Reference
from agenttx.core.requests import RequestLog
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import check_transition
from agenttx.core.views import graph_step, rebuild_graph, transaction_info
from agenttx.errors import (
    InvalidArgument,
    NotFound,
    RevisionConflict,
)
from agenttx.jsontext import compact
from agenttx.store.contract import (
    StagedEffect,
    StepRow,
    Store,
    TxRow,
    TxUpdate,
    UndoRow,
)
from agenttx.tools.contract import DEFAULT_TIMEOUT_S
from agenttx.tools.registry import ToolRegistry
from agenttx.types import (
    EffectClass,
    Isolation,
    RollbackPolicy,
    StepStatus,
    TransactionInfo,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")

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
    lock_timeout_s: float = 60.0  # how long a call waits for a transaction busy elsewhere

    def __post_init__(self) -> None:
        if not 0 < self.step_timeout_s <= 86_400:
            raise InvalidArgument("step timeout must be in (0, 86400] seconds")
        if self.tx_idle_timeout_secs < 0:
            raise InvalidArgument("tx_idle_timeout_secs must be >= 0 (0 turns the reaper off)")
        if not 0 <= self.compensation_retries <= 100:
            raise InvalidArgument("compensation_retries must be 0..100")
        if not 1 <= self.max_constraints <= 4096:
            raise InvalidArgument("max_constraints must be 1..4096")


# Owners ("host:pid:random") of the engines open in this process. Recovery treats a step
# leased by this pid as abandoned only if its owner is not among them.
LIVE_OWNERS: set[str] = set()


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Attempt:
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
    request_id: str = ""


class EngineBase:
    """State and the mechanisms every engine operation shares: the cache of open
    transactions, durable compare-and-set updates, and the rewind (compensations, then the
    final state)."""

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
        self.requests = RequestLog(store, config.tenant, clock)
        self.events = EventBus()
        self._runtimes: dict[str, TxRuntime] = {}
        self._in_flight = 0  # calls inside _locked (waiting or running): the store batches on it
        store.set_concurrency_hint(lambda: self._in_flight)
        self._loading: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ begin / read

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
            else [(e.source, e.target, e.key) for e in rebuild_graph(steps).edges()]
        )
        return transaction_info(row, steps, edges)

    @contextlib.asynccontextmanager
    async def _locked(
        self, tx_id: str, lock_timeout_s: float | None = None
    ) -> AsyncIterator[TxRuntime]:
        """The transaction's runtime, held exclusively. If a durable update inside finds the
        transaction moved by someone else (``RevisionConflict``: another process or replica),
        the stale image is reloaded before the error reaches the caller, so a retry works."""
        rt = await self._runtime(tx_id)
        wait_s = self.config.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
        self._in_flight += 1
        try:
            async with rt.lock, self.store.transaction_lock(tx_id, wait_s) as current:
                # A shared store read the row once the lock was held: another replica may
                # have moved the transaction since this image was cached.
                if current is not None and current.revision != rt.row.revision:
                    rt = await self._catch_up(rt, current)
                try:
                    yield rt
                except RevisionConflict:
                    await self._reload(rt)
                    raise
        finally:
            self._in_flight -= 1

    async def _finish_interrupted(self, rt: TxRuntime) -> None:
        """Finish a step or rewind a dead process left behind (``recovery.py``); the caller
        holds the transaction's lock. Here: nothing to do."""

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
        steps = await self.store.load_steps(tx_id, live_only=False)
        for st in steps:
            rt.note_reads(st.detail.get("reads", ()))
            if st.live and st.status == StepStatus.SUCCESS.value:
                self._apply_step(rt, st, graph=False)
        self._advance_counters(rt)
        rt.undo = [u for u in await self.store.load_undo(tx_id) if u.status != "done"]
        for st in sorted(rt.steps.values(), key=lambda st: st.step_id):
            rt.add_to_graph(*graph_step(st))
        return rt

    @staticmethod
    def _apply_step(rt: TxRuntime, st: StepRow, *, graph: bool) -> None:
        """Add one live, successful step row to the image."""
        rt.steps[st.step_id] = st
        rt.outputs[st.step_id] = json.loads(st.output_json) if st.output_json else None
        rt.apply_writes(st.step_id, [(w[0], w[1], int(w[2])) for w in st.detail.get("w", ())])
        rt.staged.extend(
            StagedEffect(st.step_id, fx[0], fx[1], fx[2]) for fx in st.detail.get("fx", ())
        )
        if graph:
            rt.add_to_graph(*graph_step(st))

    @staticmethod
    def _advance_counters(rt: TxRuntime) -> None:
        # Successful steps do not rewrite the body (one small UPDATE per step), so the counters
        # they advance are recomputed here from the steps themselves.
        if rt.steps:
            rt.ctl.furthest_step = max(rt.ctl.furthest_step, max(rt.steps))
            seq = max(st.seq for st in rt.steps.values())
            if seq > int(rt.body.get("step_seq", 0)):
                rt.body["step_seq"] = seq

    async def _catch_up(self, rt: TxRuntime, current: TxRow) -> TxRuntime:
        """Bring a stale image up to ``current`` (the row another replica moved on).

        The common case — calls spread over replicas, each step landing on another one — is
        that the others only appended successful steps: then the new step rows are read and
        applied (O(steps since), not O(transaction)). Anything else (a failure, a rewind, an
        outside effect, an end) changed the body or broke the run of step ids: reload."""
        cached = rt.row
        appended = (
            current.status == cached.status == TxStatus.ACTIVE.value
            and current.next_step_id > cached.next_step_id
            and _same_body(current.body, cached.body)
        )
        if appended:
            new = await self.store.load_steps(
                rt.id, live_only=False, after_seq=int(cached.body.get("step_seq", 0))
            )
            expected = list(range(cached.next_step_id, current.next_step_id))
            if [st.step_id for st in new] == expected and all(
                st.live and st.status == StepStatus.SUCCESS.value and "undo" not in st.detail
                for st in new
            ):
                current.body["step_seq"] = cached.body.get("step_seq", 0)
                rt.row = current
                for st in new:
                    rt.note_reads(st.detail.get("reads", ()))
                    self._apply_step(rt, st, graph=True)
                self._advance_counters(rt)
                return rt
        return await self._reload(rt)

    async def _reload(self, rt: TxRuntime) -> TxRuntime:
        fresh = await self._load(rt.id)
        fresh.lock = rt.lock  # callers hold this lock
        self._runtimes[rt.id] = fresh
        return fresh

    def _evict(self, rt: TxRuntime) -> None:
        if TxStatus(rt.row.status).terminal:
            self._runtimes.pop(rt.id, None)

    # ------------------------------------------------------------------ execute_step

    def _step_row(
        self, rt: TxRuntime, att: Attempt, status: str, *, live: bool, detail: dict[str, Any]
    ) -> StepRow:
        if att.references:
            # Kept on every attempt, so the graph can be rebuilt from any row that becomes live.
            detail = {
                "refs": [[r.step_id, list(r.path), list(r.arg_path)] for r in att.references],
                **detail,
            }
        if att.request_id:
            detail = {**detail, "rid": att.request_id}
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

    def _applied(self, rt: TxRuntime, update: TxUpdate, revision: int) -> None:
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
        self.events.publish(
            event_for(rt.id, revision, TxStatus(update.status), update.next_step_id, update.now)
        )

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
        body = {k: v for k, v in body.items() if k != "rewind"}  # the plan is done
        update = self._update(rt, final, next_step, body, from_statuses, touch=True)
        self._applied(rt, update, await self.store.finish_rewind(update, target, failed_row))
        rt.drop_from(target)
        self._evict(rt)
        return errors, len(to_undo)

    async def _compensate(self, rt: TxRuntime, rows: list[UndoRow]) -> list[str]:
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
                    result = handler(UndoContext(rt.id, row), **json.loads(row.args_json))
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


OUTSIDE_EFFECTS = frozenset(e.value for e in EffectClass if e.outside)


class UndoContext:
    """What an undo handler receives as ``ctx``."""

    def __init__(self, tx_id: str, row: UndoRow) -> None:
        self.transaction_id = tx_id
        self.step_id = row.step_id
        self.idempotency_key = row.idempotency_key


def _same_body(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal apart from ``step_seq``, which a cached image advances without writing it."""
    return {k: v for k, v in a.items() if k != "step_seq"} == {
        k: v for k, v in b.items() if k != "step_seq"
    }


def dumps_json(value: Any) -> str:
    return compact(value)


_CORE_DIR = os.path.dirname(os.path.abspath(__file__))


def error_text(exc: BaseException) -> str:
    """The tool's exception as the raw error the hint cleaner reads: its message and the
    traceback from the tool's own frames on (the engine's frames say nothing about the
    failure and would only cost the cleaner time)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CORE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def add_constraint(constraints: list[str], hint: str, cap: int) -> list[str]:
    """De-duplicated, insertion-ordered, at most ``cap`` (oldest evicted)."""
    if hint in constraints:
        return constraints
    constraints.append(hint)
    return constraints[-cap:]
