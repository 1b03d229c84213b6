"""The transaction images: one cached ``TxRuntime`` per transaction, and the one way to change
a transaction durably.

Invariants:

- At most one image per transaction id in the cache; loading is single-flight, so two calls
  that miss at once share one load.
- An image is trusted only while its ``row.revision`` matches the store. Every durable change
  is a compare-and-set built by ``update`` and mirrored by ``applied``; a change made
  elsewhere (another replica or process) is caught when the transaction is locked
  (``catch_up``) or at the next write (``RevisionConflict``: the image is reloaded before the
  error reaches the caller, so a retry works).
- Calls on one transaction run one at a time (``TxRuntime.lock``, plus the store's
  ``transaction_lock`` for stores shared by several processes).
- An ended transaction's image leaves the cache (``evict``): its history is read from the
  store.
- Every durable change carries its audit records (``TxUpdate.audit``), chained here after the
  image's ``audit_head``, which moves only once the write holding them is durable.
- Except a successful state-only step's: its record is *pending* (``TxRuntime.audit_pending``,
  the step row as written) until the next write that carries records, which chains the
  pending ones first — each exactly as its step's own write would have made it — and moves
  the row's ``audit_seq`` past them (``docs/audit.md``, "Batched step records"). A pending
  record is a function of the stored row and revision, so a load (another process, a
  restart) rebuilds the same list, and the same bytes, from the store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

from agenttx.audit import EMPTY, AuditRecord, ChainHead, chain_records, record_from_text
from agenttx.core.audit import step_event_text
from agenttx.core.config import Clock, EngineConfig
from agenttx.core.controller import ControllerState
from agenttx.core.events import EventBus, event_for
from agenttx.core.limits import check_transaction_id
from agenttx.core.offload import long_history
from agenttx.core.requests import Request
from agenttx.core.runtime import TxRuntime
from agenttx.core.states import check_transition
from agenttx.core.views import graph_step
from agenttx.errors import (
    AgentTxError,
    AlreadyExists,
    InternalError,
    NotFound,
    RevisionConflict,
    StoreFull,
    clip,
)
from agenttx.store.contract import HeldTx, StagedEffect, StepRow, Store, TxRow, TxUpdate
from agenttx.types import Isolation, RollbackPolicy, StepStatus, TxStatus

# One event of the audit chain: its kind (``agenttx.audit.AuditKind``) and data.
Event = tuple[str, Mapping[str, Any]]

# The most step records a transaction keeps pending: the step that would make it this many
# chains them all in its own write, so one write builds at most this many records (about
# 30 µs each on the event loop) and a batch adds a few B-tree pages to one commit.
AUDIT_BATCH = 32
_SUCCESS = StepStatus.SUCCESS.value


class TxImages:
    def __init__(self, store: Store, config: EngineConfig, events: EventBus, clock: Clock) -> None:
        self.store = store
        self.config = config  # read at each call: lock_timeout_s may be tuned on a live engine
        self.events = events  # told of every durable change, after it is durable
        self.clock = clock
        # The images of open transactions this engine has touched, by transaction id.
        self.cache: dict[str, TxRuntime] = {}
        # One lock per transaction being loaded right now (single-flight loads).
        self._loading: dict[str, asyncio.Lock] = {}
        # Calls inside ``locked`` (waiting or running): a store batches writes on it.
        self.in_flight = 0
        store.set_concurrency_hint(lambda: self.in_flight)
        # True iff the store overrides ``transaction_lock`` (a store shared by processes); the
        # default holds nothing, so a call on a one-process store skips it altogether.
        self.store_locks = type(store).transaction_lock is not Store.transaction_lock
        # True iff a state-only step may run without the store's lock and take it with its
        # one write (``Store.lock_and_finish_step`` in one round trip; see ``NeedsLock``).
        self.unheld_steps = (
            self.store_locks and type(store).lock_and_finish_step is not Store.lock_and_finish_step
        )
        # The pending records last built, and for which image, head, revision and count: a
        # commit builds two updates (success, conflict) that chain the same ones first.
        self._sealed_memo: tuple[TxRuntime, ChainHead, int, int, list[AuditRecord]] | None = None

    # ------------------------------------------------------------------ the cache

    def add(
        self,
        row: TxRow,
        policy: RollbackPolicy,
        isolation: Isolation,
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        """The image of a transaction just created (nothing to load), with the records its
        creation appended."""
        rt = TxRuntime(row, policy, isolation, ControllerState())
        if audit:
            rt.audit_head = audit[-1].head
        self.cache[row.id] = rt

    async def get(self, transaction_id: str) -> TxRuntime:
        """The cached image, loaded from the store on a miss (not locked)."""
        check_transaction_id(transaction_id)
        rt = self.cache.get(transaction_id)
        if rt is not None:
            return rt
        lock = self._loading.setdefault(transaction_id, asyncio.Lock())
        async with lock:
            rt = self.cache.get(transaction_id)
            if rt is None:
                rt = await self.load(transaction_id)
                self.cache[transaction_id] = rt
        self._loading.pop(transaction_id, None)
        return rt

    def locked(
        self,
        transaction_id: str,
        lock_timeout_s: float | None = None,
        *,
        request: Request | None = None,
        unheld: bool = False,
    ) -> HeldImage:
        """``async with images.locked(id) as rt``: the transaction's image, held exclusively
        and current with the store (see ``HeldImage``). With ``request``, its stored reply is
        looked up once the lock is held (``ReplyFound`` if there is one). ``unheld`` (only
        where ``unheld_steps``): the image under this process's lock only, as cached — not
        known to be current, the request not looked up; the caller's one write takes the
        store's lock and validates it all (``NeedsLock``)."""
        wait_s = self.config.lock_timeout_s if lock_timeout_s is None else lock_timeout_s
        return HeldImage(self, transaction_id, wait_s, None if unheld else request, unheld)

    async def load(self, transaction_id: str) -> TxRuntime:
        """A fresh image from the store: the row, the live steps, the pending undo records."""
        row = await self.store.get_transaction(transaction_id)
        if row is None:
            raise NotFound(f"transaction `{clip(transaction_id)}` not found")
        rt = TxRuntime(
            row,
            RollbackPolicy.from_dict(row.body.get("policy")),
            Isolation(row.isolation),
            ControllerState.from_dict(row.body.get("controller")),
        )
        steps = await self.store.load_steps(
            transaction_id, live_only=False, large=long_history(row.next_step_id, row.body)
        )
        for st in steps:
            rt.note_reads(st.detail.get("reads", ()))
            if st.live and st.status == StepStatus.SUCCESS.value:
                _apply_step(rt, st, graph=False)
        _advance_counters(rt)
        rt.undo = [u for u in await self.store.load_undo(transaction_id) if u.status != "done"]
        rt.audit_head = await self.store.audit_head(transaction_id)
        if self.config.audit_chain:
            rt.audit_seq = row.audit_seq
            rt.audit_pending = [st for st in steps if _pending(st, row.audit_seq)]
        for st in sorted(rt.steps.values(), key=lambda st: st.step_id):
            rt.add_to_graph(*graph_step(st), chars=len(st.arguments_json) + len(st.output_json))
        return rt

    async def catch_up(self, rt: TxRuntime, current: TxRow) -> TxRuntime:
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
                rt.transaction_id, live_only=False, after_seq=int(cached.body.get("step_seq", 0))
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
                    _apply_step(rt, st, graph=True)
                _advance_counters(rt)
                # The other replica's steps are pending there, so here too (unless it
                # chained them since: the watermark says how far).
                if self.config.audit_chain:
                    rt.audit_pending.extend(st for st in new if _pending(st, current.audit_seq))
                    self.follow_watermark(rt, current.audit_seq)
                return rt
        return await self.reload(rt)

    async def reload(self, rt: TxRuntime) -> TxRuntime:
        """Replace the image by a fresh load; the caller keeps holding ``rt.lock``."""
        fresh = await self.load(rt.transaction_id)
        fresh.lock = rt.lock
        self.cache[rt.transaction_id] = fresh
        return fresh

    def follow_watermark(self, rt: TxRuntime, audit_seq: int) -> None:
        """The stored watermark is ``audit_seq`` (read with the row under the lock): another
        process chained the pending step records up to it."""
        if audit_seq != rt.audit_seq and self.config.audit_chain:
            rt.audit_seq = audit_seq
            rt.audit_pending = [st for st in rt.audit_pending if _pending(st, audit_seq)]

    def evict(self, rt: TxRuntime) -> None:
        if TxStatus(rt.row.status).terminal:
            self.cache.pop(rt.transaction_id, None)

    # ------------------------------------------------------------------ the audit chain

    def chain(
        self,
        rt: TxRuntime | None,
        revision: int,
        at: float,
        *events: Event,
        row: TxRow | None = None,
    ) -> tuple[AuditRecord, ...]:
        """``events`` as the next records of the transaction's chain, made by the change that
        brings it to ``revision``, after the image's pending step records (nothing is written;
        the write that carries them does it, and moves ``audit_seq`` past the pending ones).
        ``row`` instead of ``rt``: a transaction being created, whose chain is empty."""
        if not self.config.audit_chain:
            return ()
        tx_row = rt.row if rt is not None else row
        assert tx_row is not None
        if rt is None:
            head = EMPTY
            sealed: list[AuditRecord] = []
        else:
            sealed = self._sealed(rt) if rt.audit_pending else []
            head = sealed[-1].head if sealed else rt.audit_head
        records = chain_records(
            head,
            tx_id=tx_row.id,
            tenant=tx_row.tenant,
            at=at,
            revision=revision,
            events=events,
            key=self.config.signing_key,
        )
        return (*sealed, *records) if sealed else records

    def step_audit(
        self, rt: TxRuntime, revision: int, at: float, row: StepRow
    ) -> tuple[AuditRecord, ...]:
        """The records of a step row's write: the pending ones, then its own (the hot path:
        nothing is built when the chain is off)."""
        if not self.config.audit_chain:
            return ()
        sealed = self._sealed(rt) if rt.audit_pending else []
        kind, data_text = step_event_text(row)
        record = record_from_text(
            sealed[-1].head if sealed else rt.audit_head,
            tx_id=rt.row.id,
            tenant=rt.row.tenant,
            kind=kind,
            at=at,
            revision=revision,
            data_text=data_text,
            key=self.config.signing_key,
        )
        return (*sealed, record) if sealed else (record,)

    def _sealed(self, rt: TxRuntime) -> list[AuditRecord]:
        """The pending step records, oldest first, exactly as each step's own write would have
        made them: kind and data from the row, ``at`` its ``started_at`` (what a step's write
        records), ``revision`` the one its write made. Since the last write that carried
        records only these steps changed the transaction (every other write chains them), each
        moving the revision by one, the i-th of n pending made ``row.revision - (n - 1 - i)``.
        So only what the store holds goes in, and a process that loads the rows builds the
        same bytes."""
        head = rt.audit_head
        memo = self._sealed_memo
        if (
            memo is not None
            and memo[0] is rt
            and memo[1:4] == (head, rt.row.revision, len(rt.audit_pending))
        ):
            return memo[4]
        tx_id, tenant, key = rt.row.id, rt.row.tenant, self.config.signing_key
        revision = rt.row.revision - len(rt.audit_pending)
        out: list[AuditRecord] = []
        for st in rt.audit_pending:
            revision += 1
            kind, data_text = step_event_text(st)
            rec = record_from_text(
                head,
                tx_id=tx_id,
                tenant=tenant,
                kind=kind,
                at=st.started_at,
                revision=revision,
                data_text=data_text,
                key=key,
            )
            out.append(rec)
            head = rec.head
        self._sealed_memo = (rt, rt.audit_head, rt.row.revision, len(rt.audit_pending), out)
        return out

    def defers(self, rt: TxRuntime) -> bool:
        """True iff a successful state-only step written now leaves its record pending: the
        chain is on and the pending list has room for it (else the step chains them all)."""
        return self.config.audit_chain and len(rt.audit_pending) < AUDIT_BATCH - 1

    def watermark(self, rt: TxRuntime, body: Mapping[str, Any] | None = None) -> int:
        """The ``audit_seq`` a write carrying records sets: every step row so far (``body``:
        the one the write stores, whose ``step_seq`` counts its own step row) is covered, the
        eager ones by their own writes, the pending ones by this one. 0 with the chain off."""
        if not self.config.audit_chain:
            return 0
        seq = int(rt.body.get("step_seq", 0))
        if body is not None:
            seq = max(seq, int(body.get("step_seq", 0)))
        return max(seq, rt.audit_seq)

    def seal_seq(self, rt: TxRuntime) -> int:
        """The ``audit_seq`` of a write that changes no step row nor revision (a preview, a
        compensation's status): past the pending steps it chains, 0 if there are none."""
        return self.watermark(rt) if rt.audit_pending else 0

    async def record(self, rt: TxRuntime, *events: Event) -> None:
        """Append events that come with no other write, after the pending step records (the
        caller holds the lock). With no events: chain the pending records alone (``seal``)."""
        records = self.chain(rt, rt.row.revision, self.clock(), *events)
        if records:
            audit_seq = self.seal_seq(rt)
            await self.store.append_audit(records, audit_seq=audit_seq)
            self.appended(rt, records, audit_seq)

    async def seal(self, rt: TxRuntime) -> None:
        """Chain the pending step records now, in one small write of their own (a reader
        about to show the chain of an active transaction; the caller holds the lock)."""
        if rt.audit_pending:
            await self.record(rt)

    async def seal_active(self, transaction_id: str) -> None:
        """Chain an active transaction's pending step records before its chain is shown
        (``Engine.verify_audit``, ``audit_records``): one small write under its lock, none if
        nothing is pending. An ended or unknown transaction has none (its end chained them)."""
        if not self.config.audit_chain:
            return
        rt = self.cache.get(transaction_id)
        if rt is None:
            row = await self.store.get_transaction(transaction_id)
            if row is None or TxStatus(row.status).terminal:
                return
        elif not rt.audit_pending and not self.store_locks:
            return  # one process: the image is authoritative
        try:
            async with self.locked(transaction_id) as held:
                await self.seal(held)
        except NotFound:
            return  # pruned meanwhile: its chain is what there is

    def appended(self, rt: TxRuntime, records: Sequence[AuditRecord], audit_seq: int = 0) -> None:
        """Mirror records a durable write appended to the chain (``audit_seq``: the
        ``seal_seq`` the write was given)."""
        if records:
            rt.audit_head = records[-1].head
            rt.audit_pending = []  # the write chained them first (``chain``)
            self._sealed_memo = None
            if audit_seq > rt.audit_seq:
                rt.audit_seq = audit_seq

    # ------------------------------------------------------------------ durable changes

    def update(
        self,
        rt: TxRuntime,
        status: TxStatus,
        next_step_id: int,
        body: dict[str, Any] | None,
        from_statuses: tuple[str, ...],
        *,
        touch: bool = True,
        audit: Sequence[Event] = (),
    ) -> TxUpdate:
        """The compare-and-set that moves ``rt`` to ``status`` (checked against the one
        transition table), carrying ``audit`` as its records; nothing is written until a
        store method runs it."""
        check_transition(TxStatus(rt.row.status), status)
        now = self.clock()
        # A write that changes the transaction chains the pending step records even when it
        # has no event of its own: the chain then reaches its revision.
        records = (
            self.chain(rt, rt.row.revision + 1, now, *audit) if audit or rt.audit_pending else ()
        )
        return TxUpdate(
            tx_id=rt.transaction_id,
            expected_revision=rt.row.revision,
            from_statuses=from_statuses,
            status=status.value,
            next_step_id=next_step_id,
            body=body,
            now=now,
            touch_activity=touch,
            audit=records,
            audit_seq=self.watermark(rt, body) if records else 0,
        )

    def applied(self, rt: TxRuntime, update: TxUpdate, revision: int) -> None:
        """Mirror a durable update in the cached row and tell the watchers."""
        row = rt.row
        row.revision = revision
        row.status = update.status
        row.next_step_id = update.next_step_id
        row.updated_at = update.now
        if update.touch_activity:
            row.last_activity_at = update.now
        if update.body is not None:
            row.body = update.body
        if update.audit:
            rt.audit_head = update.audit[-1].head
            rt.audit_pending = []  # chained first by the update (``chain``, ``step_audit``)
            self._sealed_memo = None
            if update.audit_seq > rt.audit_seq:
                rt.audit_seq = update.audit_seq
        if self.events.listened(row.id):
            status = TxStatus(update.status)
            self.events.publish(
                event_for(row.id, revision, status, update.next_step_id, update.now)
            )


class HeldImage:
    """The context of one call on a transaction: its image under ``TxRuntime.lock`` and, on
    a shared store, the store's ``transaction_lock``. If the store's row moved since the image
    was cached (another replica), the image catches up on entry. A call carrying a request id
    looks its stored reply up once the locks are held — on a shared store in the lock's own
    round trip — and ends there with ``ReplyFound`` if there is one. If the call raises
    ``RevisionConflict`` (someone moved the transaction under a durable update) or
    ``AlreadyExists`` (its write was rolled back: the request id was taken), or a store failure
    (``StoreFull``: a full disk; ``InternalError``), the image, which the call may have advanced
    ahead of that write, is reloaded before the error reaches the caller, so a retry works; if
    the store cannot even be read, the image leaves the cache and the next call loads it.

    A class rather than a generator-based context manager: it is entered on every call, and
    this costs a fraction of one (measured on the step path)."""

    __slots__ = (
        "_images",
        "_lock",
        "_request",
        "_rt",
        "_store_lock",
        "_transaction_id",
        "_unheld",
        "_wait_s",
    )

    def __init__(
        self,
        images: TxImages,
        transaction_id: str,
        wait_s: float,
        request: Request | None,
        unheld: bool = False,
    ) -> None:
        self._images = images
        self._transaction_id = transaction_id
        self._wait_s = wait_s
        self._request = request
        self._unheld = unheld  # True iff the store's lock is left to the call's one write
        self._store_lock: AbstractAsyncContextManager[HeldTx | None] | None = None

    async def __aenter__(self) -> TxRuntime:
        images = self._images
        rt = images.cache.get(self._transaction_id)
        if rt is None:
            rt = await images.get(self._transaction_id)
        lock = self._lock = rt.lock  # a reload keeps the lock: release this very one
        images.in_flight += 1
        try:
            await lock.acquire()
            request = self._request
            try:
                if self._unheld:
                    pass  # the call's write takes the store's lock (``NeedsLock``)
                elif images.store_locks:
                    store_lock = images.store.transaction_lock(
                        self._transaction_id,
                        self._wait_s,
                        request=request.key if request is not None else None,
                    )
                    held = await store_lock.__aenter__()
                    self._store_lock = store_lock
                    try:
                        current = held.row if held is not None else None
                        if request is not None:
                            # None: the store holds nothing for now (SQLite alone on its
                            # file), so its reply is looked up as a one-process store's is.
                            request.check(
                                held.reply
                                if held is not None
                                else await images.store.get_request(*request.key)
                            )
                        # A shared store read the row once the lock was held: another replica
                        # may have moved the transaction since this image was cached.
                        if current is not None and current.revision != rt.row.revision:
                            rt = await images.catch_up(rt, current)
                        if held is not None and held.audit_head is not None:
                            rt.audit_head = held.audit_head  # read under the lock: current
                            if current is not None:
                                # A write elsewhere that moved no revision (a preview) may
                                # have chained the pending step records.
                                images.follow_watermark(rt, current.audit_seq)
                    except BaseException as exc:
                        await store_lock.__aexit__(type(exc), exc, exc.__traceback__)
                        raise
                elif request is not None:
                    # One process serves the store: under our lock nobody else can store a
                    # reply for this transaction's calls. A read, no write.
                    request.check(await images.store.get_request(*request.key))
            except BaseException:
                lock.release()
                raise
        except BaseException:
            images.in_flight -= 1
            raise
        self._rt = rt
        return rt

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        images = self._images
        try:
            try:
                if exc_type is not None and issubclass(exc_type, _IMAGE_MAY_BE_AHEAD):
                    try:
                        await images.reload(self._rt)
                    except AgentTxError:
                        # Not even a read works: trust nothing cached about this transaction.
                        images.cache.pop(self._transaction_id, None)
            finally:
                if self._store_lock is not None:
                    await self._store_lock.__aexit__(exc_type, exc, tb)
        finally:
            self._lock.release()
            images.in_flight -= 1


class NeedsLock(Exception):
    """Control flow: a call that ran without the store's lock (``locked(unheld=True)``)
    cannot end with its one write — its cached image was stale (the write's compare-and-set
    lost, a request id or audit position was taken) or it needs more than that write (a
    failure, a transaction not ACTIVE, a step id the image does not expect). Raised before
    anything of the call is durable and with the image as it was, so the caller runs the
    call again under the lock, which catches the image up and decides (``steps.py``). Never
    leaves the engine."""


# Errors after which the image may hold what the store refused: a lost compare-and-set, a
# request id taken, a write that failed (full disk, driver error).
_IMAGE_MAY_BE_AHEAD = (RevisionConflict, AlreadyExists, StoreFull, InternalError)


def _apply_step(rt: TxRuntime, st: StepRow, *, graph: bool) -> None:
    """Add one live, successful step row to the image."""
    rt.steps[st.step_id] = st
    rt.outputs[st.step_id] = json.loads(st.output_json) if st.output_json else None
    rt.apply_writes(st.step_id, [(w[0], w[1], int(w[2])) for w in st.detail.get("w", ())])
    rt.staged.extend(
        StagedEffect(st.step_id, fx[0], fx[1], fx[2]) for fx in st.detail.get("fx", ())
    )
    if graph:
        rt.add_to_graph(*graph_step(st), chars=len(st.arguments_json) + len(st.output_json))


def _advance_counters(rt: TxRuntime) -> None:
    # Successful steps do not rewrite the body (one small UPDATE per step), so the counters
    # they advance are recomputed here from the steps themselves.
    if rt.steps:
        rt.ctl.furthest_step = max(rt.ctl.furthest_step, max(rt.steps))
        seq = max(st.seq for st in rt.steps.values())
        if seq > int(rt.body.get("step_seq", 0)):
            rt.body["step_seq"] = seq


def _pending(st: StepRow, audit_seq: int) -> bool:
    """True iff the step row's record is pending: it succeeded after the watermark (every
    other write of a step row chains its records and moves the watermark past it)."""
    return st.seq > audit_seq and st.status == _SUCCESS


def _same_body(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal apart from ``step_seq``, which a cached image advances without writing it."""
    return {k: v for k, v in a.items() if k != "step_seq"} == {
        k: v for k, v in b.items() if k != "step_seq"
    }
