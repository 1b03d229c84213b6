"""SQLite dialect of the SQL store: the embedded default. One file, WAL, no set-up.

- **Unit of work**: one connection writes through ``GroupCommitWriter`` (a lone write commits
  at once on the loop thread; concurrent ones share a transaction). Reads run on the writer's
  connection while it is free (its page cache survives its own commits; another connection's
  does not) and on a second connection, which WAL lets run beside it, while it is busy.
- **Durability**: ``synchronous=NORMAL`` (default) survives a process crash;
  ``sync_writes=True`` switches to ``FULL`` so a commit also survives power loss.
- **Several processes** may open one file (several ``agenttx mcp``, a second server):
  ``BEGIN IMMEDIATE`` plus ``busy_timeout`` serialise their writers, so a unit needs no row
  locks and sees no concurrent writer; ``transaction_lock`` holds a transaction against the
  other processes for a call (``sqlite_locks``), and tells the engine whether its image may be
  stale: ``PRAGMA data_version`` on the writer's connection changes only when another
  connection commits, so while it stays put no row is read; when it moved, the row is.
- **A full disk** (``SQLITE_FULL``) is ``StoreFull`` (RESOURCE_EXHAUSTED), not INTERNAL: the
  unit rolled back, the reader connection still reads, and writes work again once there is
  room (SQLite needs no repair after it).
- A multi-statement unit (``SqlStore._atomic``) is a coroutine over ``_Connection``, whose
  ``execute`` never suspends: the writer drives it to its end on whichever thread flushes.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar, cast

from agenttx.audit import ChainHead
from agenttx.errors import AgentTxError, InternalError, StoreFull
from agenttx.store import sql
from agenttx.store.contract import (
    CommitOutcome,
    CommitPlan,
    HeldTx,
    OutboxRow,
    StepRow,
    StoredReply,
    TxRow,
    TxUpdate,
)
from agenttx.store.sql_store import Connection, Result, SqlStore, start_chains_on
from agenttx.store.sqlite_locks import LockFile
from agenttx.store.sqlite_writer import GroupCommitWriter

T = TypeVar("T")

# A checkpoint fsyncs the database file; every step dirties a few pages, so the default (1000
# pages) checkpoints every few hundred steps. 16k pages (64 MiB of WAL) makes that rare.
WAL_AUTOCHECKPOINT_PAGES = 16384
# Step rows with more text than this are written off the event loop (GroupCommitWriter).
LARGE_ROW_CHARS = 64 << 10
_IN_CHUNK = 500  # keys per IN (…) query: far below SQLite's variable limit
# Transactions whose row this store remembers handing out (a few bytes each); past this many
# it forgets them all, which costs each one a row read at its next call.
_MAX_VERIFIED = 50_000
_SCHEMA = sql.schema(serial_key="INTEGER PRIMARY KEY", clustered=" WITHOUT ROWID")


class _Connection:
    """The writer's connection as a ``Connection``: every call completes before it returns."""

    __slots__ = ("_c",)

    def __init__(self, c: sqlite3.Connection) -> None:
        self._c = c

    async def execute(self, query: str, params: Sequence[Any] = ()) -> Result:
        return _result(self._c.execute(query, params))

    async def execute_many(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        self._c.executemany(query, rows)


def _result(cur: sqlite3.Cursor) -> Result:
    rows = cur.fetchall()  # first: with RETURNING, rowcount counts the rows fetched
    return Result(cur.rowcount, rows)


def _run_unit_on(c: sqlite3.Connection, unit: Callable[[Connection], Awaitable[T]]) -> T:
    """Run a unit written as a coroutine to its end, with no event loop: its connection never
    suspends, so the first ``send`` finishes it."""
    coro = cast(Coroutine[Any, Any, T], unit(_Connection(c)))
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise InternalError("a SQLite unit of work awaited something other than its connection")


def _write_step_on(
    c: sqlite3.Connection,
    cas: str,
    params: list[Any],
    update: TxUpdate,
    step: StepRow,
    request: tuple[str, StoredReply] | None,
) -> int:
    """The step write on the writer's connection: CAS the transaction, upsert the attempt,
    append the update's audit records and, with ``request`` (statement, reply), store the
    reply or claim in the same commit.
    Plain statements (no coroutine): this runs on every step. Raising rolls the whole unit
    back (the writer's savepoint or transaction)."""
    if c.execute(cas, params).rowcount != 1:
        raise sql.revision_conflict(update, c.execute(sql.TX_STATE, (update.tx_id,)).fetchone())
    c.execute(sql.UPSERT_STEP, sql.step_values(step))
    audit = update.audit
    if len(audit) == 1:
        if c.execute(sql.INSERT_AUDIT, sql.audit_values(audit[0])).rowcount != 1:
            raise sql.chain_taken(audit[0])
    elif audit:  # a batch of pending step records with this step's: one statement
        for i in range(0, len(audit), sql.AUDIT_ROWS):
            rows = audit[i : i + sql.AUDIT_ROWS]
            query = sql.insert_audit_sql(len(rows))
            if c.execute(query, sql.audit_batch_values(rows)).rowcount != len(rows):
                raise sql.chain_taken(rows[0])
    if request is not None:
        statement, reply = request
        if c.execute(statement, sql.tx_request_values(update.tx_id, reply)).fetchone() is None:
            raise sql.request_taken(reply)
    return update.expected_revision + 1


class SqliteStore(SqlStore):
    CLAIM_ROW_LOCK: ClassVar[str] = ""  # the writer is alone in its transaction
    CHAIN_ROW_LOCK: ClassVar[str] = ""  # the same: no other append can run meanwhile
    TX_PRINCIPAL: ClassVar[str] = "json_extract(t.body, '$.principal')"  # JSON1 is built in

    def __init__(self, path: str | Path, *, sync_writes: bool = False) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.sync_writes = sync_writes
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        self._writer: GroupCommitWriter | None = None
        # Large reads (``load_steps(large=True)``): one thread with a connection of its own,
        # opened on first use, so megabytes of rows are fetched and decoded beside the loop.
        self._bulk: ThreadPoolExecutor | None = None
        self._bconn: sqlite3.Connection | None = None
        self._bulk_lock = threading.Lock()  # guards opening and closing the two
        self._concurrency: Callable[[], int] = lambda: 1
        self._locks: LockFile | None = None  # open iff the store is
        # Transaction id -> the writer connection's data_version when its row was last handed
        # out under the lock: while the version is the same, nobody else wrote since.
        self._verified: dict[str, int] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a process crash (it is in the OS page cache);
        # FULL also fsyncs the WAL on every commit, surviving power loss.
        conn.execute(f"PRAGMA synchronous={'FULL' if self.sync_writes else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("PRAGMA busy_timeout=30000")
        if not self.sync_writes:
            # Under FULL the growing WAL made every fsync dearer (measured): keep the default.
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        return conn

    async def open(self) -> None:
        where = f"cannot open SQLite store at {self.path}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._locks = LockFile(self.path.with_name(self.path.name + "-locks"))
            await self._locks.join()
            self.opened_alone = self._locks.alone_at_open
            self._wconn = self._connect()
            self._rconn = self._connect()
            self._writer = GroupCommitWriter(self._wconn, threaded=self.sync_writes)
            self._writer.concurrency = self._concurrency
            self._writer.run_sync(self._migrate_on)
        except (sqlite3.Error, OSError) as exc:
            await self.close()
            raise InternalError(f"{where}: {exc}; {self._remedy(exc)}") from exc
        except AgentTxError as exc:
            # A schema newer than this code, a process not making room, a full disk.
            await self.close()
            exc.with_message(f"{where}: {exc.message}")
            raise

    def _remedy(self, exc: sqlite3.Error | OSError) -> str:
        """What to do about a file that would not open with ``exc``."""
        if self.path.is_dir():
            return f"it is a directory: name a file, e.g. {self.path / 'agenttx.db'}"
        blocking = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            return f"{blocking} is a file, not a directory: name a path in a directory"
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return (
                "the file is not an SQLite database: name an AgentTx store, or a file that "
                "does not exist yet"
            )
        return (
            "check that its directory exists or can be created and that this process may "
            "write there (the store keeps -wal, -shm and -locks files beside it)"
        )

    @staticmethod
    def _migrate_on(c: sqlite3.Connection) -> None:
        # Runs inside BEGIN IMMEDIATE, so two processes opening one file never race. The
        # idempotent schema runs on every open (cheap here: the file is locked for it anyway),
        # so a file at any older version gains what it lacks.
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > sql.SCHEMA_VERSION:
            raise sql.newer_schema(version)
        for statement in _SCHEMA:
            c.execute(statement)
        if version < sql.AUDIT_SEQ_SINCE_VERSION:
            # SQLite's ADD COLUMN has no IF NOT EXISTS: a file made by CREATE TABLE above
            # (a new one) has the column already.
            columns = {r[1] for r in c.execute("PRAGMA table_info(transactions)")}
            if "audit_seq" not in columns:
                c.execute(sql.ADD_AUDIT_SEQ)
            c.execute(sql.FILL_AUDIT_SEQ)
        # A file made by CREATE TABLE above has the column already (as for audit_seq).
        requests = {r[1] for r in c.execute("PRAGMA table_info(requests)")}
        if version < sql.REQUEST_TX_SINCE_VERSION and "tx_id" not in requests:
            c.execute(sql.ADD_REQUEST_TX)
        if version < sql.AUDIT_SINCE_VERSION:
            # Transactions this file held before the chains existed get one each.
            _run_unit_on(c, lambda conn: start_chains_on(conn, time.time()))
        c.execute(f"PRAGMA user_version={sql.SCHEMA_VERSION}")

    @property
    def commits(self) -> int:
        """Database transactions this store's writer has committed since it opened (each is
        one fsync with ``sync_writes``); 0 when closed. For tests and benchmarks that count
        durable writes."""
        return self._writer.commits if self._writer is not None else 0

    def set_concurrency_hint(self, in_flight: Callable[[], int]) -> None:
        self._concurrency = in_flight
        if self._writer is not None:
            self._writer.concurrency = in_flight

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown()
        with self._bulk_lock:
            bulk, self._bulk = self._bulk, None
        if bulk is not None:
            # A large read in progress ends before its connection; waited for off the loop.
            await asyncio.to_thread(bulk.shutdown, True)
        for conn in (self._wconn, self._rconn, self._bconn):
            if conn is not None:
                conn.close()
        self._wconn = self._rconn = self._bconn = None
        self._writer = None
        if self._locks is not None:
            self._locks.close()
            self._locks = None
        self._verified.clear()

    # -- other processes ----------------------------------------------------------------------

    def transaction_lock(
        self, tx_id: str, timeout_s: float, *, request: tuple[str, str] | None = None
    ) -> _HeldSqliteTx:
        return _HeldSqliteTx(self, tx_id, timeout_s, request)

    def _data_version(self) -> int | None:
        """The writer connection's ``PRAGMA data_version`` (changes iff another connection
        committed), or None when it cannot be asked from here: in threaded mode the flush
        thread may be using the connection, and a call that must not wait reads the row."""
        if self._wconn is None or self.sync_writes:
            return None
        try:
            return int(self._wconn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._failure("read", exc) from exc

    def _remember(self, tx_id: str, version: int | None) -> None:
        if version is None:
            return
        if len(self._verified) >= _MAX_VERIFIED:
            self._verified.clear()
        self._verified[tx_id] = version

    # -- unit of work -------------------------------------------------------------------------

    async def _write(self, unit: Callable[[sqlite3.Connection], T], *, large: bool = False) -> T:
        if self._writer is None:
            raise InternalError("store is closed")
        try:
            return await self._writer.run(unit, large=large)
        except sqlite3.Error as exc:
            raise self._failure("write", exc) from exc

    async def _rows(self, query: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        if self._rconn is None or self._writer is None:
            raise InternalError("store is closed")
        try:
            # On the writer's connection when it is free: its page cache is current (see
            # GroupCommitWriter.read_if_idle); else on the reader, beside the flush thread.
            rows = self._writer.read_if_idle(query, params)
            return self._rconn.execute(query, params).fetchall() if rows is None else rows
        except sqlite3.Error as exc:
            raise self._failure("read", exc) from exc

    async def _rows_off_loop(
        self, query: str, params: Sequence[Any], convert: Callable[[Sequence[Any]], T]
    ) -> list[T]:
        # The whole read on the bulk thread: sqlite3 lets go of the interpreter inside each
        # step of the statement and holds it only to build one row's values, so the loop
        # runs between rows (a 3 MB history: 60-250 ms of fetching and decoding, on the
        # loop before, every other client waiting).
        with self._bulk_lock:
            if self._writer is None:
                raise InternalError("store is closed")
            if self._bulk is None:
                self._bulk = ThreadPoolExecutor(1, thread_name_prefix="agenttx-sqlite-read")
            bulk = self._bulk
        return await asyncio.get_running_loop().run_in_executor(
            bulk, self._read_converted, query, params, convert
        )

    def _read_converted(
        self, query: str, params: Sequence[Any], convert: Callable[[Sequence[Any]], T]
    ) -> list[T]:
        """On the bulk thread (the only user of ``_bconn``)."""
        try:
            if self._bconn is None:
                self._bconn = self._connect()
            return [convert(r) for r in self._bconn.execute(query, params)]
        except sqlite3.Error as exc:
            raise self._failure("read", exc) from exc

    def _failure(self, what: str, exc: sqlite3.Error) -> AgentTxError:
        """The error a driver failure is raised as: a full disk says so, the rest INTERNAL."""
        # The primary result code is the low byte of the extended one.
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL:
            return StoreFull(
                f"the store is full: SQLite {what} failed ({exc}) at {self.path}; nothing was "
                "written — free disk space and send the same call again"
            )
        return InternalError(f"SQLite {what} failed: {exc}")

    async def _execute(self, query: str, params: Sequence[Any] = ()) -> Result:
        return await self._write(lambda c: _result(c.execute(query, params)))

    async def _atomic(self, unit: Callable[[Connection], Awaitable[T]]) -> T:
        return await self._write(lambda c: _run_unit_on(c, unit))

    @staticmethod
    @functools.cache
    def _in(column: str, n: int) -> str:
        return f"{column} = ?" if n == 1 else f"{column} IN ({','.join('?' * n)})"

    @staticmethod
    def _in_params(values: Sequence[Any]) -> Sequence[Any]:
        return values

    # -- steps --------------------------------------------------------------------------------

    async def start_step(
        self, update: TxUpdate, step: StepRow, claim: StoredReply | None = None
    ) -> int:
        return await self._write_step(
            update, step, None if claim is None else (sql.CLAIM_TX_REQUEST, claim)
        )

    async def finish_step(
        self, update: TxUpdate, step: StepRow, reply: StoredReply | None = None
    ) -> int:
        return await self._write_step(
            update, step, None if reply is None else (sql.INSERT_TX_REQUEST, reply)
        )

    async def _write_step(
        self, update: TxUpdate, step: StepRow, request: tuple[str, StoredReply] | None
    ) -> int:
        cas, params = self._cas(update)
        # A step row of a megabyte (arguments, output, its write set in ``detail``) is written
        # off the event loop; a typical row of a few hundred bytes commits inline.
        large = (
            len(step.arguments_json) + len(step.output_json) + len(step.raw_context)
            > LARGE_ROW_CHARS
        )
        return await self._write(
            lambda c: _write_step_on(c, cas, params, update, step, request), large=large
        )

    # -- commit -------------------------------------------------------------------------------

    async def commit(self, plan: CommitPlan) -> CommitOutcome:
        # Statement by statement in one writer unit: a statement here costs no round trip,
        # and BEGIN IMMEDIATE keeps every other writer out, so no row needs a lock and the
        # versions read stay the newest to the unit's end (they become visible in order).
        return await self._atomic(lambda conn: self._commit_on(conn, plan))

    async def _commit_on(self, conn: Connection, plan: CommitPlan) -> CommitOutcome:
        tx_id, tenant = plan.on_success.tx_id, plan.tenant
        latest = await self._latest_versions_on(conn, tenant, [ch.key for ch in plan.checks])
        conflicts = [ch for ch in plan.checks if latest.get(ch.key, 0) > ch.max_version]
        if conflicts:
            revision = await self._cas_on(conn, plan.on_conflict)
            return CommitOutcome(False, 0, revision, conflicts, [])
        revision = await self._cas_on(conn, plan.on_success)
        if plan.reply is not None:
            await self._insert_reply_on(conn, tenant, plan.reply)
        version = 0
        if plan.writes:
            # The kv rows are the record: their maximum is each key's newest version.
            version = int((await conn.execute(sql.NEXT_VERSION)).rows[0][0])
            items = [(tenant, k, version, v) for k, v in plan.writes.items()]
            await conn.execute_many(sql.INSERT_KV, items)
        now = plan.on_success.now
        status = "delivering" if plan.claim_until > 0 else "pending"
        outbox: list[OutboxRow] = []
        # Dispatchers of other processes on this file find pending rows when they poll.
        for e in plan.effects:
            got = await conn.execute(
                sql.INSERT_OUTBOX,
                (tenant, tx_id, e.step_id, e.channel, e.payload_json, e.idempotency_key,
                 status, now, now, plan.claim_until),
            )  # fmt: skip
            outbox.append(sql.outbox_row(got.rows[0]))
        if plan.keep_undo:
            # Records a compensation may still need outlive the commit, until their window.
            await conn.execute_many(sql.KEEP_UNDO, [(u, tx_id, end) for u, end in plan.keep_undo])
            await conn.execute(sql.DROP_UNKEPT_UNDO, (tx_id, tx_id))
        else:
            await conn.execute(sql.DROP_UNDO, (tx_id,))
        return CommitOutcome(True, version, revision, [], outbox)

    async def _latest_versions_on(
        self, conn: Connection, tenant: str, checked: Sequence[str]
    ) -> dict[str, int]:
        """Inside a commit: the newest committed version of each checked key (absent: never
        written), the kv rows' maximum, read in a few chunked queries, not one per key."""
        latest: dict[str, int] = {}
        unique = list(dict.fromkeys(checked))
        for i in range(0, len(unique), _IN_CHUNK):
            chunk = unique[i : i + _IN_CHUNK]
            got = await conn.execute(
                f"SELECT key, max(version) FROM kv WHERE tenant = ? AND "
                f"{self._in('key', len(chunk))} GROUP BY key",
                [tenant, *chunk],
            )
            latest.update((k, int(v)) for k, v in got.rows)
        return latest


class _HeldSqliteTx:
    """``SqliteStore.transaction_lock``: the transaction's byte lock against other processes,
    then the row only if another connection wrote since it was last handed out, and the
    request's stored reply. A class, not a generator: it is entered on every call."""

    __slots__ = ("_request", "_store", "_timeout_s", "_tx_id", "_unlocked")

    def __init__(
        self, store: SqliteStore, tx_id: str, timeout_s: float, request: tuple[str, str] | None
    ) -> None:
        self._store = store
        self._tx_id = tx_id
        self._timeout_s = timeout_s
        self._request = request
        self._unlocked = False  # true iff entered while the store was alone (holds nothing)

    async def __aenter__(self) -> HeldTx | None:
        store = self._store
        locks = store._locks
        if locks is None:
            raise InternalError("store is closed")
        if locks.alone:
            # No other store has the file open: the image is authoritative and nothing is
            # held — the contract's one-process answer (the caller looks its request up).
            locks.begin_unlocked_call(self._tx_id)
            self._unlocked = True
            return None
        self._unlocked = False
        await locks.acquire(self._tx_id, self._timeout_s)
        try:
            # Read after the lock is held: whatever another process did to this transaction
            # under its lock is committed by now.
            version = store._data_version()
            row: TxRow | None = None
            head: ChainHead | None = None
            if version is None or store._verified.get(self._tx_id) != version:
                row = await store.get_transaction(self._tx_id)
                # Another process may have appended to the audit chain with the row: the
                # image's head must be the stored one before this call appends after it.
                head = await store.audit_head(self._tx_id)
                store._remember(self._tx_id, version)
            reply = await store.get_request(*self._request) if self._request else None
        except BaseException:
            store._verified.pop(self._tx_id, None)
            locks.release(self._tx_id)
            raise
        return HeldTx(row, reply, head)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        store = self._store
        locks = store._locks
        if self._unlocked:
            if locks is not None:
                locks.end_unlocked_call(self._tx_id)
            return
        if exc_type is not None:
            # The caller may not have caught its image up: read the row next time.
            store._verified.pop(self._tx_id, None)
        if locks is not None:
            locks.release(self._tx_id)


__all__ = ["SqliteStore"]
