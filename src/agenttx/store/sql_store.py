"""The relational store, written once: every contract method both SQL dialects share.

``SqlStore`` holds the method bodies; a dialect (``SqliteStore``, ``PostgresStore``) is a
subclass that supplies only what really differs, as the abstract methods below:

- the **unit of work**: ``_rows`` (a read), ``_execute`` (one write statement, its own
  transaction) and ``_atomic`` (several statements as one transaction). SQLite runs writes on
  its group-commit writer; PostgreSQL on pooled autocommit connections, with an explicit
  transaction only inside ``_atomic``;
- **lists of values** in a statement (``_in``, ``_in_params``): ``IN (?, …)`` or ``= ANY(?)``;
- the **step write** (``start_step``/``finish_step``, with the request's reply or claim)
  and the **commit** (``commit``: validate, publish, enqueue effects, end the transaction),
  the hot paths, each in the dialect's fastest shape: SQLite's statement by statement in one
  writer unit (a statement costs it no round trip), PostgreSQL's in one pipeline; and
  opening, migrating and closing.

A request's reply is stored by the unit of the operation that produced it (begin, a step, a
commit), "first wins": if the id is taken, the unit raises ``AlreadyExists`` and is rolled
back whole (``_insert_reply_on``, ``_start_step_claiming``).

A multi-statement unit is an ``async`` function of a ``Connection``; a method that runs on a
caller's connection ends in ``_on``. SQLite's connection answers without suspending, so its
writer thread drives such a unit to its end with no event loop (``sqlite.py``).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from agenttx.audit import (
    Anchor,
    AuditEvent,
    AuditKind,
    AuditRecord,
    ChainHead,
    make_record,
)
from agenttx.errors import InvalidArgument, clip
from agenttx.jsontext import compact
from agenttx.store import receipts_sql, sql
from agenttx.store.contract import (
    OutboxRow,
    ReceiptRow,
    StepRow,
    Store,
    StoredReply,
    TxRow,
    TxUpdate,
    UndoRow,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Result:
    """What a write statement did: rows it affected, and rows it returned (``RETURNING``)."""

    rowcount: int
    rows: list[Sequence[Any]]


class Connection(Protocol):
    """One database connection inside a unit of work (``SqlStore._atomic``)."""

    async def execute(self, query: str, params: Sequence[Any] = ()) -> Result: ...

    async def execute_many(self, query: str, rows: Sequence[Sequence[Any]]) -> None: ...


class SqlStore(Store):
    """The ``Store`` contract over SQL; see the module docstring for what a dialect adds."""

    # Appended to the claim query's row selection so two claimers never lease one row.
    CLAIM_ROW_LOCK: ClassVar[str]
    # Appended to the read of a transaction's row that serialises appends to its chain made
    # outside its lock (deliveries): PostgreSQL locks the row, SQLite's writer is alone.
    CHAIN_ROW_LOCK: ClassVar[str]
    # The principal who began transaction ``t`` (its body's ``principal``, as text), read in
    # SQL: a listing of effects filters by owner in its query, not after fetching a page.
    TX_PRINCIPAL: ClassVar[str]

    # -- the dialect's unit of work ---------------------------------------------------------

    @abc.abstractmethod
    async def _rows(self, query: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        """Run a read; its rows. A driver error is raised as ``InternalError``."""

    async def _rows_off_loop(
        self, query: str, params: Sequence[Any], convert: Callable[[Sequence[Any]], T]
    ) -> list[T]:
        """``_rows`` with each row ``convert``ed, for a read of megabytes: the conversion (JSON
        columns decoded) runs on a worker thread. A dialect whose driver can also fetch off
        the loop does the whole read there."""
        rows = await self._rows(query, params)
        return await asyncio.to_thread(lambda: [convert(r) for r in rows])

    @abc.abstractmethod
    async def _execute(self, query: str, params: Sequence[Any] = ()) -> Result:
        """Run one write statement as its own transaction, durable before it returns."""

    @abc.abstractmethod
    async def _atomic(self, unit: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``unit`` as one transaction: committed if it returns, rolled back if it raises
        (its exception propagates; a driver error as ``InternalError``)."""

    @staticmethod
    @abc.abstractmethod
    def _in(column: str, n: int) -> str:
        """A test that ``column`` is one of ``n`` (≥ 1) values passed as ``_in_params``."""

    @staticmethod
    @abc.abstractmethod
    def _in_params(values: Sequence[Any]) -> Sequence[Any]:
        """``values`` as the parameters of ``_in``."""

    # -- shared pieces --------------------------------------------------------------------

    def _cas(self, u: TxUpdate) -> tuple[str, list[Any]]:
        """The compare-and-set statement of ``u`` and its parameters."""
        statuses = u.from_statuses
        query = sql.cas_sql(
            self._in,
            u.body is not None,
            u.touch_activity,
            len(statuses),
            u.audit_seq > 0,
            sql.keeps_status(u),
        )
        return query, sql.cas_params(u, self._in_params(statuses))

    async def _insert_reply_on(self, conn: Connection, tenant: str, reply: StoredReply) -> None:
        """Store ``reply`` inside the caller's unit, first wins: ``AlreadyExists`` (which
        rolls the unit back) if its id holds anything already."""
        if not (await conn.execute(sql.INSERT_REQUEST, sql.request_values(tenant, reply))).rows:
            raise sql.request_taken(reply)

    async def _start_step_claiming(
        self, update: TxUpdate, step: StepRow, claim: StoredReply
    ) -> int:
        """``start_step`` with a claim, as one unit: CAS, the RUNNING row, the claim."""

        async def unit(conn: Connection) -> int:
            revision = await self._cas_on(conn, update)
            await conn.execute(sql.UPSERT_STEP, sql.step_values(step))
            got = await conn.execute(
                sql.CLAIM_TX_REQUEST, sql.tx_request_values(update.tx_id, claim)
            )
            if not got.rows:
                raise sql.request_taken(claim)
            return revision

        return await self._atomic(unit)

    async def _cas_on(self, conn: Connection, u: TxUpdate) -> int:
        """CAS the transaction on the caller's connection, with the update's audit records;
        the new revision, or ``RevisionConflict`` (which rolls the caller's unit back)."""
        query, params = self._cas(u)
        if (await conn.execute(query, params)).rowcount != 1:
            found = (await conn.execute(sql.TX_STATE, (u.tx_id,))).rows
            raise sql.revision_conflict(u, found[0] if found else None)
        await _append_on(conn, u.audit)
        return u.expected_revision + 1

    # -- transactions -------------------------------------------------------------------------

    async def create_transaction(
        self, row: TxRow, reply: StoredReply | None = None, audit: Sequence[AuditRecord] = ()
    ) -> TxRow:
        if reply is None and not audit:
            got = await self._execute(sql.INSERT_TX, sql.tx_values(row))
        else:

            async def unit(conn: Connection) -> Result:
                if reply is not None:
                    await self._insert_reply_on(conn, row.tenant, reply)
                inserted = await conn.execute(sql.INSERT_TX, sql.tx_values(row))
                await _append_on(conn, audit)
                return inserted

            got = await self._atomic(unit)
        row.snapshot = int(got.rows[0][0])
        return row

    async def get_transaction(self, tx_id: str) -> TxRow | None:
        rows = await self._rows(sql.SELECT_TX, (tx_id,))
        return sql.tx_row(rows[0]) if rows else None

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
        where: list[str] = []
        params: list[Any] = []
        if after_id:
            where.append(sql.BEFORE_TX if newest_first else sql.AFTER_TX)
            params.append(after_id)
        if statuses:
            where.append(self._in("status", len(statuses)))
            params.extend(self._in_params(statuses))
        for test, value in (
            ("agent_id = ?", agent_id),
            ("tenant = ?", tenant),
            ("last_activity_at < ?", idle_before),
            ("created_at >= ?", created_after),
            ("created_at < ?", created_before),
        ):
            if value is not None:
                where.append(test)
                params.append(value)
        condition = " AND ".join(where) if where else "TRUE"
        order = sql.LIST_TX_NEWEST if newest_first else sql.LIST_TX_ORDER
        query = f"SELECT {sql.TX_COLS} FROM transactions WHERE {condition} {order}"
        rows = [sql.tx_row(r) for r in await self._rows(query, [*params, limit])]
        # An empty page after a cursor: the end of the listing, or a cursor naming nothing
        # (which a caller must hear of rather than take for the end).
        if not rows and after_id and not await self._rows(sql.TX_EXISTS, (after_id,)):
            raise InvalidArgument(
                f"cannot continue the listing after {clip(after_id)!r}: no such transaction "
                "(use the next_page_token of the previous page, or none for the first)"
            )
        return rows

    async def update_transaction(self, update: TxUpdate) -> int:
        if update.audit:
            return await self._atomic(lambda conn: self._cas_on(conn, update))
        query, params = self._cas(update)
        if (await self._execute(query, params)).rowcount != 1:
            found = await self._rows(sql.TX_STATE, (update.tx_id,))
            raise sql.revision_conflict(update, found[0] if found else None)
        return update.expected_revision + 1

    # -- steps, undo log --------------------------------------------------------------------

    async def load_steps(
        self, tx_id: str, *, live_only: bool, after_seq: int = 0, large: bool = False
    ) -> list[StepRow]:
        query = sql.LOAD_LIVE_STEPS if live_only else sql.LOAD_STEPS
        if large:
            return await self._rows_off_loop(query, (tx_id, after_seq), sql.step_row)
        return [sql.step_row(r) for r in await self._rows(query, (tx_id, after_seq))]

    async def load_undo(self, tx_id: str) -> list[UndoRow]:
        return [sql.undo_row(r) for r in await self._rows(sql.LOAD_UNDO, (tx_id,))]

    async def append_undo(self, row: UndoRow) -> int:
        got = await self._execute(sql.INSERT_UNDO, sql.undo_values(row))
        return int(got.rows[0][0])

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
        if not audit:
            await self._execute(sql.SET_UNDO_STATUS, (status, attempts, error, undo_id))
            return

        async def unit(conn: Connection) -> None:
            await conn.execute(sql.SET_UNDO_STATUS, (status, attempts, error, undo_id))
            await _append_on(conn, audit, audit_seq)

        await self._atomic(unit)

    async def finish_rewind(
        self, update: TxUpdate, target_step: int, failed_step: StepRow | None = None
    ) -> int:
        tx_id, target = update.tx_id, max(target_step, 0)

        async def unit(conn: Connection) -> int:
            revision = await self._cas_on(conn, update)
            if failed_step is not None:
                await conn.execute(sql.UPSERT_STEP, sql.step_values(failed_step))
            await conn.execute(sql.UNLIVE_STEPS, (tx_id, target))
            await conn.execute(sql.DROP_DONE_UNDO, (tx_id, target))
            return revision

        return await self._atomic(unit)

    # -- managed state ------------------------------------------------------------------------

    async def read_state(
        self, tenant: str, key: str, at_version: int | None
    ) -> tuple[str | None, int]:
        if at_version is None:
            rows = await self._rows(sql.READ_STATE, (tenant, key))
        else:
            rows = await self._rows(sql.READ_STATE_AT, (tenant, key, at_version))
        if not rows:
            return None, 0
        return rows[0][0], int(rows[0][1])

    async def current_version(self) -> int:
        return int((await self._rows(sql.CURRENT_VERSION))[0][0])

    async def oldest_open_snapshot(self) -> int | None:
        rows = await self._rows(sql.OLDEST_OPEN_SNAPSHOT)
        return None if rows[0][0] is None else int(rows[0][0])

    async def prune_versions(self, horizon: int) -> int:
        return (await self._execute(sql.PRUNE_VERSIONS, (horizon,))).rowcount

    # -- outbox -------------------------------------------------------------------------------

    async def claim_outbox(
        self, *, now: float, lease_secs: float, limit: int, ids: Sequence[int] = ()
    ) -> list[OutboxRow]:
        due, params = sql.OUTBOX_DUE, [now, now]
        if ids:
            due += f" AND {self._in('id', len(ids))}"
            params.extend(self._in_params(ids))
        query = sql.claim_outbox_sql(due, self.CLAIM_ROW_LOCK)
        got = await self._execute(query, [now + lease_secs, *params, limit])
        return sorted((sql.outbox_row(r) for r in got.rows), key=lambda r: r.id)

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
        delivered = now if status == "delivered" else 0.0
        params = (status, attempts, next_attempt_at, error, delivered, row_id)
        if audit is None:
            await self._execute(sql.SETTLE_OUTBOX, params)
            return

        async def unit(conn: Connection) -> None:
            await conn.execute(sql.SETTLE_OUTBOX, params)
            await self._append_event_on(conn, audit)

        await self._atomic(unit)

    async def _append_event_on(self, conn: Connection, event: AuditEvent) -> None:
        """Place ``event`` after its chain's head, inside the caller's unit. The transaction's
        row is read (on PostgreSQL locked) first, so two such appends to one chain run one
        after the other."""
        found = (await conn.execute(sql.TX_REVISION + self.CHAIN_ROW_LOCK, (event.tx_id,))).rows
        tenant, revision = (str(found[0][0]), int(found[0][1])) if found else ("", 0)
        head = sql.chain_head((await conn.execute(sql.AUDIT_HEAD, (event.tx_id,))).rows)
        record = make_record(
            head,
            tx_id=event.tx_id,
            tenant=tenant,
            kind=event.kind,
            at=event.at,
            revision=revision,
            data=event.data,
            key=event.key,
        )
        await _append_on(conn, (record,))

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
        where: list[str] = ["id > ?"]
        params: list[Any] = [after_id]
        if ids:
            where.append(self._in("id", len(ids)))
            params.extend(self._in_params(ids))
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if statuses:
            where.append(self._in("status", len(statuses)))
            params.extend(self._in_params(statuses))
        if tx_id is not None:
            where.append("tx_id = ?")
            params.append(tx_id)
        if owner is not None:
            where.append(sql.owned_by(self.TX_PRINCIPAL))
            params.append(owner)
        query = (
            f"SELECT {sql.OUTBOX_COLS} FROM outbox WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        )
        return [sql.outbox_row(r) for r in await self._rows(query, [*params, limit])]

    async def outbox_counts(self) -> dict[str, int]:
        return sql.outbox_counts(await self._rows(sql.OUTBOX_COUNTS))

    async def release_claims(self, *, now: float) -> int:
        return (await self._execute(sql.RELEASE_CLAIMS, (now,))).rowcount

    async def requeue_outbox(self, row_id: int, *, now: float) -> bool:
        return (await self._execute(sql.REQUEUE_OUTBOX, (now, row_id))).rowcount == 1

    # -- audit chains -----------------------------------------------------------------------

    async def append_audit(self, records: Sequence[AuditRecord], *, audit_seq: int = 0) -> None:
        if records:
            await self._atomic(lambda conn: _append_on(conn, records, audit_seq))

    async def load_audit(
        self, tx_id: str, *, after_seq: int = 0, limit: int = 10_000
    ) -> list[AuditRecord]:
        rows = await self._rows(sql.LOAD_AUDIT, (tx_id, after_seq, limit))
        return [sql.audit_row(r) for r in rows]

    async def audit_head(self, tx_id: str) -> ChainHead:
        return sql.chain_head(await self._rows(sql.AUDIT_HEAD, (tx_id,)))

    async def audit_anchor(self, tx_id: str) -> Anchor:
        found = await self._rows(sql.TX_REVISION, (tx_id,))
        attempts = await self._rows(sql.OUTBOX_ATTEMPTS, (tx_id,))
        pending = await self._rows(sql.PENDING_STEPS, (tx_id,)) if found else [(0,)]
        # A row that is gone is no anchor; the tombstone its deletion left is.
        tombstone = [] if found else await self._rows(sql.TOMBSTONE, (tx_id,))
        return Anchor(
            int(found[0][1]) if found else 0,
            {int(i): int(n) for i, n in attempts},
            int(pending[0][0]),
            sql.chain_head(tombstone) if tombstone else None,
        )

    async def list_audited(self, *, after_id: str = "", limit: int = 500) -> list[str]:
        rows = await self._rows(sql.LIST_AUDITED, (after_id, after_id, after_id, limit))
        return [str(r[0]) for r in rows]

    # -- receipts ---------------------------------------------------------------------------

    async def put_receipt(
        self, row: ReceiptRow, audit: Sequence[AuditRecord] = (), *, audit_seq: int = 0
    ) -> None:
        async def unit(conn: Connection) -> None:
            await conn.execute(receipts_sql.INSERT_RECEIPT, receipts_sql.receipt_values(row))
            await _append_on(conn, audit, audit_seq)

        await self._atomic(unit)

    async def get_receipt(self, receipt_id: str) -> ReceiptRow | None:
        rows = await self._rows(receipts_sql.GET_RECEIPT, (receipt_id,))
        return receipts_sql.receipt_row(rows[0]) if rows else None

    async def approve_receipt(
        self,
        receipt_id: str,
        *,
        approved_by: str,
        at: float,
        audit: Sequence[AuditRecord] = (),
        audit_seq: int = 0,
    ) -> bool:
        return await self._decide_receipt(
            receipts_sql.APPROVE_RECEIPT, [approved_by, at, receipt_id], audit, audit_seq
        )

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
        return await self._decide_receipt(
            receipts_sql.REFUSE_RECEIPT,
            [refused_by, at, compact(detail), receipt_id],
            audit,
            audit_seq,
        )

    async def _decide_receipt(
        self, update: str, params: list[Any], audit: Sequence[AuditRecord], audit_seq: int
    ) -> bool:
        """The compare-and-set ``update`` (approve or refuse) and, only if it applied,
        ``audit`` in the same unit; False, with nothing written, iff the receipt was decided
        already (the other decision won). A dialect may do it in one statement."""

        async def unit(conn: Connection) -> bool:
            got = await conn.execute(update, params)
            if got.rowcount != 1:
                return False  # decided already: the other decision won; nothing written
            await _append_on(conn, audit, audit_seq)
            return True

        return await self._atomic(unit)

    async def list_receipts(self, tx_id: str, *, limit: int) -> list[ReceiptRow]:
        rows = await self._rows(receipts_sql.LIST_RECEIPTS, (tx_id, limit))
        return [receipts_sql.receipt_row(r) for r in rows]

    async def read_states(
        self, tenant: str, keys: Sequence[str]
    ) -> dict[str, tuple[str | None, int]]:
        found: dict[str, tuple[str | None, int]] = dict.fromkeys(keys, (None, 0))
        for i in range(0, len(keys), receipts_sql.READ_BATCH):
            batch = keys[i : i + receipts_sql.READ_BATCH]
            query = receipts_sql.read_states_sql(self._in("key", len(batch)))
            for key, value, version in await self._rows(query, [tenant, *self._in_params(batch)]):
                found[str(key)] = (value, int(version))
        return found

    # -- request idempotency ----------------------------------------------------------------

    async def get_request(self, tenant: str, request_id: str) -> StoredReply | None:
        rows = await self._rows(sql.GET_REQUEST, (tenant, request_id))
        return StoredReply(*rows[0]) if rows else None

    async def put_request(self, tenant: str, reply: StoredReply) -> StoredReply:
        while True:
            if (await self._execute(sql.PUT_REQUEST, sql.request_values(tenant, reply))).rows:
                return reply  # stored: the first reply for this id, or our claim filled in
            stored = await self.get_request(tenant, reply.request_id)
            if stored is not None:
                return stored
            # The earlier reply was pruned between the two statements: store this one.

    async def prune_requests(self, older_than: float) -> int:
        return (await self._execute(sql.PRUNE_REQUESTS, (older_than,))).rowcount

    async def prune_kept_undo(self, now: float) -> int:
        async def unit(conn: Connection) -> int:
            removed = (await conn.execute(sql.PRUNE_KEPT_UNDO, (now,))).rowcount
            await conn.execute(sql.PRUNE_UNDO_KEPT, (now,))
            return removed

        return await self._atomic(unit)

    # -- retention ----------------------------------------------------------------------------

    async def prune_ended(self, ended_before: float, *, limit: int = 500, now: float = 0.0) -> int:
        found = await self._rows(sql.ENDED_BEFORE, (ended_before, limit))
        pruned = 0
        for (tx_id,) in found:
            # One unit per transaction: a crash leaves each one whole or gone, and no unit
            # holds the writer for more than one transaction's rows.
            async def unit(conn: Connection, tx_id: str = str(tx_id)) -> int:
                # The row anchored the chain's end: its tombstone takes over, in this unit.
                await conn.execute(sql.RECORD_TOMBSTONE, (now, tx_id, ended_before))
                gone = await conn.execute(sql.DELETE_ENDED, (tx_id, ended_before))
                if gone.rowcount != 1:
                    return 0
                await conn.execute(sql.DELETE_STEPS, (tx_id,))
                await conn.execute(sql.DELETE_UNDO, (tx_id,))
                await conn.execute(sql.DELETE_RECEIPTS, (tx_id,))
                return 1

            pruned += await self._atomic(unit)
        return pruned

    async def prune_delivered(self, delivered_before: float) -> int:
        return (await self._execute(sql.PRUNE_DELIVERED, (delivered_before,))).rowcount

    async def prune_dead(self, died_before: float) -> int:
        return (await self._execute(sql.PRUNE_DEAD, (died_before,))).rowcount

    async def prune_audit(self, newest_before: float, *, limit: int = 500) -> int:
        found = await self._rows(sql.AUDIT_EXPIRED, (newest_before, limit))
        pruned = 0
        for (tx_id,) in found:
            # The chain and its tombstone go together: a tombstone left alone would report
            # the chain removed.
            async def unit(conn: Connection, tx_id: str = str(tx_id)) -> int:
                params = (tx_id, tx_id, tx_id, newest_before)
                if not (await conn.execute(sql.DELETE_CHAIN, params)).rowcount:
                    return 0
                await conn.execute(sql.DELETE_TOMBSTONE, (tx_id,))
                return 1

            pruned += await self._atomic(unit)
        return pruned


async def _append_on(conn: Connection, records: Sequence[AuditRecord], audit_seq: int = 0) -> None:
    """Insert audit records in the caller's unit; a position already taken is a
    ``RevisionConflict``, which rolls the unit back. ``audit_seq`` > 0: the records chained
    the transaction's pending step records up to that step row, so its watermark moves there
    in the same unit."""
    for i in range(0, len(records), sql.AUDIT_ROWS):
        rows = records[i : i + sql.AUDIT_ROWS]
        got = await conn.execute(sql.insert_audit_sql(len(rows)), sql.audit_batch_values(rows))
        if got.rowcount != len(rows):
            raise sql.chain_taken(rows[0])
    if audit_seq > 0 and records:
        await conn.execute(sql.SET_AUDIT_SEQ, (audit_seq, records[0].tx_id, audit_seq))


async def start_chains_on(conn: Connection, now: float) -> int:
    """Start a chain (``audit.started``) for every transaction that has none: what opening a
    store made before the chains existed does, inside its migration. Returns how many."""
    rows = (await conn.execute(sql.UNCHAINED_TX)).rows
    for tx_id, tenant, revision, status, next_step_id in rows:
        record = make_record(
            ChainHead(0, ""),
            tx_id=str(tx_id),
            tenant=str(tenant),
            kind=AuditKind.AUDIT_STARTED.value,
            at=now,
            revision=int(revision),
            data={"status": status, "next_step_id": int(next_step_id), "note": "events "
                  "before this record predate the audit chain and are not recorded"},
        )  # fmt: skip
        await _append_on(conn, (record,))
    return len(rows)
