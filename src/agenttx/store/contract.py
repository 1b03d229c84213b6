"""The ``Store`` contract: every durable operation AgentTx performs.

Each method is one atomic unit: it either happens completely and durably (at the store's
durability setting) before it returns, or not at all. Methods that change a transaction take a
``TxUpdate``: a compare-and-set on the row's ``revision`` and current ``status``; when it does
not match, the whole unit is rolled back and ``RevisionConflict`` is raised. That is what lets
several replicas share one database safely.

Failures, the same for every method unless its docstring says more:

- ``RevisionConflict`` (an ``Aborted``): the compare-and-set did not match; nothing of the
  unit happened, and the message says what the row holds now.
- ``InternalError``: the store failed (a driver error, I/O, the store is closed), re-raised
  ``from`` the driver's exception. The unit is rolled back — but if the connection died while
  the database was committing, the caller cannot know whether it committed: it happened
  entirely or not at all, never in part, and a reload tells which.
- Reads change nothing, so a failed read may simply be retried.

Rows carry JSON as text (``*_json``) so every backend stores the exact bytes the engine wrote.
Version numbers of managed state come from one commit sequence per store: a key never written
has version 0; each commit gets the next number, and a transaction's snapshot is the sequence
value when it began.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from agenttx.audit import Anchor, AuditEvent, AuditRecord, ChainHead


@dataclass(slots=True)
class TxRow:
    """One transaction. ``body`` holds the engine's JSON state (policy, controller counters,
    constraints, rewind plan …); columns hold what stores filter or compare on."""

    id: str
    tenant: str
    agent_id: str
    status: str
    revision: int  # grows by exactly one per durable change
    next_step_id: int
    snapshot: int  # commit sequence when the transaction began
    isolation: str
    body: dict[str, Any]
    created_at: float
    updated_at: float
    last_activity_at: float  # last call by a client; the idle reaper compares against it
    # The audit chain's watermark: every step row with ``seq <= audit_seq`` has its records in
    # the chain; the successful steps after it are pending (``docs/audit.md``). Written only
    # by writes that carry records.
    audit_seq: int = 0


@dataclass(frozen=True, slots=True)
class TxUpdate:
    """A compare-and-set on a transaction row.

    Applies iff the row's revision equals ``expected_revision`` and its status is one of
    ``from_statuses``; then sets the fields below and ``revision = expected_revision + 1``.
    ``body`` None keeps the stored body (the common step: nothing but the counters moved).
    ``audit``: the records of the event this update is, chained after the transaction's head;
    every method that applies the update inserts them in the same unit, or nothing.
    ``audit_seq`` > 0: the row's ``audit_seq`` is set to it in the same unit (the records
    cover every step row up to it); 0 leaves it.
    """

    tx_id: str
    expected_revision: int
    from_statuses: tuple[str, ...]
    status: str
    next_step_id: int
    body: dict[str, Any] | None
    now: float
    touch_activity: bool = True
    audit: tuple[AuditRecord, ...] = ()
    audit_seq: int = 0


@dataclass(slots=True)
class StepRow:
    """One attempt of one step. ``seq`` orders attempts within a transaction; ``live`` is true
    iff the attempt is part of the transaction's current state (not failed, not rewound)."""

    tx_id: str
    seq: int
    step_id: int
    attempt: int
    epoch: int
    tool: str
    effect: str
    status: str  # RUNNING, SUCCESS, FAILED, OUTCOME_UNKNOWN
    live: bool
    arguments_json: str
    output_json: str
    raw_context: str
    # hint, category, references, state reads, and for a successful step its writes
    # ``w: [[key, value_json|None, base_version]]`` and staged effects
    # ``fx: [[channel, payload_json, idempotency_key]]``: one row per step keeps a step one
    # insert, and a rewind is "mark these rows not live".
    detail: dict[str, Any]
    started_at: float
    finished_at: float
    lease_owner: str = ""
    lease_until: float = 0.0


@dataclass(frozen=True, slots=True)
class StagedEffect:
    step_id: int
    channel: str
    payload_json: str
    idempotency_key: str


@dataclass(slots=True)
class UndoRow:
    """A compensation, persisted before the outside call it undoes."""

    id: int
    tx_id: str
    step_id: int
    handler: str  # name of the registered undo handler
    args_json: str
    idempotency_key: str
    status: str  # pending, done, failed
    attempts: int
    last_error: str
    created_at: float


@dataclass(slots=True)
class OutboxRow:
    id: int
    tenant: str
    tx_id: str
    step_id: int
    channel: str
    payload_json: str
    idempotency_key: str
    status: str  # pending, delivering, delivered, dead
    attempts: int
    next_attempt_at: float  # when a pending row is due; a dead row's last attempt
    last_error: str
    created_at: float
    delivered_at: float


@dataclass(frozen=True, slots=True)
class StoredReply:
    """The reply to a mutating request, kept so a retry with the same ``request_id`` gets it.

    A reply with an empty ``reply_json`` is a **claim**: the id is bound to this method and
    payload while the call runs (a step about to make an outside call takes one in
    ``start_step``, so no other request can take the id once the outside call may have
    happened); storing the real reply later fills it in."""

    request_id: str
    method: str
    payload_hash: str  # sha256 of the canonical request: same id + other payload is refused
    reply_json: str  # "" iff this is a claim, not a reply yet
    created_at: float
    # The transaction the call acted on: the one a begin made, the one a step, commit,
    # rollback, undo or redo named (even when it refused the call). "" iff a begin made none
    # (it was refused), or the reply was stored before schema 6 recorded it.
    tx_id: str = ""

    @property
    def claimed_only(self) -> bool:
        """True iff this is a claim whose call has not stored its reply (yet)."""
        return not self.reply_json


@dataclass(frozen=True, slots=True)
class HeldTx:
    """What a store read once ``transaction_lock`` held the transaction."""

    # The transaction's row as it is now. None: no such transaction — or, from a store that
    # can tell (SQLite's data_version), nobody else has written the store since it last
    # handed this transaction's row out under this lock, so the caller's image is current.
    row: TxRow | None
    reply: StoredReply | None  # what is stored for the request id asked about (None: nothing)
    audit_head: ChainHead | None = None  # the transaction's audit chain head, read with the row


@dataclass(frozen=True, slots=True)
class VersionCheck:
    """Commit validation: conflict iff the latest committed version of ``key`` > ``max_version``."""

    key: str
    max_version: int
    kind: str  # "write" or "read": which set the key came from, for the error message


@dataclass(frozen=True, slots=True)
class CommitPlan:
    """What ``Store.commit`` does in one database transaction.

    If every check passes: publish ``writes`` at a new version, put ``effects`` in the
    outbox, apply ``on_success`` and drop the undo log, except the records ``keep_undo``
    names. Otherwise apply ``on_conflict``
    instead and publish nothing.

    ``claim_until`` > 0: the effects go in already claimed (``delivering``, leased until
    then) by the committing call, which delivers them next — so no background dispatcher
    takes them first, and the reply can say what went out. If that call dies, the lease
    expires and any dispatcher delivers them. 0: they go in ``pending``.
    """

    tenant: str
    writes: dict[str, str | None]
    effects: Sequence[StagedEffect]
    checks: Sequence[VersionCheck]
    on_success: TxUpdate
    on_conflict: TxUpdate
    claim_until: float = 0.0
    # The commit's reply under its request id, stored iff the commit succeeds (not on a
    # conflict, whose reply is an error the caller stores once the abort has finished).
    reply: StoredReply | None = None
    # (undo id, end of its compensation window): undo records a successful commit keeps for
    # a later compensation instead of dropping them; ``prune_kept_undo`` deletes them then.
    keep_undo: Sequence[tuple[int, float]] = ()


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    committed: bool
    version: int  # the version the writes were published at (0 if not committed)
    revision: int  # the transaction's revision after the update that was applied
    conflicts: list[VersionCheck] = field(default_factory=list)
    outbox: list[OutboxRow] = field(default_factory=list)  # the rows the commit enqueued

    @property
    def outbox_ids(self) -> list[int]:
        return [row.id for row in self.outbox]


@dataclass(slots=True)
class ReceiptRow:
    """A preview's receipt (``docs/safety.md``): bound to the change hash and the revision it
    was made at. ``status`` is ``issued``, ``approved`` or ``refused``; it leaves ``issued``
    once, by a compare-and-set (``approve_receipt``, ``refuse_receipt``), so of two decisions
    exactly one wins. ``expired`` and ``voided`` are never stored: reads compute them from
    ``expires_at`` and the transaction's row."""

    id: str
    tx_id: str
    tenant: str
    revision: int
    change_hash: str
    status: str
    created_at: float
    expires_at: float
    # Who decided and when: the approver (status ``approved``) or the refuser (``refused``);
    # "" and 0 while ``issued``.
    approved_by: str = ""
    approved_at: float = 0.0
    # The preview's facts kept with it: counts, whether approval was required and why; a
    # refusal adds ``refusal_reason``.
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def refusal_reason(self) -> str:
        """Why it was refused ("" unless ``status`` is ``refused``)."""
        return str(self.detail.get("refusal_reason", ""))


class Store(abc.ABC):
    """Durable operations. All are coroutines; each is atomic, and fails as the module
    docstring says, unless stated otherwise."""

    url: str
    # True iff other processes (replicas) serve the same transactions concurrently, so an
    # in-memory image must be checked against the store before it is trusted.
    shared: bool = False
    # True iff no other process had this store open when it was opened: outbox claims found
    # then are a dead predecessor's (``release_claims``). Set by ``open``; a shared store's
    # value is never used.
    opened_alone: bool = True

    def set_concurrency_hint(self, in_flight: Callable[[], int]) -> None:
        """Told by the engine how many calls it has in flight, for stores that batch writes
        (group commit) only when there is company. The default ignores it. Never fails."""
        return

    def transaction_lock(
        self, tx_id: str, timeout_s: float, *, request: tuple[str, str] | None = None
    ) -> AbstractAsyncContextManager[HeldTx | None]:
        """Hold ``tx_id`` against other processes for the duration of one call; raises
        ``DeadlineExceeded`` after ``timeout_s`` (nothing held). Waiting must not poll: the
        database wakes the waiter. A shared store yields a ``HeldTx``: the transaction's row
        as read once the lock is held, so the caller can tell whether its cached image is
        current, and, if ``request`` (tenant, request id) is given, what is stored for that
        request id, read after the lock is held too — both without another round trip. The
        lock is released when the block ends, however it ends; if releasing fails, the session
        holding it is closed, which releases it too. The default holds nothing and yields None
        (one process per store: the cache is authoritative, and the caller looks the request
        up with ``get_request``). A file store several processes may open (SQLite) yields None
        while it is alone on its file, and otherwise holds a lock those processes share and
        yields a ``HeldTx``, whose row is None when it knows nobody else wrote since it last
        handed the row out; its wait polls (file locks offer no wake-up an event loop can
        await), which only calls on one transaction in two processes at once ever do."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, then create or migrate the schema. Safe to call from several processes
        at once (they serialise on the migration). Fails fast with ``InternalError`` naming
        the store and the driver's reason (unreachable host, missing database, refused
        login, a schema newer than this code); nothing stays open after a failure."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush pending writes and release connections. Safe to call twice."""

    # -- transactions -----------------------------------------------------------------------

    @abc.abstractmethod
    async def create_transaction(
        self, row: TxRow, reply: StoredReply | None = None, audit: Sequence[AuditRecord] = ()
    ) -> TxRow:
        """Insert a new transaction, and ``audit`` (its first records) in the same unit;
        ``row.snapshot`` is replaced by the current commit sequence inside the same unit, so
        the snapshot and the insert agree. An existing id
        is an ``InternalError`` (ids are random; nothing is written).

        ``reply`` (the begin's reply under its request id) is stored in the same unit: one
        commit, and on a networked store the same statement. If its request id already holds
        a reply or a claim, ``AlreadyExists`` is raised and nothing is written — neither the
        transaction nor the reply (the first request with an id wins)."""

    @abc.abstractmethod
    async def get_transaction(self, tx_id: str) -> TxRow | None:
        """The row, or None. Not a lock: the revision is what later updates compare."""

    @abc.abstractmethod
    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        tenant: str | None = None,
        idle_before: float | None = None,
        limit: int = 100,
        after_id: str = "",
        newest_first: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[TxRow]:
        """Up to ``limit`` rows, oldest first (by ``created_at``, then ``id``), filtered;
        ``idle_before`` keeps rows with last activity before it; ``created_after`` /
        ``created_before`` keep rows created at or after / before that time. ``newest_first``
        reverses the order (``after_id`` then continues towards older rows).

        ``after_id`` continues a listing after that transaction (the last row of the
        previous page): a row's creation time never changes, so a listing continued this way
        neither repeats nor skips a row that existed when it began, whatever changed in
        between. An ``after_id`` that names no transaction raises ``InvalidArgument``. A
        read: it sees one consistent state of the store."""

    @abc.abstractmethod
    async def update_transaction(self, update: TxUpdate) -> int:
        """Compare-and-set the row; returns the new revision; raises ``RevisionConflict``."""

    # -- steps, journal, undo log, staged effects ------------------------------------------

    @abc.abstractmethod
    async def load_steps(
        self, tx_id: str, *, live_only: bool, after_seq: int = 0, large: bool = False
    ) -> list[StepRow]:
        """Attempts ordered by ``seq``; only those with ``seq > after_seq`` (live ones only if
        ``live_only``). A read of one consistent state. ``large``: the caller expects a long
        history (many attempts): fetching and decoding megabytes of rows must not hold the
        event loop, so the store does that work on a thread of its own, at the price of a
        thread hop a short read would not be worth."""

    @abc.abstractmethod
    async def load_undo(self, tx_id: str) -> list[UndoRow]:
        """Undo records of the transaction (any status), ordered by id."""

    @abc.abstractmethod
    async def start_step(
        self, update: TxUpdate, step: StepRow, claim: StoredReply | None = None
    ) -> int:
        """Atomically: CAS the transaction, insert ``step`` (status RUNNING, with a lease);
        returns the new revision. On ``RevisionConflict`` no step row is written.

        Used before a tool with an outside effect runs, so a crash leaves evidence.
        ``claim`` (a ``StoredReply`` with no reply yet) binds the request id to this request
        in the same unit, before the outside call: it is inserted, or takes over a claim of
        the same method and payload (a retry after a crash). If the id holds anything else,
        ``AlreadyExists`` is raised and nothing of the unit happened — so the tool never runs
        under an id another request owns."""

    @abc.abstractmethod
    async def finish_step(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None = None
    ) -> int:
        """Atomically: CAS the transaction, insert or replace the attempt ``step`` (same
        ``seq``: a RUNNING row becomes final). Returns the new revision. On
        ``RevisionConflict`` the step row is not written either. The hot path of every step:
        one database transaction, and on a networked store one round trip.

        ``reply`` (the step's reply under its request id) is inserted in the same unit: one
        commit, and on a networked store the same statement, so a step and its reply are
        durable together or not at all. The insert is "first wins": if the id already holds a
        reply or a claim, ``AlreadyExists`` is raised and nothing of the unit happened (the
        step is not written either). A step that claimed its id in ``start_step`` stores its
        reply with ``put_request`` instead, which fills the claim in."""

    async def lock_and_finish_step(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None, timeout_s: float
    ) -> int:
        """``finish_step`` for a caller that does not hold ``transaction_lock``: the unit takes
        the transaction's lock itself (``DeadlineExceeded`` after ``timeout_s``, nothing
        written) and applies the write under it, so it waits for a call holding the lock
        elsewhere and its compare-and-set then sees whatever that call wrote. What a caller
        read before the lock is validated by the compare-and-set alone: ``RevisionConflict``
        (or ``AlreadyExists`` for a taken request id, or a taken audit position) and nothing
        happened. The engine uses it for a step whose tool touches managed state only
        (``docs/stores.md``). The default holds the lock around ``finish_step``; a networked
        store does it in one round trip."""
        async with self.transaction_lock(update.tx_id, timeout_s):
            return await self.finish_step(update, step, reply)

    @abc.abstractmethod
    async def append_undo(self, row: UndoRow) -> int:
        """Durably record a compensation; returns its id (``row.id`` is ignored). Must be
        durable before return: the caller performs the outside call right after, and must
        not make it if this raised."""

    @abc.abstractmethod
    async def set_undo_status(
        self,
        undo_id: int,
        status: str,
        attempts: int,
        error: str,
        audit: Sequence[AuditRecord] = (),
        *,
        audit_seq: int = 0,
    ) -> None:
        """Record the result of running a compensation (an unknown id changes nothing), with
        ``audit`` (the compensation's record) in the same unit, and ``audit_seq`` (> 0) as its
        transaction's watermark (``TxUpdate.audit_seq``)."""

    @abc.abstractmethod
    async def finish_rewind(
        self, update: TxUpdate, target_step: int, failed_step: StepRow | None = None
    ) -> int:
        """Atomically: CAS the transaction; record ``failed_step`` (the attempt that caused the
        rewind) if given; mark the attempts of steps ``>= target_step`` not live (their writes
        and staged effects go with them); delete their undo records that are done (failed
        ones stay as evidence). ``target_step`` 0 or 1 drops everything. Returns the new
        revision. On ``RevisionConflict`` none of it happened."""

    @abc.abstractmethod
    async def commit(self, plan: CommitPlan) -> CommitOutcome:
        """Validate and publish in one database transaction (see ``CommitPlan``). A conflict
        is not an error: it applies ``on_conflict`` and says which checks failed. A
        ``RevisionConflict`` on either update leaves everything as it was: no version
        published, no effect queued. ``plan.reply`` is stored with a successful commit, in
        the same transaction, first wins: if its id already holds a reply or a claim,
        ``AlreadyExists`` is raised and nothing was published."""

    # -- managed state ----------------------------------------------------------------------

    @abc.abstractmethod
    async def read_state(
        self, tenant: str, key: str, at_version: int | None
    ) -> tuple[str | None, int]:
        """``(value_json, version)`` of the newest committed version ``<= at_version`` (newest
        of all when None); value None when absent or deleted; version 0 if never written."""

    @abc.abstractmethod
    async def current_version(self) -> int:
        """The commit sequence: the version of the newest commit."""

    @abc.abstractmethod
    async def oldest_open_snapshot(self) -> int | None:
        """The smallest snapshot of a transaction that has not ended, or None if none is open:
        versions older than what it can see are safe to prune."""

    @abc.abstractmethod
    async def prune_versions(self, horizon: int) -> int:
        """Delete committed versions no snapshot ``>= horizon`` can see; returns rows removed.
        One statement: concurrent commits and reads are unaffected."""

    # -- outbox -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_outbox(
        self, *, now: float, lease_secs: float, limit: int, ids: Sequence[int] = ()
    ) -> list[OutboxRow]:
        """Mark up to ``limit`` due rows (``pending`` with ``next_attempt_at <= now``, or
        ``delivering`` whose lease expired; only ``ids`` if given) as ``delivering`` until
        ``now + lease_secs`` and return them, ordered by id. Two claimers never get the same
        row while its lease holds; a claim that fails leased nothing."""

    @abc.abstractmethod
    async def settle_outbox(
        self,
        row_id: int,
        *,
        status: str,
        attempts: int,
        next_attempt_at: float,
        error: str,
        now: float,
        audit: AuditEvent | None = None,
    ) -> None:
        """Record a delivery attempt: ``delivered``, ``pending`` (retry later) or ``dead``.
        If it fails the row stays claimed, and is claimed again when its lease expires.
        ``audit`` (the attempt's event) is appended to its transaction's chain in the same
        unit: deliveries run outside the transaction's lock, so the store places it after the
        chain's head itself, serialised with other appends to that chain."""

    @abc.abstractmethod
    async def list_outbox(
        self,
        *,
        statuses: Sequence[str] = (),
        tx_id: str | None = None,
        limit: int = 1000,
        after_id: int = 0,
        ids: Sequence[int] = (),
        tenant: str | None = None,
        owner: str | None = None,
    ) -> list[OutboxRow]:
        """Outbox rows, oldest first: with ``id > after_id`` (a page's continuation), of
        these ``ids`` and this ``tenant`` if given, and, with ``owner``, only rows whose
        transaction (its row still stored) that principal began. One read."""

    async def wait_for_outbox(self, timeout_s: float) -> bool:
        """Wait until another process queues effects, or ``timeout_s``; True if woken.
        Stores shared by replicas wake their dispatchers this way; the default only waits.
        A lost notification connection is an ``InternalError``; the next call reconnects."""
        await asyncio.sleep(timeout_s)
        return False

    @abc.abstractmethod
    async def outbox_counts(self) -> dict[str, int]:
        """Rows per status (pending, delivering, delivered, dead); absent statuses are 0."""

    @abc.abstractmethod
    async def requeue_outbox(self, row_id: int, *, now: float) -> bool:
        """Move a dead row back to pending (an operator retried it); False if not dead."""

    @abc.abstractmethod
    async def release_claims(self, *, now: float) -> int:
        """Put every claimed row (``delivering``) back to ``pending``, due at ``now``; returns
        how many. For a store one process serves, at start-up: whoever held the claims is
        gone, so their rows need not wait out the lease. Never on a shared store."""

    # -- audit chains -----------------------------------------------------------------------

    # Records are appended with the write of the event they record (``TxUpdate.audit``,
    # ``create_transaction``, ``set_undo_status``, ``settle_outbox``); nothing AgentTx does
    # updates one, and only retention deletes them, a whole chain at a time (``prune_audit``).
    # A successful state-only step's record waits (pending) for the next such write, which
    # chains it first and moves the transaction's ``audit_seq`` past it in the same unit
    # (``audit_seq`` > 0 on the methods below; ``docs/audit.md``).

    @abc.abstractmethod
    async def append_audit(self, records: Sequence[AuditRecord], *, audit_seq: int = 0) -> None:
        """Append records of an event that has no other write, as one unit (with
        ``audit_seq`` > 0, setting the transaction's watermark to it in the same unit). A
        position already taken is a ``RevisionConflict`` (someone else appended; reload the
        head)."""

    @abc.abstractmethod
    async def load_audit(
        self, tx_id: str, *, after_seq: int = 0, limit: int = 10_000
    ) -> list[AuditRecord]:
        """Up to ``limit`` records of the chain with ``seq > after_seq``, in order. A read."""

    @abc.abstractmethod
    async def audit_head(self, tx_id: str) -> ChainHead:
        """The chain's newest record (``ChainHead(0, "")`` if it has none). A read."""

    @abc.abstractmethod
    async def audit_anchor(self, tx_id: str) -> Anchor:
        """What the transaction row and outbox say the chain must reach (``Anchor``), and how
        many successful steps after the row's ``audit_seq`` wait to be chained. A read."""

    @abc.abstractmethod
    async def list_audited(self, *, after_id: str = "", limit: int = 500) -> list[str]:
        """Ids of transactions that have a chain or a row (either may be gone), in id order,
        after ``after_id``. A read."""

    # -- receipts (preview and approval) ----------------------------------------------------

    @abc.abstractmethod
    async def put_receipt(
        self, row: ReceiptRow, audit: Sequence[AuditRecord] = (), *, audit_seq: int = 0
    ) -> None:
        """Insert a receipt, and ``audit`` (the preview's record) in the same unit. The
        transaction's revision is not touched: a preview changes none (``audit_seq`` > 0 sets
        only its watermark)."""

    @abc.abstractmethod
    async def get_receipt(self, receipt_id: str) -> ReceiptRow | None:
        """The receipt, or None: by its primary key, with its transaction and tenant — also
        how a transaction is found by a receipt id. A read."""

    @abc.abstractmethod
    async def approve_receipt(
        self,
        receipt_id: str,
        *,
        approved_by: str,
        at: float,
        audit: Sequence[AuditRecord] = (),
        audit_seq: int = 0,
    ) -> bool:
        """Compare-and-set the receipt from ``issued`` to ``approved`` with ``audit`` (the
        approval's record, and ``audit_seq`` > 0 as the transaction's watermark) in the same
        unit; False, with nothing written, iff it was not ``issued`` any more (approved
        already: the second of two approvals loses)."""

    @abc.abstractmethod
    async def refuse_receipt(
        self,
        receipt_id: str,
        *,
        refused_by: str,
        at: float,
        detail: dict[str, Any],
        audit: Sequence[AuditRecord] = (),
        audit_seq: int = 0,
    ) -> bool:
        """Compare-and-set the receipt from ``issued`` to ``refused``, recording ``refused_by``
        and ``at`` as its decision and ``detail`` (the row's, with the reason) whole, with
        ``audit`` (the refusal's record) in the same unit; False, with nothing written, iff it
        was not ``issued`` any more (approved or refused already: the later decision loses)."""

    @abc.abstractmethod
    async def list_receipts(self, tx_id: str, *, limit: int) -> list[ReceiptRow]:
        """The transaction's newest ``limit`` receipts, newest first. A read."""

    @abc.abstractmethod
    async def read_states(
        self, tenant: str, keys: Sequence[str]
    ) -> dict[str, tuple[str | None, int]]:
        """``read_state`` of many keys at once, at the newest committed version: each key
        present in the result, ``(None, 0)`` if never written. One consistent read."""

    # -- request idempotency ----------------------------------------------------------------

    # Request ids are unique per tenant. Three writes store a reply in the unit of the
    # operation that produced it (``create_transaction``, ``finish_step``, ``commit``), so
    # the common call costs no write of its own; ``start_step`` claims an id before an
    # outside call; ``put_request`` stores the replies of everything else (failures,
    # rewinds, rollbacks, refusals, a commit that delivered effects) as a write of its own.

    @abc.abstractmethod
    async def get_request(self, tenant: str, request_id: str) -> StoredReply | None:
        """The reply (or claim) stored for ``request_id``, if any, with the transaction its
        call acted on (``tx_id``, as written): a read by the primary key, which is also how a
        transaction is found by a request id. A read."""

    @abc.abstractmethod
    async def put_request(self, tenant: str, reply: StoredReply) -> StoredReply:
        """Store a reply unless its id holds one already, filling in a claim of the same
        method and payload; returns what is stored (the earlier reply wins, so two racing
        retries agree): ``reply`` itself when this call stored it. Not one unit with the
        caller's other writes: a failure after the caller's step was written leaves the step
        durable and no reply stored (the step row's request id covers that window)."""

    @abc.abstractmethod
    async def prune_requests(self, older_than: float) -> int:
        """Forget replies stored before ``older_than``; returns how many."""

    # -- undo records kept after a commit ---------------------------------------------------

    @abc.abstractmethod
    async def prune_kept_undo(self, now: float) -> int:
        """Delete the undo records a commit kept (``CommitPlan.keep_undo``) whose window
        ended at or before ``now``; returns how many. One unit."""

    # -- retention (``docs/security.md``) --------------------------------------------------

    @abc.abstractmethod
    async def prune_ended(self, ended_before: float, *, limit: int = 500, now: float = 0.0) -> int:
        """Delete up to ``limit`` ended transactions (terminal status, last changed before
        ``ended_before``) with their steps (and context), undo rows and preview receipts, each
        transaction in one unit; one whose outbox still holds an undelivered effect is kept
        (its delivery writes to it). Their audit chains stay, and the same unit leaves each a
        tombstone: the chain's head (seq, hash) at ``now``, which ``audit_anchor`` then
        returns in the row's place. Returns how many were deleted."""

    @abc.abstractmethod
    async def prune_delivered(self, delivered_before: float) -> int:
        """Delete outbox rows delivered before ``delivered_before``; pending and dead ones
        stay (dead ones have ``prune_dead``). Returns how many."""

    @abc.abstractmethod
    async def prune_dead(self, died_before: float) -> int:
        """Delete the dead outbox rows whose last attempt (``next_attempt_at``: a dead row is
        never attempted again, so the dispatcher sets it to the attempt that killed it) was
        before ``died_before``, unless their transaction is still open (not terminal). One
        statement; a row retried meanwhile is pending, not dead, and stays. Returns how
        many."""

    @abc.abstractmethod
    async def prune_audit(self, newest_before: float, *, limit: int = 500) -> int:
        """Delete up to ``limit`` whole audit chains whose newest record is older than
        ``newest_before`` and whose transaction row is gone; a chain goes in one statement,
        so it is never left partial, and its tombstone in the same unit. Returns how many
        chains were deleted."""
