"""PostgreSQL store: several ``agenttx serve`` replicas on one database.

- **Connections**: an async psycopg 3 pool; each contract method is one database transaction.
- **Migrations**: applied on open, versioned in ``agenttx_schema``, under a transaction-level
  advisory lock, so replicas starting together never race.
- **Transactions across replicas**: every change is a compare-and-set on ``revision``; a call
  holds a session advisory lock on its transaction (``transaction_lock``) so a call for the
  same transaction on another replica waits inside PostgreSQL — woken by the lock manager when
  the first call ends or its replica dies (the session ends), never by polling — or gives up
  after ``lock_timeout`` with ``DeadlineExceeded``.
- **Commit**: the written keys' head rows are locked (``FOR UPDATE``, in key order so two
  committers cannot deadlock), versions are checked, then the commit counter row is advanced
  and the writes published. The counter row lock is held from that update to the end of the
  commit, so versions become visible in order: a snapshot (the counter's value when a
  transaction began) never sees a smaller version appear later. A bare SEQUENCE would hand out
  numbers without that ordering, which is why the counter is a row.
- **Outbox**: claimed with ``FOR UPDATE SKIP LOCKED`` and a lease; a commit that queued effects
  sends ``NOTIFY agenttx_outbox`` so idle dispatchers on every replica wake at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from agenttx.errors import DeadlineExceeded, InternalError, RevisionConflict
from agenttx.store.contract import (
    CommitOutcome,
    CommitPlan,
    OutboxRow,
    StepRow,
    Store,
    StoredReply,
    TxRow,
    TxUpdate,
    UndoRow,
    VersionCheck,
)
from agenttx.store.sql import (
    OUTBOX_COLS,
    STEP_COLS,
    TERMINAL_STATUSES,
    TX_COLS,
    UNDO_COLS,
    dumps,
    outbox_counts,
    outbox_filters,
    outbox_row,
    step_row,
    step_values,
    transaction_filters,
    tx_row,
)

SCHEMA_VERSION = 1
_MIGRATION_LOCK = 0x61677478  # "agtx": the advisory lock key of the migration step
NOTIFY_CHANNEL = "agenttx_outbox"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS agenttx_schema (version INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)""",
    """INSERT INTO meta VALUES ('commit_seq', 0) ON CONFLICT DO NOTHING""",
    """CREATE TABLE IF NOT EXISTS transactions (
      id TEXT PRIMARY KEY, tenant TEXT NOT NULL, agent_id TEXT NOT NULL, status TEXT NOT NULL,
      revision BIGINT NOT NULL, next_step_id INTEGER NOT NULL, snapshot BIGINT NOT NULL,
      isolation TEXT NOT NULL, body TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
      updated_at DOUBLE PRECISION NOT NULL, last_activity_at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS transactions_status
      ON transactions (status, last_activity_at)""",
    """CREATE TABLE IF NOT EXISTS steps (
      tx_id TEXT NOT NULL, seq INTEGER NOT NULL, step_id INTEGER NOT NULL,
      attempt INTEGER NOT NULL, epoch INTEGER NOT NULL, tool TEXT NOT NULL,
      effect TEXT NOT NULL, status TEXT NOT NULL, live BOOLEAN NOT NULL, arguments TEXT NOT NULL,
      output TEXT NOT NULL, raw_context TEXT NOT NULL, detail TEXT NOT NULL,
      started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION NOT NULL,
      lease_owner TEXT NOT NULL, lease_until DOUBLE PRECISION NOT NULL,
      PRIMARY KEY (tx_id, seq))""",
    """CREATE INDEX IF NOT EXISTS steps_by_step ON steps (tx_id, step_id)""",
    """CREATE TABLE IF NOT EXISTS undo (
      id BIGSERIAL PRIMARY KEY, tx_id TEXT NOT NULL, step_id INTEGER NOT NULL,
      handler TEXT NOT NULL, args TEXT NOT NULL, idempotency_key TEXT NOT NULL,
      status TEXT NOT NULL, attempts INTEGER NOT NULL, last_error TEXT NOT NULL,
      created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS undo_by_step ON undo (tx_id, step_id)""",
    """CREATE TABLE IF NOT EXISTS outbox (
      id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, tx_id TEXT NOT NULL,
      step_id INTEGER NOT NULL, channel TEXT NOT NULL, payload TEXT NOT NULL,
      idempotency_key TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
      next_attempt_at DOUBLE PRECISION NOT NULL, last_error TEXT NOT NULL,
      created_at DOUBLE PRECISION NOT NULL, delivered_at DOUBLE PRECISION NOT NULL,
      lease_until DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at)""",
    """CREATE INDEX IF NOT EXISTS outbox_by_tx ON outbox (tx_id)""",
    """CREATE TABLE IF NOT EXISTS requests (
      tenant TEXT NOT NULL, request_id TEXT NOT NULL, method TEXT NOT NULL,
      payload_hash TEXT NOT NULL, reply TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
      PRIMARY KEY (tenant, request_id))""",
    """CREATE INDEX IF NOT EXISTS requests_by_age ON requests (created_at)""",
    """CREATE TABLE IF NOT EXISTS kv (
      tenant TEXT NOT NULL, key TEXT NOT NULL, version BIGINT NOT NULL, value TEXT,
      PRIMARY KEY (tenant, key, version))""",
    # One row per key with its newest version: what commits lock and compare.
    """CREATE TABLE IF NOT EXISTS kv_head (
      tenant TEXT NOT NULL, key TEXT NOT NULL, version BIGINT NOT NULL,
      PRIMARY KEY (tenant, key))""",
]


def _lock_key(tx_id: str) -> int:
    """A stable signed 64-bit advisory lock key for a transaction id."""
    return int.from_bytes(hashlib.sha256(tx_id.encode()).digest()[:8], "big", signed=True)


def _update_sql(u: TxUpdate) -> tuple[str, list[Any]]:
    """The compare-and-set of ``u`` as one UPDATE (affects one row iff it applies)."""
    sets = "status = %s, revision = %s, next_step_id = %s, updated_at = %s"
    params: list[Any] = [u.status, u.expected_revision + 1, u.next_step_id, u.now]
    if u.body is not None:
        sets += ", body = %s"
        params.append(dumps(u.body))
    if u.touch_activity:
        sets += ", last_activity_at = %s"
        params.append(u.now)
    return (
        f"UPDATE transactions SET {sets} WHERE id = %s AND revision = %s AND status = ANY(%s)",
        [*params, u.tx_id, u.expected_revision, list(u.from_statuses)],
    )


async def _conflict(c: AsyncConnection[Any], u: TxUpdate) -> RevisionConflict:
    """The error for a compare-and-set that did not apply, saying what the row holds now."""
    now = await (
        await c.execute("SELECT revision, status FROM transactions WHERE id = %s", (u.tx_id,))
    ).fetchone()
    if now is None:
        return RevisionConflict(f"transaction {u.tx_id} no longer exists")
    return RevisionConflict(
        f"transaction {u.tx_id} changed concurrently (revision {now[0]}, status {now[1]}; "
        f"expected revision {u.expected_revision} in {'/'.join(u.from_statuses)})"
    )


async def _apply_update(c: AsyncConnection[Any], u: TxUpdate) -> int:
    """CAS the transaction row on the caller's connection; returns the new revision."""
    cur = await c.execute(*_update_sql(u))
    if cur.rowcount != 1:
        raise await _conflict(c, u)
    return u.expected_revision + 1


# The same seq replaces the attempt (RUNNING becomes its final row).
_STEP_UPSERT = (
    "ON CONFLICT (tx_id, seq) DO UPDATE SET status = EXCLUDED.status, live = EXCLUDED.live, "
    "arguments = EXCLUDED.arguments, output = EXCLUDED.output, detail = EXCLUDED.detail, "
    "finished_at = EXCLUDED.finished_at, lease_owner = EXCLUDED.lease_owner, "
    "lease_until = EXCLUDED.lease_until"
)
_STEP_PARAMS = ",".join(["%s"] * 17)


async def _insert_step(c: AsyncConnection[Any], s: StepRow) -> None:
    await c.execute(
        f"INSERT INTO steps ({STEP_COLS}) VALUES ({_STEP_PARAMS}) {_STEP_UPSERT}", step_values(s)
    )


class PostgresStore(Store):
    shared = True

    def __init__(self, url: str, *, pool_size: int = 8, lock_pool_size: int = 16) -> None:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.pool_size = int(query.pop("pool_size", [str(pool_size)])[0])
        # Calls hold their transaction's advisory lock on a connection of their own, from a
        # separate pool: if they took it from the query pool, pool_size calls in flight would
        # hold every connection and wait forever for one more to run their queries.
        self.lock_pool_size = int(query.pop("lock_pool_size", [str(lock_pool_size)])[0])
        rest = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
        self.dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
        self.url = url
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._locks: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self._listener: AsyncConnection[Any] | None = None  # LISTEN connection, see below
        # lock_timeout as last set on each lock connection: set again only when it differs.
        self._lock_timeouts: weakref.WeakKeyDictionary[AsyncConnection[Any], str] = (
            weakref.WeakKeyDictionary()
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        try:
            self._pool = self._new_pool(1, self.pool_size)
            await self._pool.open(wait=True, timeout=30)
            self._locks = self._new_pool(0, self.lock_pool_size)
            await self._locks.open(wait=False)
            async with self._pool.connection() as c, c.transaction():
                # Two replicas starting at once: the second waits here, then finds it done.
                await c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                await c.execute(_SCHEMA[0])
                row = await (await c.execute("SELECT max(version) FROM agenttx_schema")).fetchone()
                version = row[0] if row and row[0] is not None else 0
                if version > SCHEMA_VERSION:
                    raise InternalError(
                        f"store schema version {version} is newer than this AgentTx "
                        f"({SCHEMA_VERSION})"
                    )
                if version < SCHEMA_VERSION:
                    for statement in _SCHEMA[1:]:
                        await c.execute(statement)
                    await c.execute("DELETE FROM agenttx_schema")
                    await c.execute("INSERT INTO agenttx_schema VALUES (%s)", (SCHEMA_VERSION,))
        except psycopg.Error as exc:
            raise InternalError(f"cannot open PostgreSQL store {self._safe_url()}: {exc}") from exc

    def _new_pool(self, min_size: int, max_size: int) -> AsyncConnectionPool[AsyncConnection[Any]]:
        # Autocommit: a lone statement is its own transaction; tx_row() opens explicit ones.
        return AsyncConnectionPool(
            self.dsn, min_size=min_size, max_size=max_size, open=False,
            kwargs={"autocommit": True},
        )  # fmt: skip

    def _safe_url(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.username or ''}@{host}{port}{parts.path}"

    async def close(self) -> None:
        await self._close_listener()
        if self._locks is not None:
            await self._locks.close()
            self._locks = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- plumbing -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def tx_row(self) -> AsyncIterator[AsyncConnection[Any]]:
        """One database transaction on a pooled connection."""
        if self._pool is None:
            raise InternalError("store is closed")
        try:
            async with self._pool.connection() as c, c.transaction():
                yield c
        except psycopg.Error as exc:
            raise InternalError(f"PostgreSQL error: {exc}") from exc

    @contextlib.asynccontextmanager
    async def one_statement(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection in autocommit, for work that is one statement: the statement
        is its own transaction, so no BEGIN and COMMIT round trips are spent around it."""
        if self._pool is None:
            raise InternalError("store is closed")
        try:
            async with self._pool.connection() as c:
                yield c
        except psycopg.Error as exc:
            raise InternalError(f"PostgreSQL error: {exc}") from exc

    async def _fetch(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.one_statement() as c:
            return await (await c.execute(query, params)).fetchall()

    def transaction_lock(
        self, tx_id: str, timeout_s: float
    ) -> AbstractAsyncContextManager[TxRow | None]:
        return self._advisory(tx_id, timeout_s)

    @contextlib.asynccontextmanager
    async def _advisory(self, tx_id: str, timeout_s: float) -> AsyncIterator[TxRow | None]:
        if self._locks is None:
            raise InternalError("store is closed")
        key = _lock_key(tx_id)
        timeout = f"{max(int(timeout_s * 1000), 1)}ms"
        async with self._locks.connection() as c:
            try:
                # One round trip: (the wait bound, if this connection has another one,) the
                # lock — the lock manager wakes us when it is free — and the row as it is
                # now. In a pipeline each statement still takes its own snapshot after the
                # one before it ends, so the row is read after the lock is held.
                async with c.pipeline():
                    if self._lock_timeouts.get(c) != timeout:
                        await c.execute("SELECT set_config('lock_timeout', %s, false)", (timeout,))
                    await c.execute("SELECT pg_advisory_lock(%s)", (key,))
                    cur = await c.execute(
                        f"SELECT {TX_COLS} FROM transactions WHERE id = %s", (tx_id,)
                    )
                self._lock_timeouts[c] = timeout
                found = await cur.fetchone()
            except psycopg.errors.LockNotAvailable:
                self._lock_timeouts[c] = timeout
                raise DeadlineExceeded(
                    f"transaction {tx_id} is busy with another call (on another replica) for "
                    f"more than {timeout_s:g} s; retry later"
                ) from None
            except psycopg.Error as exc:
                self._lock_timeouts.pop(c, None)
                raise InternalError(f"PostgreSQL error: {exc}") from exc
            try:
                yield tx_row(found) if found else None
            finally:
                try:
                    await c.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    # A session lock must never go back to the pool: ending the session
                    # releases it (the pool discards a closed connection).
                    await c.close()

    # -- transactions -------------------------------------------------------------------------

    async def create_transaction(self, row: TxRow) -> TxRow:
        async with self.one_statement() as c:
            # The snapshot is the commit counter as the row is written: one statement.
            got = await (
                await c.execute(
                    f"INSERT INTO transactions ({TX_COLS}) VALUES (%s,%s,%s,%s,%s,%s,"
                    "(SELECT value FROM meta WHERE name = 'commit_seq'),%s,%s,%s,%s,%s) "
                    "RETURNING snapshot",
                    (
                        row.id, row.tenant, row.agent_id, row.status, row.revision,
                        row.next_step_id, row.isolation, dumps(row.body), row.created_at,
                        row.updated_at, row.last_activity_at,
                    ),
                )
            ).fetchone()  # fmt: skip
            assert got is not None
            row.snapshot = int(got[0])
        return row

    async def get_transaction(self, tx_id: str) -> TxRow | None:
        rows = await self._fetch(f"SELECT {TX_COLS} FROM transactions WHERE id = %s", (tx_id,))
        return tx_row(rows[0]) if rows else None

    async def list_transactions(
        self,
        *,
        statuses: Sequence[str] = (),
        agent_id: str | None = None,
        tenant: str | None = None,
        idle_before: float | None = None,
        limit: int = 100,
        after_id: str = "",
    ) -> list[TxRow]:
        where, params = transaction_filters(
            "%s",
            statuses=statuses,
            agent_id=agent_id,
            tenant=tenant,
            idle_before=idle_before,
            after_id=after_id,
        )
        query = f"SELECT {TX_COLS} FROM transactions WHERE {where} ORDER BY id LIMIT %s"
        return [tx_row(r) for r in await self._fetch(query, [*params, limit])]

    async def update_transaction(self, update: TxUpdate) -> int:
        async with self.one_statement() as c:
            return await _apply_update(c, update)

    # -- steps --------------------------------------------------------------------------------

    async def load_steps(self, tx_id: str, *, live_only: bool, after_seq: int = 0) -> list[StepRow]:
        live = " AND live" if live_only else ""
        rows = await self._fetch(
            f"SELECT {STEP_COLS} FROM steps WHERE tx_id = %s AND seq > %s{live} ORDER BY seq",
            (tx_id, after_seq),
        )
        return [step_row(r) for r in rows]

    async def load_undo(self, tx_id: str) -> list[UndoRow]:
        rows = await self._fetch(
            f"SELECT {UNDO_COLS} FROM undo WHERE tx_id = %s ORDER BY id", (tx_id,)
        )
        return [UndoRow(*r) for r in rows]

    async def start_step(self, update: TxUpdate, step: StepRow) -> int:
        return await self.finish_step(update, step)

    async def finish_step(self, update: TxUpdate, step: StepRow) -> int:
        # The hot path of every step: the CAS and the step row in ONE autocommit statement
        # (one round trip, no BEGIN/COMMIT); the row is inserted only if the CAS applied.
        update_sql, params = _update_sql(update)
        async with self.one_statement() as c:
            cur = await c.execute(
                f"WITH cas AS ({update_sql} RETURNING 1) "
                f"INSERT INTO steps ({STEP_COLS}) SELECT {_STEP_PARAMS} FROM cas "
                f"{_STEP_UPSERT} RETURNING 1",
                [*params, *step_values(step)],
            )
            if cur.rowcount != 1:
                raise await _conflict(c, update)
        return update.expected_revision + 1

    async def append_undo(self, row: UndoRow) -> int:
        async with self.one_statement() as c:
            cur = await c.execute(
                "INSERT INTO undo (tx_id, step_id, handler, args, idempotency_key, status, "
                "attempts, last_error, created_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) "
                "RETURNING id",
                (
                    row.tx_id, row.step_id, row.handler, row.args_json, row.idempotency_key,
                    row.status, row.attempts, row.last_error, row.created_at,
                ),
            )  # fmt: skip
            got = await cur.fetchone()
            assert got is not None
            return int(got[0])

    async def set_undo_status(self, undo_id: int, status: str, attempts: int, error: str) -> None:
        async with self.one_statement() as c:
            await c.execute(
                "UPDATE undo SET status = %s, attempts = %s, last_error = %s WHERE id = %s",
                (status, attempts, error, undo_id),
            )

    async def finish_rewind(
        self, update: TxUpdate, target_step: int, failed_step: StepRow | None = None
    ) -> int:
        tx_id, target = update.tx_id, max(target_step, 0)
        async with self.tx_row() as c:
            revision = await _apply_update(c, update)
            if failed_step is not None:
                await _insert_step(c, failed_step)
            await c.execute(
                "UPDATE steps SET live = FALSE WHERE tx_id = %s AND step_id >= %s AND live",
                (tx_id, target),
            )
            await c.execute(
                "DELETE FROM undo WHERE tx_id = %s AND step_id >= %s AND status = 'done'",
                (tx_id, target),
            )
            return revision

    async def commit(self, plan: CommitPlan) -> CommitOutcome:
        tx_id, tenant = plan.on_success.tx_id, plan.tenant
        async with self.tx_row() as c:
            keys = sorted({check.key for check in plan.checks} | set(plan.writes))
            if keys:
                # Lock the head rows of every checked or written key, in key order (no
                # deadlock between two committers); a key never written gets a head at 0.
                await c.execute(
                    "INSERT INTO kv_head (tenant, key, version) "
                    "SELECT %s, k, 0 FROM unnest(%s::text[]) AS k ON CONFLICT DO NOTHING",
                    (tenant, list(plan.writes)),
                )
                rows = await (
                    await c.execute(
                        "SELECT key, version FROM kv_head WHERE tenant = %s AND key = ANY(%s) "
                        "ORDER BY key FOR UPDATE",
                        (tenant, keys),
                    )
                ).fetchall()
                latest = {k: int(v) for k, v in rows}
            else:
                latest = {}
            conflicts: list[VersionCheck] = [
                check for check in plan.checks if latest.get(check.key, 0) > check.max_version
            ]
            if conflicts:
                revision = await _apply_update(c, plan.on_conflict)
                return CommitOutcome(False, 0, revision, conflicts, [])
            revision = await _apply_update(c, plan.on_success)
            version = 0
            if plan.writes:
                # The serialisation point: held until this transaction ends (module docstring).
                got = await (
                    await c.execute(
                        "UPDATE meta SET value = value + 1 WHERE name = 'commit_seq' "
                        "RETURNING value"
                    )
                ).fetchone()
                assert got is not None
                version = int(got[0])
                items = list(plan.writes.items())
                async with c.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO kv (tenant, key, version, value) VALUES (%s,%s,%s,%s)",
                        [(tenant, k, version, v) for k, v in items],
                    )
                await c.execute(
                    "UPDATE kv_head SET version = %s WHERE tenant = %s AND key = ANY(%s)",
                    (version, tenant, [k for k, _ in items]),
                )
            now = plan.on_success.now
            outbox: list[OutboxRow] = []
            status = "delivering" if plan.claim_until > 0 else "pending"
            for e in plan.effects:
                got = await (
                    await c.execute(
                        "INSERT INTO outbox (tenant, tx_id, step_id, channel, payload, "
                        "idempotency_key, status, attempts, next_attempt_at, last_error, "
                        "created_at, delivered_at, lease_until) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s,0,%s,'',%s,0,%s) "
                        f"RETURNING {OUTBOX_COLS}",
                        (tenant, tx_id, e.step_id, e.channel, e.payload_json, e.idempotency_key,
                         status, now, now, plan.claim_until),
                    )
                ).fetchone()  # fmt: skip
                assert got is not None
                outbox.append(outbox_row(got))
            if outbox and status == "pending":
                await c.execute(f"NOTIFY {NOTIFY_CHANNEL}")  # delivered at COMMIT
            await c.execute("DELETE FROM undo WHERE tx_id = %s", (tx_id,))
            return CommitOutcome(True, version, revision, [], outbox)

    # -- managed state ------------------------------------------------------------------------

    async def read_state(
        self, tenant: str, key: str, at_version: int | None
    ) -> tuple[str | None, int]:
        if at_version is None:
            rows = await self._fetch(
                "SELECT value, version FROM kv WHERE tenant = %s AND key = %s "
                "ORDER BY version DESC LIMIT 1",
                (tenant, key),
            )
        else:
            rows = await self._fetch(
                "SELECT value, version FROM kv WHERE tenant = %s AND key = %s "
                "AND version <= %s ORDER BY version DESC LIMIT 1",
                (tenant, key, at_version),
            )
        if not rows:
            return None, 0
        return rows[0][0], int(rows[0][1])

    async def current_version(self) -> int:
        rows = await self._fetch("SELECT value FROM meta WHERE name = 'commit_seq'")
        return int(rows[0][0])

    async def oldest_open_snapshot(self) -> int | None:
        rows = await self._fetch(
            "SELECT min(snapshot) FROM transactions WHERE status <> ALL(%s)",
            (list(TERMINAL_STATUSES),),
        )
        return None if rows[0][0] is None else int(rows[0][0])

    async def prune_versions(self, horizon: int) -> int:
        async with self.one_statement() as c:
            cur = await c.execute(
                "DELETE FROM kv USING (SELECT tenant, key, max(version) AS keep FROM kv "
                "WHERE version <= %s GROUP BY tenant, key) AS k "
                "WHERE kv.tenant = k.tenant AND kv.key = k.key AND kv.version < k.keep",
                (horizon,),
            )
            return cur.rowcount

    # -- outbox -------------------------------------------------------------------------------

    async def claim_outbox(
        self, *, now: float, lease_secs: float, limit: int, ids: Sequence[int] = ()
    ) -> list[OutboxRow]:
        due = (
            "((status = 'pending' AND next_attempt_at <= %s) "
            "OR (status = 'delivering' AND lease_until <= %s))"
        )
        params: list[Any] = [now, now]
        if ids:
            due += " AND id = ANY(%s)"
            params.append(list(ids))
        async with self.tx_row() as c:
            rows = await (
                await c.execute(
                    f"UPDATE outbox SET status = 'delivering', lease_until = %s WHERE id IN "
                    f"(SELECT id FROM outbox WHERE {due} ORDER BY id LIMIT %s "
                    f"FOR UPDATE SKIP LOCKED) RETURNING {OUTBOX_COLS}",
                    [now + lease_secs, *params, limit],
                )
            ).fetchall()
        return sorted((OutboxRow(*r) for r in rows), key=lambda r: r.id)

    async def settle_outbox(
        self,
        row_id: int,
        *,
        status: str,
        attempts: int,
        next_attempt_at: float,
        error: str,
        now: float,
    ) -> None:
        delivered = now if status == "delivered" else 0.0
        async with self.one_statement() as c:
            await c.execute(
                "UPDATE outbox SET status = %s, attempts = %s, next_attempt_at = %s, "
                "last_error = %s, delivered_at = %s, lease_until = 0 WHERE id = %s",
                (status, attempts, next_attempt_at, error, delivered, row_id),
            )

    async def list_outbox(
        self, *, statuses: Sequence[str] = (), tx_id: str | None = None, limit: int = 1000
    ) -> list[OutboxRow]:
        where, params = outbox_filters("%s", statuses=statuses, tx_id=tx_id)
        query = f"SELECT {OUTBOX_COLS} FROM outbox WHERE {where} ORDER BY id LIMIT %s"
        return [outbox_row(r) for r in await self._fetch(query, [*params, limit])]

    async def outbox_counts(self) -> dict[str, int]:
        return outbox_counts(
            await self._fetch("SELECT status, count(*) FROM outbox GROUP BY status")
        )

    async def release_claims(self, *, now: float) -> int:
        async with self.one_statement() as c:
            cur = await c.execute(
                "UPDATE outbox SET status = 'pending', lease_until = 0, next_attempt_at = %s "
                "WHERE status = 'delivering'",
                (now,),
            )
            return cur.rowcount

    async def requeue_outbox(self, row_id: int, *, now: float) -> bool:
        async with self.one_statement() as c:
            cur = await c.execute(
                "UPDATE outbox SET status = 'pending', next_attempt_at = %s, attempts = 0 "
                "WHERE id = %s AND status = 'dead'",
                (now, row_id),
            )
            return cur.rowcount == 1

    async def wait_for_outbox(self, timeout_s: float) -> bool:
        """Block until a commit anywhere queues effects (``NOTIFY``) or the timeout; True if
        notified. Uses its own connection (not the pool's), so closing the store ends a wait
        at once."""
        if self._pool is None:
            raise InternalError("store is closed")
        try:
            if self._listener is None or self._listener.closed:
                self._listener = await AsyncConnection.connect(self.dsn, autocommit=True)
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

    # -- request idempotency --------------------------------------------------------------------

    async def get_request(self, tenant: str, request_id: str) -> StoredReply | None:
        rows = await self._fetch(
            "SELECT request_id, method, payload_hash, reply, created_at FROM requests "
            "WHERE tenant = %s AND request_id = %s",
            (tenant, request_id),
        )
        return StoredReply(*rows[0]) if rows else None

    async def put_request(self, tenant: str, reply: StoredReply) -> StoredReply:
        async with self.one_statement() as c:
            # The first reply stored wins; RETURNING yields nothing if another was there.
            inserted = await (
                await c.execute(
                    "INSERT INTO requests (tenant, request_id, method, payload_hash, reply, "
                    "created_at) VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING "
                    "RETURNING request_id",
                    (
                        tenant, reply.request_id, reply.method, reply.payload_hash,
                        reply.reply_json, reply.created_at,
                    ),
                )
            ).fetchone()  # fmt: skip
            if inserted is not None:
                return reply
            row = await (
                await c.execute(
                    "SELECT request_id, method, payload_hash, reply, created_at FROM requests "
                    "WHERE tenant = %s AND request_id = %s",
                    (tenant, reply.request_id),
                )
            ).fetchone()
            assert row is not None
            return StoredReply(*row)

    async def prune_requests(self, older_than: float) -> int:
        async with self.one_statement() as c:
            cur = await c.execute("DELETE FROM requests WHERE created_at < %s", (older_than,))
            return cur.rowcount


__all__ = ["PostgresStore"]
