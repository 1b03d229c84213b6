"""SQLite store: the embedded default. One file, WAL, no set-up.

One connection writes through ``GroupCommitWriter``; reads use a second connection (WAL lets
readers run beside the writer). ``synchronous=NORMAL`` (default) survives a process crash;
``sync_writes=True`` switches to ``FULL`` so a commit also survives power loss. Several
processes may open the same file: ``BEGIN IMMEDIATE`` plus ``busy_timeout`` serialise writers.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agenttx.errors import InternalError, RevisionConflict
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
)
from agenttx.store.sql import (
    OUTBOX_COLS,
    STEP_COLS,
    TX_COLS,
    dumps,
    in_list,
    outbox_counts,
    outbox_filters,
    outbox_row,
    step_row,
    step_values,
    transaction_filters,
    tx_row,
)
from agenttx.store.sqlite_writer import GroupCommitWriter

T = TypeVar("T")

SCHEMA_VERSION = 1
# A checkpoint fsyncs the database file; every step dirties a few pages, so the default (1000
# pages) checkpoints every few hundred steps. 16k pages (64 MiB of WAL) makes that rare.
WAL_AUTOCHECKPOINT_PAGES = 16384

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema_version', 1), ('commit_seq', 0);
CREATE TABLE IF NOT EXISTS transactions (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, agent_id TEXT NOT NULL, status TEXT NOT NULL,
  revision INTEGER NOT NULL, next_step_id INTEGER NOT NULL, snapshot INTEGER NOT NULL,
  isolation TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL,
  updated_at REAL NOT NULL, last_activity_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS transactions_status ON transactions (status, last_activity_at);
CREATE TABLE IF NOT EXISTS steps (
  tx_id TEXT NOT NULL, seq INTEGER NOT NULL, step_id INTEGER NOT NULL, attempt INTEGER NOT NULL,
  epoch INTEGER NOT NULL, tool TEXT NOT NULL, effect TEXT NOT NULL, status TEXT NOT NULL,
  live INTEGER NOT NULL, arguments TEXT NOT NULL, output TEXT NOT NULL,
  raw_context TEXT NOT NULL, detail TEXT NOT NULL, started_at REAL NOT NULL,
  finished_at REAL NOT NULL, lease_owner TEXT NOT NULL, lease_until REAL NOT NULL,
  PRIMARY KEY (tx_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS steps_by_step ON steps (tx_id, step_id);
CREATE TABLE IF NOT EXISTS undo (
  id INTEGER PRIMARY KEY, tx_id TEXT NOT NULL, step_id INTEGER NOT NULL, handler TEXT NOT NULL,
  args TEXT NOT NULL, idempotency_key TEXT NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, last_error TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS undo_by_step ON undo (tx_id, step_id);
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, tx_id TEXT NOT NULL, step_id INTEGER NOT NULL,
  channel TEXT NOT NULL, payload TEXT NOT NULL, idempotency_key TEXT NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, next_attempt_at REAL NOT NULL, last_error TEXT NOT NULL,
  created_at REAL NOT NULL, delivered_at REAL NOT NULL, lease_until REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS outbox_by_tx ON outbox (tx_id);
CREATE TABLE IF NOT EXISTS requests (
  tenant TEXT NOT NULL, request_id TEXT NOT NULL, method TEXT NOT NULL,
  payload_hash TEXT NOT NULL, reply TEXT NOT NULL, created_at REAL NOT NULL,
  PRIMARY KEY (tenant, request_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS requests_by_age ON requests (created_at);
CREATE TABLE IF NOT EXISTS kv (
  tenant TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, value TEXT,
  PRIMARY KEY (tenant, key, version)
) WITHOUT ROWID;
"""


@functools.cache
def _update_sql(with_body: bool, touch: bool, n_statuses: int) -> str:
    """The CAS statement for one shape of update (built once per shape: it runs every step)."""
    sets = "status = ?, revision = ?, next_step_id = ?, updated_at = ?"
    if with_body:
        sets += ", body = ?"
    if touch:
        sets += ", last_activity_at = ?"
    test = "status = ?" if n_statuses == 1 else in_list("status", range(n_statuses), "?")
    return f"UPDATE transactions SET {sets} WHERE id = ? AND revision = ? AND {test}"


def _apply_update(c: sqlite3.Connection, u: TxUpdate) -> int:
    """CAS the transaction row on the caller's connection; returns the new revision."""
    params: list[Any] = [u.status, u.expected_revision + 1, u.next_step_id, u.now]
    if u.body is not None:
        params.append(dumps(u.body))
    if u.touch_activity:
        params.append(u.now)
    cur = c.execute(
        _update_sql(u.body is not None, u.touch_activity, len(u.from_statuses)),
        [*params, u.tx_id, u.expected_revision, *u.from_statuses],
    )
    if cur.rowcount != 1:
        now = c.execute(
            "SELECT revision, status FROM transactions WHERE id = ?", (u.tx_id,)
        ).fetchone()
        if now is None:
            raise RevisionConflict(f"transaction {u.tx_id} no longer exists")
        raise RevisionConflict(
            f"transaction {u.tx_id} changed concurrently (revision {now[0]}, status {now[1]}; "
            f"expected revision {u.expected_revision} in {'/'.join(u.from_statuses)})"
        )
    return u.expected_revision + 1


_INSERT_STEP = f"INSERT OR REPLACE INTO steps ({STEP_COLS}) VALUES ({','.join('?' * 17)})"


def _insert_step(c: sqlite3.Connection, s: StepRow) -> None:
    c.execute(_INSERT_STEP, step_values(s))


_IN_CHUNK = 500  # keys per IN (…) query: far below SQLite's variable limit


def _latest_versions(c: sqlite3.Connection, tenant: str, keys: list[str]) -> dict[str, int]:
    """Newest committed version per key, in a few chunked queries rather than one per key."""
    latest: dict[str, int] = {}
    unique = list(dict.fromkeys(keys))
    for i in range(0, len(unique), _IN_CHUNK):
        chunk = unique[i : i + _IN_CHUNK]
        rows = c.execute(
            f"SELECT key, max(version) FROM kv WHERE tenant = ? AND {in_list('key', chunk, '?')} "
            "GROUP BY key",
            [tenant, *chunk],
        )
        latest.update((k, int(v)) for k, v in rows)
    return latest


def _update_and_record(c: sqlite3.Connection, update: TxUpdate, step: StepRow) -> int:
    revision = _apply_update(c, update)
    _insert_step(c, step)
    return revision


class SqliteStore(Store):
    def __init__(self, path: str | Path, *, sync_writes: bool = False) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self.sync_writes = sync_writes
        self._wconn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None
        self._writer: GroupCommitWriter | None = None
        self._concurrency: Callable[[], int] = lambda: 1

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._wconn = self._connect()
            self._rconn = self._connect()
            self._writer = GroupCommitWriter(self._wconn, threaded=self.sync_writes)
            self._writer.concurrency = self._concurrency
            self._writer.run_sync(self._migrate)
        except sqlite3.Error as exc:
            raise InternalError(f"cannot open SQLite store at {self.path}: {exc}") from exc

    @staticmethod
    def _migrate(c: sqlite3.Connection) -> None:
        # Runs inside BEGIN IMMEDIATE, so two processes opening one file never race.
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise InternalError(
                f"store schema version {version} is newer than this AgentTx ({SCHEMA_VERSION})"
            )
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                c.execute(statement)
        c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def set_concurrency_hint(self, in_flight: Callable[[], int]) -> None:
        self._concurrency = in_flight
        if self._writer is not None:
            self._writer.concurrency = in_flight

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown()
        for conn in (self._wconn, self._rconn):
            if conn is not None:
                conn.close()
        self._wconn = self._rconn = None
        self._writer = None

    # -- plumbing -----------------------------------------------------------------------------

    async def _write(self, unit: Callable[[sqlite3.Connection], T]) -> T:
        if self._writer is None:
            raise InternalError("store is closed")
        try:
            return await self._writer.run(unit)
        except sqlite3.Error as exc:
            raise InternalError(f"SQLite write failed: {exc}") from exc

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if self._rconn is None:
            raise InternalError("store is closed")
        try:
            return self._rconn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise InternalError(f"SQLite read failed: {exc}") from exc

    # -- transactions -------------------------------------------------------------------------

    async def create_transaction(self, row: TxRow) -> TxRow:
        def unit(c: sqlite3.Connection) -> TxRow:
            snap = c.execute("SELECT value FROM meta WHERE name = 'commit_seq'").fetchone()[0]
            c.execute(
                f"INSERT INTO transactions ({TX_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.id, row.tenant, row.agent_id, row.status, row.revision,
                    row.next_step_id, snap, row.isolation, dumps(row.body), row.created_at,
                    row.updated_at, row.last_activity_at,
                ),
            )  # fmt: skip
            row.snapshot = snap
            return row

        return await self._write(unit)

    async def get_transaction(self, tx_id: str) -> TxRow | None:
        rows = self._read(f"SELECT {TX_COLS} FROM transactions WHERE id = ?", (tx_id,))
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
            "?",
            statuses=statuses,
            agent_id=agent_id,
            tenant=tenant,
            idle_before=idle_before,
            after_id=after_id,
        )
        query = f"SELECT {TX_COLS} FROM transactions WHERE {where} ORDER BY id LIMIT ?"
        return [tx_row(r) for r in self._read(query, [*params, limit])]

    async def update_transaction(self, update: TxUpdate) -> int:
        return await self._write(lambda c: _apply_update(c, update))

    # -- steps --------------------------------------------------------------------------------

    async def load_steps(self, tx_id: str, *, live_only: bool, after_seq: int = 0) -> list[StepRow]:
        live = " AND live = 1" if live_only else ""
        rows = self._read(
            f"SELECT {STEP_COLS} FROM steps WHERE tx_id = ? AND seq > ?{live} ORDER BY seq",
            (tx_id, after_seq),
        )
        return [step_row(r) for r in rows]

    async def load_undo(self, tx_id: str) -> list[UndoRow]:
        rows = self._read(
            "SELECT id, tx_id, step_id, handler, args, idempotency_key, status, attempts, "
            "last_error, created_at FROM undo WHERE tx_id = ? ORDER BY id",
            (tx_id,),
        )
        return [UndoRow(*r) for r in rows]

    async def start_step(self, update: TxUpdate, step: StepRow) -> int:
        return await self._write(lambda c: _update_and_record(c, update, step))

    async def finish_step(self, update: TxUpdate, step: StepRow) -> int:
        # The same unit as start_step: the row is replaced by seq, so RUNNING becomes final.
        return await self._write(lambda c: _update_and_record(c, update, step))

    async def append_undo(self, row: UndoRow) -> int:
        def unit(c: sqlite3.Connection) -> int:
            cur = c.execute(
                "INSERT INTO undo (tx_id, step_id, handler, args, idempotency_key, status, "
                "attempts, last_error, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    row.tx_id, row.step_id, row.handler, row.args_json, row.idempotency_key,
                    row.status, row.attempts, row.last_error, row.created_at,
                ),
            )  # fmt: skip
            return int(cur.lastrowid or 0)

        return await self._write(unit)

    async def set_undo_status(self, undo_id: int, status: str, attempts: int, error: str) -> None:
        await self._write(
            lambda c: c.execute(
                "UPDATE undo SET status = ?, attempts = ?, last_error = ? WHERE id = ?",
                (status, attempts, error, undo_id),
            )
        )

    async def finish_rewind(
        self, update: TxUpdate, target_step: int, failed_step: StepRow | None = None
    ) -> int:
        tx_id, target = update.tx_id, max(target_step, 0)

        def unit(c: sqlite3.Connection) -> int:
            revision = _apply_update(c, update)
            if failed_step is not None:
                _insert_step(c, failed_step)
            c.execute(
                "UPDATE steps SET live = 0 WHERE tx_id = ? AND step_id >= ? AND live = 1",
                (tx_id, target),
            )
            c.execute(
                "DELETE FROM undo WHERE tx_id = ? AND step_id >= ? AND status = 'done'",
                (tx_id, target),
            )
            return revision

        return await self._write(unit)

    async def commit(self, plan: CommitPlan) -> CommitOutcome:
        tx_id, tenant = plan.on_success.tx_id, plan.tenant

        def unit(c: sqlite3.Connection) -> CommitOutcome:
            latest = _latest_versions(c, tenant, [check.key for check in plan.checks])
            conflicts = [ch for ch in plan.checks if latest.get(ch.key, 0) > ch.max_version]
            if conflicts:
                revision = _apply_update(c, plan.on_conflict)
                return CommitOutcome(False, 0, revision, conflicts, [])
            revision = _apply_update(c, plan.on_success)
            version = 0
            if plan.writes:
                version = c.execute(
                    "UPDATE meta SET value = value + 1 WHERE name = 'commit_seq' RETURNING value"
                ).fetchone()[0]
                c.executemany(
                    "INSERT INTO kv (tenant, key, version, value) VALUES (?,?,?,?)",
                    [(tenant, k, version, v) for k, v in plan.writes.items()],
                )
            now = plan.on_success.now
            status = "delivering" if plan.claim_until > 0 else "pending"
            outbox = [
                outbox_row(
                    c.execute(
                        "INSERT INTO outbox (tenant, tx_id, step_id, channel, payload, "
                        "idempotency_key, status, attempts, next_attempt_at, last_error, "
                        "created_at, delivered_at, lease_until) "
                        f"VALUES (?,?,?,?,?,?,?,0,?,'',?,0,?) RETURNING {OUTBOX_COLS}",
                        (tenant, tx_id, e.step_id, e.channel, e.payload_json, e.idempotency_key,
                         status, now, now, plan.claim_until),
                    ).fetchone()
                )
                for e in plan.effects
            ]  # fmt: skip
            c.execute("DELETE FROM undo WHERE tx_id = ?", (tx_id,))
            return CommitOutcome(True, version, revision, [], outbox)

        return await self._write(unit)

    # -- managed state ------------------------------------------------------------------------

    async def read_state(
        self, tenant: str, key: str, at_version: int | None
    ) -> tuple[str | None, int]:
        if at_version is None:
            rows = self._read(
                "SELECT value, version FROM kv WHERE tenant = ? AND key = ? "
                "ORDER BY version DESC LIMIT 1",
                (tenant, key),
            )
        else:
            rows = self._read(
                "SELECT value, version FROM kv WHERE tenant = ? AND key = ? AND version <= ? "
                "ORDER BY version DESC LIMIT 1",
                (tenant, key, at_version),
            )
        if not rows:
            return None, 0
        return rows[0][0], rows[0][1]

    async def current_version(self) -> int:
        return int(self._read("SELECT value FROM meta WHERE name = 'commit_seq'")[0][0])

    async def oldest_open_snapshot(self) -> int | None:
        rows = self._read(
            "SELECT min(snapshot) FROM transactions "
            "WHERE status NOT IN ('COMMITTED', 'ROLLED_BACK', 'FAILED')"
        )
        return None if rows[0][0] is None else int(rows[0][0])

    async def prune_versions(self, horizon: int) -> int:
        def unit(c: sqlite3.Connection) -> int:
            # Keep, per key, every version above the horizon and the newest one at or below it
            # (what a snapshot at the horizon reads); older ones are invisible to everyone.
            cur = c.execute(
                "DELETE FROM kv WHERE version < (SELECT max(k2.version) FROM kv k2 "
                "WHERE k2.tenant = kv.tenant AND k2.key = kv.key AND k2.version <= ?)",
                (horizon,),
            )
            return cur.rowcount

        return await self._write(unit)

    # -- outbox -------------------------------------------------------------------------------

    async def claim_outbox(
        self, *, now: float, lease_secs: float, limit: int, ids: Sequence[int] = ()
    ) -> list[OutboxRow]:
        def unit(c: sqlite3.Connection) -> list[OutboxRow]:
            due = (
                "((status = 'pending' AND next_attempt_at <= ?) "
                "OR (status = 'delivering' AND lease_until <= ?))"
            )
            params: list[Any] = [now, now]
            if ids:
                due += f" AND id IN ({','.join('?' * len(ids))})"
                params.extend(ids)
            rows = c.execute(
                f"UPDATE outbox SET status = 'delivering', lease_until = ? WHERE id IN "
                f"(SELECT id FROM outbox WHERE {due} ORDER BY id LIMIT ?) "
                f"RETURNING {OUTBOX_COLS}",
                [now + lease_secs, *params, limit],
            ).fetchall()
            return sorted((outbox_row(r) for r in rows), key=lambda r: r.id)

        return await self._write(unit)

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
        await self._write(
            lambda c: c.execute(
                "UPDATE outbox SET status = ?, attempts = ?, next_attempt_at = ?, "
                "last_error = ?, delivered_at = ?, lease_until = 0 WHERE id = ?",
                (status, attempts, next_attempt_at, error, delivered, row_id),
            )
        )

    async def list_outbox(
        self, *, statuses: Sequence[str] = (), tx_id: str | None = None, limit: int = 1000
    ) -> list[OutboxRow]:
        where, params = outbox_filters("?", statuses=statuses, tx_id=tx_id)
        query = f"SELECT {OUTBOX_COLS} FROM outbox WHERE {where} ORDER BY id LIMIT ?"
        return [outbox_row(r) for r in self._read(query, [*params, limit])]

    async def outbox_counts(self) -> dict[str, int]:
        return outbox_counts(self._read("SELECT status, count(*) FROM outbox GROUP BY status"))

    async def release_claims(self, *, now: float) -> int:
        def unit(c: sqlite3.Connection) -> int:
            return c.execute(
                "UPDATE outbox SET status = 'pending', lease_until = 0, next_attempt_at = ? "
                "WHERE status = 'delivering'",
                (now,),
            ).rowcount

        return await self._write(unit)

    async def requeue_outbox(self, row_id: int, *, now: float) -> bool:
        def unit(c: sqlite3.Connection) -> bool:
            cur = c.execute(
                "UPDATE outbox SET status = 'pending', next_attempt_at = ?, attempts = 0 "
                "WHERE id = ? AND status = 'dead'",
                (now, row_id),
            )
            return cur.rowcount == 1

        return await self._write(unit)

    # -- request idempotency --------------------------------------------------------------------

    async def get_request(self, tenant: str, request_id: str) -> StoredReply | None:
        rows = self._read(
            "SELECT request_id, method, payload_hash, reply, created_at FROM requests "
            "WHERE tenant = ? AND request_id = ?",
            (tenant, request_id),
        )
        return StoredReply(*rows[0]) if rows else None

    async def put_request(self, tenant: str, reply: StoredReply) -> StoredReply:
        def unit(c: sqlite3.Connection) -> StoredReply:
            cur = c.execute(
                "INSERT OR IGNORE INTO requests (tenant, request_id, method, payload_hash, "
                "reply, created_at) VALUES (?,?,?,?,?,?)",
                (
                    tenant, reply.request_id, reply.method, reply.payload_hash,
                    reply.reply_json, reply.created_at,
                ),
            )  # fmt: skip
            if cur.rowcount == 1:
                return reply  # stored: the first reply for this id
            row = c.execute(
                "SELECT request_id, method, payload_hash, reply, created_at FROM requests "
                "WHERE tenant = ? AND request_id = ?",
                (tenant, reply.request_id),
            ).fetchone()
            return StoredReply(*row)

        return await self._write(unit)

    async def prune_requests(self, older_than: float) -> int:
        def unit(c: sqlite3.Connection) -> int:
            return c.execute("DELETE FROM requests WHERE created_at < ?", (older_than,)).rowcount

        return await self._write(unit)
