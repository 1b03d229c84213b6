"""PostgreSQL dialect of the SQL store: several ``agenttx serve`` replicas on one database.

- **Unit of work**: an async psycopg 3 pool in autocommit. A lone statement is its own
  transaction (no ``BEGIN``/``COMMIT`` round trips); only ``_atomic`` opens an explicit one.
- **Opening** fails fast: one direct connection first (``postgres_target.py``: 5 s unless the
  URL says otherwise), so a wrong host, port, database or user is reported at once with the
  driver's reason, instead of a pool retrying in silence. Migrations run on that connection under a
  transaction-level advisory lock, versioned in ``agenttx_schema``: replicas never race.
- **Transactions across replicas**: every change is a compare-and-set on ``revision``; a call
  holds a session advisory lock on its transaction (``transaction_lock``), so a call for the
  same transaction on another replica waits inside PostgreSQL — woken by the lock manager when
  the first call ends or its replica dies (the session ends), never by polling — or gives up
  after ``lock_timeout`` with ``DeadlineExceeded``.
- **A step** is one statement: the CAS, the step row and the request's stored reply in one
  CTE, inserted only if the CAS applied (a taken request id fails the statement, so nothing of
  it happens). Under the session lock (pipelined with the row read and the reply's lookup) and
  its unlock: 3 round trips, request id or not.
- **A state-only step** (its tool touches managed state only, so the engine ran it on its
  cached image without the lock: ``lock_and_finish_step``) is the same ONE statement, one
  round trip and one server transaction, its CAS first taking ``pg_advisory_xact_lock`` on
  the same key (it conflicts with the session lock, so it waits for a call holding the
  transaction on any replica). The CAS applies only at the revision the tool ran against,
  checked on the newest committed row, and every change moves the revision, so what commits
  is what the locked call would have written; a lost CAS writes nothing, and the engine runs
  the call again under the session lock (``docs/stores.md``).
- **Commit**: one pipeline, one round trip and one server transaction (``commit``). The
  written keys' ``kv_head`` rows are locked (``FOR UPDATE``, in key order so two committers
  cannot deadlock); the success statement's CAS applies only if no checked key's head is
  newer than its check allows, and takes the commit counter row, the writes, the outbox rows
  and the undo log's drop with it; the conflict statement's CAS applies only if one is. The
  counter row lock is held from that statement to the end of the commit, so versions become
  visible in order: a snapshot (the counter's value when a transaction began) never sees a
  smaller version appear later. A bare SEQUENCE would hand out numbers without that
  ordering, which is why the counter is a row. The statements are ``postgres_sql.py``'s.
- **A long history** (``load_steps(large=True)``) is read on a thread and a synchronous
  connection of the store's own (``postgres_bulk.py``), not through the pool on the loop.
- **Outbox**: claimed with ``FOR UPDATE SKIP LOCKED`` and a lease; a commit that queued effects
  sends ``NOTIFY agenttx_outbox`` so idle dispatchers on every replica wake at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from agenttx.audit import AuditRecord
from agenttx.errors import (
    AgentTxError,
    DeadlineExceeded,
    InternalError,
    RevisionConflict,
    StoreFull,
)
from agenttx.store import receipts_sql, sql
from agenttx.store.contract import (
    CommitOutcome,
    CommitPlan,
    HeldTx,
    ReceiptRow,
    StepRow,
    StoredReply,
    TxRow,
    TxUpdate,
)
from agenttx.store.postgres_bulk import BulkReader
from agenttx.store.postgres_sql import (
    ADD_HEADS,
    LOCK_HEADS,
    READ_STATES,
    XACT_LOCK,
    audit_cte,
    audit_params,
    check_params,
    commit_conflict,
    commit_write,
    commit_write_params,
    insert_tx,
    pg,
    seal_cte,
    seal_params,
    step_write,
)
from agenttx.store.postgres_target import Target
from agenttx.store.sql_store import Connection, Result, SqlStore, start_chains_on

T = TypeVar("T")
Pool = AsyncConnectionPool[AsyncConnection[Any]]

_MIGRATION_LOCK = 0x61677478  # "agtx": the advisory lock key of the migration step
NOTIFY_CHANNEL = "agenttx_outbox"

_SCHEMA = (
    *sql.schema(serial_key="BIGSERIAL PRIMARY KEY", clustered=""),
    # One row per key with its newest version: what commits lock and compare.
    """CREATE TABLE IF NOT EXISTS kv_head (
      tenant TEXT NOT NULL, key TEXT NOT NULL, version BIGINT NOT NULL,
      PRIMARY KEY (tenant, key))""",
)


# The primary key of the stored replies: a plain INSERT that hits it fails its statement.
_REQUESTS_KEY = "requests_pkey"


def _taken(exc: psycopg.errors.UniqueViolation) -> bool:
    """True iff ``exc`` is a request id that already holds a reply or a claim."""
    return exc.diag.constraint_name == _REQUESTS_KEY


def _chain_taken(exc: psycopg.errors.UniqueViolation) -> bool:
    """True iff ``exc`` is an audit record whose position another append took."""
    return exc.diag.constraint_name == sql.AUDIT_KEY


def _lock_key(tx_id: str) -> int:
    """A stable signed 64-bit advisory lock key for a transaction id."""
    return int.from_bytes(hashlib.sha256(tx_id.encode()).digest()[:8], "big", signed=True)


class _Connection:
    """A pooled connection inside an explicit transaction, as a ``Connection``."""

    __slots__ = ("_c",)

    def __init__(self, c: AsyncConnection[Any]) -> None:
        self._c = c

    async def execute(self, query: str, params: Sequence[Any] = ()) -> Result:
        return await _execute_on(self._c, query, params)

    async def execute_many(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._c.cursor() as cur:
            await cur.executemany(pg(query), rows)


async def _execute_on(c: AsyncConnection[Any], query: str, params: Sequence[Any]) -> Result:
    cur = await c.execute(pg(query), params)
    rows = await cur.fetchall() if cur.description is not None else []
    return Result(cur.rowcount, rows)


class PostgresStore(SqlStore):
    shared = True
    CLAIM_ROW_LOCK: ClassVar[str] = " FOR UPDATE SKIP LOCKED"  # replicas claim side by side
    # Two replicas delivering effects of one transaction append to its chain in turn.
    CHAIN_ROW_LOCK: ClassVar[str] = " FOR UPDATE"
    # The body is TEXT: parsed as json (not jsonb: no binary form is built for one lookup).
    TX_PRINCIPAL: ClassVar[str] = "(t.body::json ->> 'principal')"

    def __init__(self, url: str, *, pool_size: int = 8, lock_pool_size: int = 16) -> None:
        self.target = Target.parse(url, pool_size=pool_size, lock_pool_size=lock_pool_size)
        self.url = url
        self._pool: Pool | None = None
        self._locks: Pool | None = None
        self._listener: AsyncConnection[Any] | None = None  # LISTEN connection, see below
        self._bulk: BulkReader | None = None  # long reads; open iff the pools are
        # lock_timeout as last set on each lock connection: set again only when it differs.
        self._lock_timeouts: weakref.WeakKeyDictionary[AsyncConnection[Any], str] = (
            weakref.WeakKeyDictionary()
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        target = self.target
        where = f"cannot open PostgreSQL store {target.safe_url()}"
        connected = False
        try:
            # One connection before any pool: a pool would retry a bad URL until its timeout
            # and then report only that it timed out.
            first = await AsyncConnection.connect(
                target.dsn, autocommit=True, **target.connect_kwargs
            )
            connected = True
            async with first:
                await self._migrate_on(first)
            self._pool = self._new_pool(1, target.pool_size)
            await self._pool.open(wait=True, timeout=target.connect_timeout_s)
            self._locks = self._new_pool(0, target.lock_pool_size)
            await self._locks.open(wait=False)
            self._bulk = BulkReader(target)
        except psycopg.Error as exc:
            await self.close()
            raise InternalError(f"{where}: {target.failure(exc, connected=connected)}") from exc
        except InternalError as exc:
            await self.close()
            exc.with_message(f"{where}: {exc.message}")  # e.g. the schema is newer
            raise

    @staticmethod
    async def _migrate_on(c: AsyncConnection[Any]) -> None:
        async with c.transaction():
            # Two replicas starting at once: the second waits here, then finds it done.
            await c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await c.execute("CREATE TABLE IF NOT EXISTS agenttx_schema (version INTEGER NOT NULL)")
            row = await (await c.execute("SELECT max(version) FROM agenttx_schema")).fetchone()
            version = row[0] if row and row[0] is not None else 0
            if version > sql.SCHEMA_VERSION:
                raise sql.newer_schema(version)
            if version < sql.SCHEMA_VERSION:
                # Only then: CREATE INDEX takes a table lock even when the index exists.
                for statement in _SCHEMA:
                    await c.execute(statement)
                if version < sql.AUDIT_SEQ_SINCE_VERSION:
                    await c.execute(
                        sql.ADD_AUDIT_SEQ.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS")
                    )
                    await c.execute(sql.FILL_AUDIT_SEQ)
                if version < sql.REQUEST_TX_SINCE_VERSION:
                    await c.execute(
                        sql.ADD_REQUEST_TX.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS")
                    )
                if version < sql.AUDIT_SINCE_VERSION:
                    # Transactions the store held before the chains existed get one each.
                    await start_chains_on(_Connection(c), time.time())
                await c.execute("DELETE FROM agenttx_schema")
                await c.execute("INSERT INTO agenttx_schema VALUES (%s)", (sql.SCHEMA_VERSION,))

    def _new_pool(self, min_size: int, max_size: int) -> Pool:
        # Autocommit: a lone statement is its own transaction; _atomic opens explicit ones.
        return AsyncConnectionPool(
            self.target.dsn, min_size=min_size, max_size=max_size, open=False,
            kwargs={"autocommit": True, **self.target.connect_kwargs},
        )  # fmt: skip

    async def close(self) -> None:
        bulk, self._bulk = self._bulk, None
        if bulk is not None:
            await bulk.close()
        await self._close_listener()
        if self._locks is not None:
            await self._locks.close()
            self._locks = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- unit of work -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection in autocommit; driver errors leave as ``InternalError``."""
        if self._pool is None:
            raise InternalError("store is closed")
        try:
            async with self._pool.connection() as c:
                yield c
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    async def _rows(self, query: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        async with self._connection() as c:
            return await (await c.execute(pg(query), params)).fetchall()

    async def _rows_off_loop(
        self, query: str, params: Sequence[Any], convert: Callable[[Sequence[Any]], T]
    ) -> list[T]:
        # Through the pool the driver received a long history's ~10 MB and made it into
        # Python objects on the loop: 24 ms of the loop's CPU a 3 MB read, 6 here (measured
        # in process, benchmarks/results/history.md). One autocommit statement there as here.
        if self._bulk is None:
            raise InternalError("store is closed")
        return await self._bulk.rows(pg(query), params, convert, _failure)

    async def _execute(self, query: str, params: Sequence[Any] = ()) -> Result:
        async with self._connection() as c:
            return await _execute_on(c, query, params)

    async def _atomic(self, unit: Callable[[Connection], Awaitable[T]]) -> T:
        async with self._connection() as c, c.transaction():
            return await unit(_Connection(c))

    @staticmethod
    def _in(column: str, n: int) -> str:
        return f"{column} = ANY(?)"  # one statement text for any number of values

    @staticmethod
    def _in_params(values: Sequence[Any]) -> Sequence[Any]:
        return [list(values)]

    # -- locks --------------------------------------------------------------------------------

    def transaction_lock(
        self, tx_id: str, timeout_s: float, *, request: tuple[str, str] | None = None
    ) -> AbstractAsyncContextManager[HeldTx | None]:
        return self._advisory(tx_id, timeout_s, request)

    async def create_transaction(
        self, row: TxRow, reply: StoredReply | None = None, audit: Sequence[AuditRecord] = ()
    ) -> TxRow:
        # One statement, one round trip (the shared form would be a four-trip transaction).
        params = [*sql.request_values(row.tenant, reply)] if reply is not None else []
        params += audit_params(audit)
        async with self._connection() as c:
            try:
                cur = await c.execute(
                    insert_tx(reply is not None, len(audit)), [*params, *sql.tx_values(row)]
                )
            except psycopg.errors.UniqueViolation as exc:
                if reply is None or not _taken(exc):
                    raise
                raise sql.request_taken(reply) from None
            found = await cur.fetchone()
        assert found is not None
        row.snapshot = int(found[0])
        return row

    # -- receipts: one statement each (the shared forms are four-trip transactions) --------

    async def put_receipt(
        self, row: ReceiptRow, audit: Sequence[AuditRecord] = (), *, audit_seq: int = 0
    ) -> None:
        ctes = audit_cte(len(audit), "").removeprefix(", ")
        seal = seal_cte(audit, audit_seq, "")
        if seal:
            ctes += seal
        query = pg(
            f"WITH {ctes} {receipts_sql.INSERT_RECEIPT}" if ctes else receipts_sql.INSERT_RECEIPT
        )
        params = [*audit_params(audit), *seal_params(audit, audit_seq)]
        async with self._connection() as c:
            try:
                await c.execute(query, [*params, *receipts_sql.receipt_values(row)])
            except psycopg.errors.UniqueViolation as exc:
                if audit and _chain_taken(exc):
                    raise sql.chain_taken(audit[0]) from None
                raise

    async def _decide_receipt(
        self, update: str, params: list[Any], audit: Sequence[AuditRecord], audit_seq: int
    ) -> bool:
        """One statement: the compare-and-set ``update`` and, only if it applied, ``audit``
        (the records select from it) and the move of the sealed watermark."""
        records = audit_cte(len(audit), "upd") + seal_cte(audit, audit_seq, "upd")
        query = pg(f"WITH upd AS ({update} RETURNING 1){records} SELECT count(*) FROM upd")
        async with self._connection() as c:
            try:
                cur = await c.execute(
                    query, [*params, *audit_params(audit), *seal_params(audit, audit_seq)]
                )
            except psycopg.errors.UniqueViolation as exc:
                if audit and _chain_taken(exc):
                    raise sql.chain_taken(audit[0]) from None
                raise
            found = await cur.fetchone()
        return found is not None and int(found[0]) == 1

    async def read_states(
        self, tenant: str, keys: Sequence[str]
    ) -> dict[str, tuple[str | None, int]]:
        # DISTINCT ON walks the primary key once per key: a third of the shared form's time.
        found: dict[str, tuple[str | None, int]] = dict.fromkeys(keys, (None, 0))
        if keys:
            for key, value, version in await self._rows(READ_STATES, (tenant, list(keys))):
                found[str(key)] = (value, int(version))
        return found

    @contextlib.asynccontextmanager
    async def _advisory(
        self, tx_id: str, timeout_s: float, request: tuple[str, str] | None
    ) -> AsyncIterator[HeldTx]:
        if self._locks is None:
            raise InternalError("store is closed")
        key = _lock_key(tx_id)
        timeout = _lock_timeout(timeout_s)
        async with self._locks.connection() as c:
            try:
                # One round trip: (the wait bound, if this connection has another one,) the
                # lock — the lock manager wakes us when it is free — the row as it is now and
                # what is stored for the request id. In a pipeline each statement still takes
                # its own snapshot after the one before it ends, so both reads happen after
                # the lock is held: no call on this transaction can change them meanwhile.
                # The audit chain's head comes along, for the image to append after it.
                stored = None
                async with c.pipeline():
                    if self._lock_timeouts.get(c) != timeout:
                        await c.execute("SELECT set_config('lock_timeout', %s, false)", (timeout,))
                    await c.execute("SELECT pg_advisory_lock(%s)", (key,))
                    cur = await c.execute(pg(sql.SELECT_TX), (tx_id,))
                    head = await c.execute(pg(sql.AUDIT_HEAD), (tx_id,))
                    if request is not None:
                        stored = await c.execute(pg(sql.GET_REQUEST), request)
                self._lock_timeouts[c] = timeout
                found = await cur.fetchone()
                audit_head = sql.chain_head(await head.fetchall())
                reply = await stored.fetchone() if stored is not None else None
            except psycopg.errors.LockNotAvailable:
                # The pipeline is one implicit transaction: its failure rolled back the
                # lock_timeout it may have set, so it is set again next time.
                self._lock_timeouts.pop(c, None)
                raise _busy(tx_id, timeout_s) from None
            except psycopg.Error as exc:
                self._lock_timeouts.pop(c, None)
                raise _failure(exc) from exc
            try:
                yield HeldTx(
                    sql.tx_row(found) if found else None,
                    StoredReply(*reply) if reply else None,
                    audit_head,
                )
            finally:
                try:
                    await c.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    # A session lock must never go back to the pool: ending the session
                    # releases it (the pool discards a closed connection).
                    await c.close()

    # -- steps --------------------------------------------------------------------------------

    async def start_step(
        self, update: TxUpdate, step: StepRow, claim: StoredReply | None = None
    ) -> int:
        if claim is None:
            return await self.finish_step(update, step)
        # Before an outside call (not the hot path): the shared unit, a transaction of its own.
        return await self._start_step_claiming(update, step, claim)

    async def finish_step(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None = None
    ) -> int:
        # Under the caller's lock: the CAS, the step row and the reply in ONE autocommit
        # statement (one round trip, no BEGIN/COMMIT); the rows go in only if the CAS applied.
        query, values = self._step_statement(update, step, reply)
        async with self._connection() as c:
            try:
                cur = await c.execute(query, values)
            except psycopg.errors.UniqueViolation as exc:
                raise _step_refused(exc, update, reply) from None
            if cur.rowcount != 1:
                found = await (await c.execute(pg(sql.TX_STATE), (update.tx_id,))).fetchone()
                raise sql.revision_conflict(update, found)
        return update.expected_revision + 1

    async def lock_and_finish_step(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None, timeout_s: float
    ) -> int:
        # The hot path of a state-only step (the engine ran its tool without the lock): ONE
        # autocommit statement — one round trip, one server transaction — the step statement
        # whose CAS also asks for the transaction-scoped advisory lock on the key
        # ``transaction_lock`` takes (they conflict: a call holding the transaction on
        # another replica, e.g. around an outside call, makes it wait for that call's end).
        # The lock is an uncorrelated subquery of the CAS's WHERE: an InitPlan, run before
        # the UPDATE takes the row, and every other write of the statement selects from the
        # CAS, so nothing is written before the lock is held. The statement's snapshot is
        # older than the lock, but the CAS does not rely on it: READ COMMITTED re-checks an
        # UPDATE's WHERE on the newest committed version of a row another transaction changed
        # meanwhile, so the revision test sees every call that held the lock before; the
        # inserts' unique keys are checked against everything committed, whatever the
        # snapshot. COMMIT (the statement's end) releases the lock, as does any failure. One
        # statement rather than a pipeline of lock + write: the same round trip at two thirds
        # of the driver's CPU (measured).
        if self._locks is None:
            raise InternalError("store is closed")
        query, values = self._step_statement(update, step, reply, lock=_lock_key(update.tx_id))
        timeout = _lock_timeout(timeout_s)
        async with self._locks.connection() as c:
            try:
                if self._lock_timeouts.get(c) != timeout:
                    # Once per connection and bound: the setting pipelined with the statement
                    # (one Sync, so one round trip and one transaction still).
                    async with c.pipeline():
                        await c.execute("SELECT set_config('lock_timeout', %s, false)", (timeout,))
                        cur = await c.execute(query, values)
                else:
                    cur = await c.execute(query, values)
                self._lock_timeouts[c] = timeout
            except psycopg.Error as exc:
                # A failed transaction rolled a lock_timeout set in it back: set it next time.
                self._lock_timeouts.pop(c, None)
                if isinstance(exc, psycopg.errors.LockNotAvailable):
                    raise _busy(update.tx_id, timeout_s) from None
                if isinstance(exc, psycopg.errors.UniqueViolation):
                    refused = _step_refused(exc, update, reply)
                    if refused is not exc:
                        raise refused from None
                raise _failure(exc) from exc
        if cur.rowcount != 1:
            # No second read for the message: the engine takes the lock and looks anyway.
            raise RevisionConflict(
                f"transaction {update.tx_id} changed concurrently (expected revision "
                f"{update.expected_revision} in {'/'.join(update.from_statuses)})"
            )
        return update.expected_revision + 1

    def _step_statement(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None, lock: int | None = None
    ) -> tuple[str, list[Any]]:
        """The step write (``step_write``) for ``update`` and its parameters; with ``lock``,
        its CAS first takes that transaction-scoped advisory lock (``lock_and_finish_step``)."""
        cas, params = self._cas(update)
        values = [*params]
        if lock is not None:
            cas += XACT_LOCK  # at the end of the CAS's WHERE: its parameter follows the CAS's
            values.append(lock)
        if reply is not None:
            values.extend(sql.request_values("", reply)[1:])  # the tenant comes from the row
        audit = update.audit
        if audit:
            values.extend(audit_params(audit))
        values.extend(sql.step_values(step))
        return step_write(cas, reply is not None, len(audit)), values

    # -- commit -------------------------------------------------------------------------------

    async def commit(self, plan: CommitPlan) -> CommitOutcome:
        # ONE round trip and one server transaction: the statements go in one pipeline, ended
        # by one Sync, which PostgreSQL runs as one implicit transaction (a statement that
        # fails skips the rest, and the Sync rolls all of it back). No statement waits on an
        # earlier one's result: what depends on the version check is decided in SQL — the
        # success statement's CAS applies only if no checked key has a newer version (read
        # on the heads LOCK_HEADS holds, so the check sees them as they stay to the end),
        # and everything else it writes selects from that CAS; the conflict statement's CAS
        # applies only if one has. At most one of them applies: the first moves the
        # revision the second tests. The counter row goes at the Sync too, so versions
        # still become visible in the order they were numbered (``commit_write``).
        success, success_params = self._cas(plan.on_success)
        conflict, conflict_params = self._cas(plan.on_conflict)
        checked = [c.key for c in plan.checks]
        async with self._connection() as c:
            try:
                async with c.pipeline():
                    heads = None
                    if checked or plan.writes:
                        # Every key the commit checks or writes gets a head first, one it
                        # only read too: a key nobody wrote yet has nothing else to lock,
                        # and two commits that each read the key the other writes would
                        # both pass their checks (write skew). In key order, as the locks.
                        keys = sorted({*checked, *plan.writes})
                        await c.execute(ADD_HEADS, (plan.tenant, keys))
                        heads = await c.execute(LOCK_HEADS, (plan.tenant, keys))
                    won = await c.execute(
                        commit_write(
                            success, bool(plan.checks), plan.reply is not None,
                            len(plan.on_success.audit), bool(plan.writes), bool(plan.effects),
                            bool(plan.keep_undo),
                        ),
                        commit_write_params(plan, success_params),
                    )  # fmt: skip
                    lost = None
                    if plan.checks:
                        lost = await c.execute(
                            commit_conflict(conflict, len(plan.on_conflict.audit)),
                            [*check_params(plan), *conflict_params,
                             *audit_params(plan.on_conflict.audit)],
                        )  # fmt: skip
                    if plan.effects and plan.claim_until <= 0:
                        # Delivered when the commit ends; sent with a commit that did not
                        # apply too, which wakes dispatchers to find nothing new.
                        await c.execute(f"NOTIFY {NOTIFY_CHANNEL}")
            except psycopg.errors.UniqueViolation as exc:
                raise _commit_refused(exc, plan) from None
            rows = await won.fetchall()
            if rows:
                outbox = [sql.outbox_row(r[1:]) for r in rows] if plan.effects else []
                version = int(rows[0][0])
                revision = plan.on_success.expected_revision + 1
                outbox.sort(key=lambda r: r.id)
                return CommitOutcome(True, version, revision, [], outbox)
            found = dict(await lost.fetchall()) if lost is not None else {}
            if found:
                conflicts = [ch for ch in plan.checks if found.get(ch.key, 0) > ch.max_version]
                revision = plan.on_conflict.expected_revision + 1
                return CommitOutcome(False, 0, revision, conflicts, [])
            # Neither CAS applied: the transaction changed under the caller's lock. The update
            # named is the one the heads (as locked) called for.
            latest = dict(await heads.fetchall()) if heads is not None else {}
            lost_check = any(latest.get(ch.key, 0) > ch.max_version for ch in plan.checks)
            update = plan.on_conflict if lost_check else plan.on_success
            state = await (await c.execute(pg(sql.TX_STATE), (update.tx_id,))).fetchone()
        raise sql.revision_conflict(update, state)

    # -- outbox wake-ups ----------------------------------------------------------------------

    async def wait_for_outbox(self, timeout_s: float) -> bool:
        """Block until a commit anywhere queues effects (``NOTIFY``) or the timeout; True if
        notified. Uses its own connection (not the pool's), so closing the store ends a wait
        at once."""
        if self._pool is None:
            raise InternalError("store is closed")
        try:
            if self._listener is None or self._listener.closed:
                self._listener = await AsyncConnection.connect(
                    self.target.dsn, autocommit=True, **self.target.connect_kwargs
                )
                await self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            async for _ in self._listener.notifies(timeout=timeout_s, stop_after=1):
                return True
            return False
        except psycopg.Error as exc:
            await self._close_listener()
            raise InternalError(f"PostgreSQL LISTEN failed: {exc}") from exc

    async def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(psycopg.Error):
                await listener.close()


def _lock_timeout(timeout_s: float) -> str:
    """``timeout_s`` as PostgreSQL's ``lock_timeout`` (0 would mean "wait forever")."""
    return f"{max(int(timeout_s * 1000), 1)}ms"


def _busy(tx_id: str, timeout_s: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"transaction {tx_id} is busy with another call (on another replica) for "
        f"more than {timeout_s:g} s; retry later"
    )


def _step_refused(
    exc: psycopg.errors.UniqueViolation, update: TxUpdate, reply: StoredReply | None
) -> AgentTxError | psycopg.errors.UniqueViolation:
    """What a step write that hit a unique key raises: a taken audit position, a taken
    request id, or (anything else) the driver's error itself."""
    if update.audit and _chain_taken(exc):
        return sql.chain_taken(update.audit[0])
    if reply is not None and _taken(exc):
        return sql.request_taken(reply)
    return exc


def _commit_refused(
    exc: psycopg.errors.UniqueViolation, plan: CommitPlan
) -> AgentTxError | psycopg.errors.UniqueViolation:
    """What a commit that hit a unique key raises: a taken audit position (both updates'
    records go at the chain's next one), a taken request id, or the driver's error itself."""
    records = plan.on_success.audit or plan.on_conflict.audit
    if records and _chain_taken(exc):
        return sql.chain_taken(records[0])
    if plan.reply is not None and _taken(exc):
        return sql.request_taken(plan.reply)
    return exc


def _failure(exc: psycopg.Error) -> AgentTxError:
    """The error a driver failure is raised as: the server's full disk (SQLSTATE 53100) says
    so (RESOURCE_EXHAUSTED), everything else is INTERNAL."""
    if isinstance(exc, psycopg.errors.DiskFull):
        return StoreFull(
            f"the store is full: PostgreSQL says {exc}; nothing was written — free disk space "
            "on the database server and send the same call again"
        )
    return InternalError(f"PostgreSQL error: {exc}")


__all__ = ["PostgresStore"]
