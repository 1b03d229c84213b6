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

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agenttx.core.base import OPEN, Clock, EngineConfig, new_owner
from agenttx.core.controller import ControllerState
from agenttx.core.events import TxEvent, event_for
from agenttx.core.hints import reference_category
from agenttx.core.limits import (
    arguments_text,
    check_begin,
    check_labels,
    check_transaction_id,
)
from agenttx.core.recovery import Maintenance
from agenttx.core.runtime import TxRuntime
from agenttx.core.views import transaction_info
from agenttx.errors import (
    CommitConflict,
    InvalidArgument,
    NotActive,
    NotFound,
    OutcomeUnknownPending,
    WrongStep,
)
from agenttx.store.contract import (
    CommitPlan,
    OutboxRow,
    TxRow,
    VersionCheck,
)
from agenttx.types import (
    BeginResult,
    CommitResult,
    Isolation,
    RollbackPolicy,
    RollbackResult,
    StepResult,
    StepStatus,
    TransactionInfo,
    TransactionPage,
    TxStatus,
)

log = logging.getLogger("agenttx.engine")


class CoreEngine(Maintenance):
    """The transaction engine over a store; ``agenttx.Engine`` adds opening, background work
    (dispatcher, reaper, recovery) and closing."""

    # ------------------------------------------------------------------ public operations
    # Each mutating call may carry a request_id: a retry with the same id and payload returns
    # the stored reply instead of running again (``core/requests.py``).

    async def begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        isolation: Isolation | str = Isolation.SNAPSHOT,
        *,
        labels: Sequence[str] = (),
        request_id: str = "",
    ) -> BeginResult:
        payload = {
            "agent_id": agent_id,
            "metadata": dict(metadata or {}),
            "policy": policy.to_dict() if isinstance(policy, RollbackPolicy) else policy,
            "isolation": str(isolation),
            "labels": list(labels),
        }
        return await self.requests.run(
            request_id,
            "begin",
            payload,
            BeginResult,
            lambda: self._begin(agent_id, metadata, policy, isolation, labels),
        )

    async def execute_step(
        self,
        tx_id: str,
        step_id: int,
        tool_name: str,
        arguments: Any = None,
        raw_context: str = "",
        *,
        request_id: str = "",
    ) -> StepResult:
        args_text = arguments_text(arguments)
        payload = [tx_id, step_id, tool_name, args_text, raw_context]
        # A dict is used as given (no parse of the text just made from it); a string is parsed
        # inside the step, where bad JSON is a step failure with a hint.
        parsed = arguments if isinstance(arguments, dict) else None

        async def call() -> StepResult:
            try:
                return await self._execute_step(
                    tx_id, step_id, tool_name, args_text, raw_context, request_id, parsed
                )
            except (WrongStep, NotActive):
                # The step may have run while its reply was lost (a crash before the reply
                # was stored): its attempt row carries the request id.
                replay = await self._reply_from_rows(tx_id, step_id, request_id)
                if replay is None:
                    raise
                return replay

        return await self.requests.run(request_id, "execute_step", payload, StepResult, call)

    async def commit(self, tx_id: str, *, request_id: str = "") -> CommitResult:
        async def call() -> CommitResult:
            try:
                return await self._commit(tx_id, request_id)
            except NotActive:
                # This very commit may have happened while its reply was lost: the commit
                # records its request id with the outcome, in the same store transaction.
                replay = await self._commit_from_row(tx_id, request_id)
                if replay is None:
                    raise
                return replay

        return await self.requests.run(request_id, "commit", [tx_id], CommitResult, call)

    async def _commit_from_row(self, tx_id: str, request_id: str) -> CommitResult | None:
        if not request_id:
            return None
        row = await self.store.get_transaction(tx_id)
        if row is None or row.body.get("commit_request_id") != request_id:
            return None
        if row.status == TxStatus.FAILED.value:
            raise CommitConflict(tx_id, [], "write").with_message(
                str(row.body.get("abort_reason", "commit conflict"))
            )
        if row.status != TxStatus.COMMITTED.value:
            return None
        live = await self.store.load_steps(tx_id, live_only=True)
        return CommitResult(
            transaction_id=tx_id,
            committed=True,
            steps_committed=sum(1 for s in live if s.status == StepStatus.SUCCESS.value),
            effects_dispatched=0,
            dispatch_errors=[],
            transaction_status=TxStatus.COMMITTED,
            revision=row.revision,
        )

    async def rollback(
        self, tx_id: str, to_step: int | None = None, reason: str = "", *, request_id: str = ""
    ) -> RollbackResult:
        return await self.requests.run(
            request_id,
            "rollback",
            [tx_id, to_step or 0, reason],
            RollbackResult,
            lambda: self._rollback(tx_id, to_step, reason),
        )

    async def watch(self, tx_id: str, after_revision: int = 0) -> AsyncIterator[TxEvent]:
        """The transaction's state changes, newest revision first if it is past
        ``after_revision``, then one event per durable change, until it ends."""
        check_transaction_id(tx_id)
        # Subscribe first, then read the row: a change between the two is not missed.
        queue = self.events.open_queue(tx_id)
        try:
            row = await self.store.get_transaction(tx_id)
            if row is None:
                raise NotFound(f"transaction `{tx_id}` not found")
            last = after_revision
            if row.revision > last:
                last = row.revision
                yield event_for(
                    row.id, row.revision, TxStatus(row.status), row.next_step_id, row.updated_at
                )
            if TxStatus(row.status).terminal:
                return
            while True:
                event = await queue.get()
                if event.revision > last:
                    last = event.revision
                    yield event
                    if event.status.terminal:
                        return
        finally:
            self.events.close_queue(tx_id, queue)

    async def _reply_from_rows(
        self, tx_id: str, step_id: int, request_id: str
    ) -> StepResult | None:
        if not request_id:
            return None
        rows = await self.store.load_steps(tx_id, live_only=False)
        mine = [r for r in rows if r.step_id == step_id and r.detail.get("rid") == request_id]
        if not mine:
            return None
        row = mine[-1]
        tx = await self.store.get_transaction(tx_id)
        assert tx is not None
        constraints = list(tx.body.get("constraints", []))
        if row.status == StepStatus.SUCCESS.value:
            return StepResult(
                transaction_id=tx_id,
                step_id=step_id,
                status=StepStatus.SUCCESS,
                output=json.loads(row.output_json) if row.output_json else None,
                output_json=row.output_json,
                next_step_id=step_id + 1,
                constraints=constraints,
                transaction_status=TxStatus(tx.status),
                revision=tx.revision,
            )
        ended = TxStatus(tx.status).terminal
        return StepResult(
            transaction_id=tx_id,
            step_id=step_id,
            status=StepStatus.FAILED
            if ended
            else StepStatus(
                "OUTCOME_UNKNOWN" if row.status == "OUTCOME_UNKNOWN" else "ROLLBACK_TRIGGERED"
            ),
            clean_hint=str(row.detail.get("hint", "")),
            error_category=str(row.detail.get("category", "")),
            reference_category=reference_category(str(row.detail.get("category", ""))),
            next_step_id=0 if ended else tx.next_step_id,
            constraints=constraints,
            abort_reason=str(tx.body.get("abort_reason", "")) if ended else "",
            transaction_status=TxStatus(tx.status),
            revision=tx.revision,
            hint_key=str(row.detail.get("key", "")),
        )

    async def _begin(
        self,
        agent_id: str = "",
        metadata: Mapping[str, str] | None = None,
        policy: RollbackPolicy | Mapping[str, Any] | None = None,
        isolation: Isolation | str = Isolation.SNAPSHOT,
        labels: Sequence[str] = (),
    ) -> BeginResult:
        meta = dict(metadata or {})
        check_begin(agent_id, meta)
        check_labels(labels)
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
            "labels": list(labels),
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
        return [transaction_info(r, [], []) for r in rows]

    async def list_transactions_page(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        label: str | None = None,
        page_size: int = 50,
        page_token: str = "",
    ) -> TransactionPage:
        """One page of transactions, oldest first; ``page_token`` continues a listing."""
        if not 1 <= page_size <= 500:
            raise InvalidArgument("page_size must be 1..500")
        unknown = [s for s in statuses if s not in TxStatus.__members__]
        if unknown:
            raise InvalidArgument(
                f"unknown status {unknown[0]!r}; use one of {', '.join(TxStatus.__members__)}"
            )
        found: list[TransactionInfo] = []
        after = page_token
        while len(found) < page_size:
            rows = await self.store.list_transactions(
                statuses=statuses, agent_id=agent_id, limit=page_size, after_id=after
            )
            if not rows:
                return TransactionPage(found, "")
            for row in rows:
                after = row.id
                if label is None or label in row.body.get("labels", ()):
                    found.append(transaction_info(row, [], []))
                    if len(found) == page_size:
                        break
            if len(rows) < page_size and len(found) < page_size:
                return TransactionPage(found, "")
        return TransactionPage(found, after)

    def list_tools(self) -> list[dict[str, Any]]:
        return [t.describe() for t in self.registry]

    # ------------------------------------------------------------------ runtime cache

    async def _rollback(
        self, tx_id: str, to_step: int | None = None, reason: str = ""
    ) -> RollbackResult:
        async with self._locked(tx_id) as rt:
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

    async def _commit(self, tx_id: str, request_id: str = "") -> CommitResult:
        async with self._locked(tx_id) as rt:
            status = TxStatus(rt.row.status)
            if status is not TxStatus.ACTIVE:
                raise NotActive(rt.id, status.value, "commit")
            if rt.body.get("outcome_unknown_step"):
                raise OutcomeUnknownPending(rt.id, int(rt.body["outcome_unknown_step"]))
            writes = rt.final_writes()
            checks = self._checks(rt, writes)
            steps_committed = len(rt.steps)
            now = self.clock()
            done_body = dict(rt.body, ended_at=now, commit_request_id=request_id)
            # The reason is durable with the plan: a crash before the abort finishes still
            # leaves a FAILED transaction that says why.
            conflict_body = dict(
                rt.body,
                rewind={"target": 0, "final": TxStatus.FAILED.value},
                abort_reason="commit conflict: another transaction committed first",
                commit_request_id=request_id,
            )
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
                claim_until=self._claim_until(now) if rt.staged else 0.0,
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
        claimed = outcome.outbox if plan.claim_until > 0 else []
        dispatched, dispatch_errors = await self._release(claimed)
        return CommitResult(
            transaction_id=rt.id,
            committed=True,
            steps_committed=steps_committed,
            effects_dispatched=dispatched,
            dispatch_errors=dispatch_errors,
            effects_queued=len(outcome.outbox),
            transaction_status=TxStatus.COMMITTED,
            revision=rt.row.revision,
        )

    def _claim_until(self, now: float) -> float:
        """Hook: the lease a commit takes on its effects for delivering them right after
        (``CommitPlan.claim_until``); 0 leaves them ``pending`` for a dispatcher."""
        return 0.0

    async def _release(self, rows: list[OutboxRow]) -> tuple[int, list[str]]:
        """Hook run after a durable commit with the outbox rows it claimed: (delivered now,
        errors). The core engine claims none (``_claim_until``); ``agenttx.Engine`` delivers
        them through its dispatcher."""
        return 0, []

    def _checks(self, rt: TxRuntime, writes: Mapping[str, str | None]) -> list[VersionCheck]:
        """Commit validation per isolation level (``docs/isolation.md``)."""
        if rt.isolation is Isolation.READ_COMMITTED:
            return [VersionCheck(k, rt.base_versions.get(k, 0), "write") for k in writes]
        checks = [VersionCheck(k, rt.row.snapshot, "write") for k in writes]
        if rt.isolation is Isolation.SERIALIZABLE:
            checks += [
                VersionCheck(k, rt.row.snapshot, "read") for k in rt.read_set if k not in writes
            ]
        return checks

    # ------------------------------------------------------------------ recovery & reaper


__all__ = ["Clock", "CoreEngine", "EngineConfig", "new_owner"]
