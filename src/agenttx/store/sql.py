"""The SQL of the relational stores, written once: the schema, every shared statement, and the
mapping between rows and the contract's dataclasses.

Dialect rules every statement here keeps, so both stores run it as written:

- Placeholders are ``?``; the PostgreSQL store renders them as ``%s`` before psycopg sees the
  text. So no statement here may hold a literal ``?`` or ``%``.
- Types use PostgreSQL's names. SQLite maps each to the same storage by its affinity rules
  (``BIGINT`` → integer, ``DOUBLE PRECISION`` → real, ``BOOLEAN`` → 0/1), which is why the
  two schemas differ only in the two slots of ``schema``.
- Booleans are compared with ``TRUE``/``FALSE`` (SQLite reads them as 1/0).
- Upserts are ``ON CONFLICT … DO …`` and new rows come back with ``RETURNING``; both stores'
  engines have them (SQLite since 3.35).

What one dialect needs and the other lacks (PostgreSQL's ``kv_head`` lock rows, ``SKIP
LOCKED``, ``NOTIFY``, a step written in one statement) stays in that dialect's module.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from agenttx.audit import AuditRecord, ChainHead
from agenttx.errors import AlreadyExists, InternalError, RevisionConflict
from agenttx.jsontext import compact
from agenttx.store.contract import OutboxRow, StepRow, StoredReply, TxRow, TxUpdate, UndoRow

TX_COLS = (
    "id, tenant, agent_id, status, revision, next_step_id, snapshot, isolation, body, "
    "created_at, updated_at, last_activity_at, audit_seq"
)
STEP_COLS = (
    "tx_id, seq, step_id, attempt, epoch, tool, effect, status, live, arguments, output, "
    "raw_context, detail, started_at, finished_at, lease_owner, lease_until"
)
OUTBOX_COLS = (
    "id, tenant, tx_id, step_id, channel, payload, idempotency_key, status, attempts, "
    "next_attempt_at, last_error, created_at, delivered_at"
)
UNDO_COLS = (
    "id, tx_id, step_id, handler, args, idempotency_key, status, attempts, last_error, created_at"
)
# ``tx_id`` last: a row reads back as ``StoredReply(*row)``.
REQUEST_COLS = "request_id, method, payload_hash, reply, created_at, tx_id"
AUDIT_COLS = "tx_id, seq, kind, at, body, hash"
OUTBOX_STATUSES = ("pending", "delivering", "delivered", "dead")

# The schema's shape, recorded by each store (SQLite ``user_version``, PostgreSQL
# ``agenttx_schema``); a store newer than this code is refused. 1: the first schema;
# 2: the ``transactions_by_age`` index (listings oldest first). A SQLite file left at 2 by the
# withdrawn one-statement step write opens too: its extra view is never used. 3: the
# ``audit`` table (the hash chains); opening an older store starts a chain for each
# transaction it holds (``audit.started``). 4: ``transactions.audit_seq``, the watermark of
# batched step records; opening an older store adds it (``ADD_AUDIT_SEQ``) set past every step
# the store holds, whose records were all written with their steps (``FILL_AUDIT_SEQ``).
# 5: the ``audit_tombstones`` table (a pruned transaction's chain end); an older store gains
# it empty (its transactions pruned before have none: their chains verify as before).
# 6: ``requests.tx_id``, the transaction each stored reply's call acted on (a lookup by request
# id, ``Engine.find_transaction``); an older store gains it as "" for the replies it holds.
# 7: fewer pages per step write (issue 24): ``transactions_status`` (status, last_activity_at)
# became ``transactions_by_status`` (status), and ``steps_by_step`` went; an older store drops
# both and builds the new one (``DROPPED_INDEXES``, in the schema itself).
SCHEMA_VERSION = 7
AUDIT_SINCE_VERSION = 3  # stores older than this get their chains started on open
AUDIT_SEQ_SINCE_VERSION = 4  # stores older than this get ``transactions.audit_seq`` on open
REQUEST_TX_SINCE_VERSION = 6  # stores older than this get ``requests.tx_id`` on open


def newer_schema(version: int) -> InternalError:
    """The refusal to open a store whose schema a newer AgentTx made."""
    return InternalError(
        f"store schema version {version} is newer than this AgentTx ({SCHEMA_VERSION}); run "
        "the AgentTx release that made it (or a newer one), or use another store"
    )


def schema(*, serial_key: str, clustered: str) -> tuple[str, ...]:
    """The tables and indexes, each statement safe to run again (``IF NOT EXISTS``).

    ``serial_key`` is an auto-numbered 64-bit primary key (SQLite ``INTEGER PRIMARY KEY``,
    PostgreSQL ``BIGSERIAL PRIMARY KEY``); ``clustered`` ends a table stored in its primary
    key's order (SQLite ``WITHOUT ROWID``; PostgreSQL has no such clause)."""
    return (
        "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "INSERT INTO meta VALUES ('commit_seq', 0) ON CONFLICT DO NOTHING",
        """CREATE TABLE IF NOT EXISTS transactions (
          id TEXT PRIMARY KEY, tenant TEXT NOT NULL, agent_id TEXT NOT NULL,
          status TEXT NOT NULL, revision BIGINT NOT NULL, next_step_id INTEGER NOT NULL,
          snapshot BIGINT NOT NULL, isolation TEXT NOT NULL, body TEXT NOT NULL,
          created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
          last_activity_at DOUBLE PRECISION NOT NULL,
          audit_seq BIGINT NOT NULL DEFAULT 0)""",
        # By status alone: a step moves ``last_activity_at`` (and ``status = ?`` is left out
        # of its CAS when it stays), so no step rewrites an entry here; the idle reaper reads
        # the open rows' activity from the rows themselves.
        "CREATE INDEX IF NOT EXISTS transactions_by_status ON transactions (status)",
        # Listings go oldest first and continue from the last row a page ended on.
        "CREATE INDEX IF NOT EXISTS transactions_by_age ON transactions (created_at, id)",
        f"""CREATE TABLE IF NOT EXISTS steps (
          tx_id TEXT NOT NULL, seq INTEGER NOT NULL, step_id INTEGER NOT NULL,
          attempt INTEGER NOT NULL, epoch INTEGER NOT NULL, tool TEXT NOT NULL,
          effect TEXT NOT NULL, status TEXT NOT NULL, live BOOLEAN NOT NULL,
          arguments TEXT NOT NULL, output TEXT NOT NULL, raw_context TEXT NOT NULL,
          detail TEXT NOT NULL, started_at DOUBLE PRECISION NOT NULL,
          finished_at DOUBLE PRECISION NOT NULL, lease_owner TEXT NOT NULL,
          lease_until DOUBLE PRECISION NOT NULL,
          PRIMARY KEY (tx_id, seq)){clustered}""",
        f"""CREATE TABLE IF NOT EXISTS undo (
          id {serial_key}, tx_id TEXT NOT NULL, step_id INTEGER NOT NULL,
          handler TEXT NOT NULL, args TEXT NOT NULL, idempotency_key TEXT NOT NULL,
          status TEXT NOT NULL, attempts INTEGER NOT NULL, last_error TEXT NOT NULL,
          created_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS undo_by_step ON undo (tx_id, step_id)",
        # Undo records a commit keeps for a later compensation, until their window ends
        # (``docs/compensation.md``); the maintenance pass deletes both rows then.
        """CREATE TABLE IF NOT EXISTS undo_kept (
          undo_id BIGINT PRIMARY KEY, tx_id TEXT NOT NULL,
          expires_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS undo_kept_by_tx ON undo_kept (tx_id)",
        "CREATE INDEX IF NOT EXISTS undo_kept_by_end ON undo_kept (expires_at)",
        f"""CREATE TABLE IF NOT EXISTS outbox (
          id {serial_key}, tenant TEXT NOT NULL, tx_id TEXT NOT NULL,
          step_id INTEGER NOT NULL, channel TEXT NOT NULL, payload TEXT NOT NULL,
          idempotency_key TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
          next_attempt_at DOUBLE PRECISION NOT NULL, last_error TEXT NOT NULL,
          created_at DOUBLE PRECISION NOT NULL, delivered_at DOUBLE PRECISION NOT NULL,
          lease_until DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at)",
        "CREATE INDEX IF NOT EXISTS outbox_by_tx ON outbox (tx_id)",
        f"""CREATE TABLE IF NOT EXISTS requests (
          tenant TEXT NOT NULL, request_id TEXT NOT NULL, method TEXT NOT NULL,
          payload_hash TEXT NOT NULL, reply TEXT NOT NULL,
          created_at DOUBLE PRECISION NOT NULL, tx_id TEXT NOT NULL DEFAULT '',
          PRIMARY KEY (tenant, request_id)){clustered}""",
        "CREATE INDEX IF NOT EXISTS requests_by_age ON requests (created_at)",
        f"""CREATE TABLE IF NOT EXISTS kv (
          tenant TEXT NOT NULL, key TEXT NOT NULL, version BIGINT NOT NULL, value TEXT,
          PRIMARY KEY (tenant, key, version)){clustered}""",
        # The audit chains: never updated or deleted by AgentTx (they outlive the journal);
        # the primary key makes a second record at one position impossible.
        f"""CREATE TABLE IF NOT EXISTS audit (
          tx_id TEXT NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL,
          at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, hash TEXT NOT NULL,
          PRIMARY KEY (tx_id, seq)){clustered}""",
        # Preview receipts (``store/receipts_sql.py``): written by a preview, changed once by
        # its approval; they outlive the transaction as its audit chain does.
        """CREATE TABLE IF NOT EXISTS receipts (
          id TEXT PRIMARY KEY, tx_id TEXT NOT NULL, tenant TEXT NOT NULL,
          revision BIGINT NOT NULL, change_hash TEXT NOT NULL, status TEXT NOT NULL,
          created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
          approved_by TEXT NOT NULL, approved_at DOUBLE PRECISION NOT NULL,
          detail TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS receipts_by_tx ON receipts (tx_id)",
        # Where a chain ended when retention deleted its transaction's row (the row was its
        # anchor): written in the deletion's unit, deleted with the chain (``docs/audit.md``).
        f"""CREATE TABLE IF NOT EXISTS audit_tombstones (
          tx_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, seq BIGINT NOT NULL,
          hash TEXT NOT NULL, revision BIGINT NOT NULL,
          pruned_at DOUBLE PRECISION NOT NULL){clustered}""",
        *(f"DROP INDEX IF EXISTS {name}" for name in DROPPED_INDEXES),
    )


# Indexes an older schema had and this one does not (each was a page or more written by every
# step): dropped by the schema on open. ``steps`` is only ever read by its transaction (the
# primary key's prefix): a rewind's ``UNLIVE_STEPS`` reads that transaction's rows.
DROPPED_INDEXES = ("transactions_status", "steps_by_step")


# -- transactions ---------------------------------------------------------------------------

# The snapshot is the commit counter as the row is written: one statement, so they agree.
INSERT_TX = (
    f"INSERT INTO transactions ({TX_COLS}) VALUES (?,?,?,?,?,?,"
    "(SELECT value FROM meta WHERE name = 'commit_seq'),?,?,?,?,?,?) RETURNING snapshot"
)
SELECT_TX = f"SELECT {TX_COLS} FROM transactions WHERE id = ?"
TX_STATE = "SELECT revision, status FROM transactions WHERE id = ?"
TX_EXISTS = "SELECT 1 FROM transactions WHERE id = ?"
# A listing continues after the row a page ended on: its position (created_at, id) never
# changes, so the id alone is a cursor that neither repeats nor skips a row.
AFTER_TX = "(created_at, id) > (SELECT created_at, id FROM transactions WHERE id = ?)"
LIST_TX_ORDER = "ORDER BY created_at, id LIMIT ?"
BEFORE_TX = "(created_at, id) < (SELECT created_at, id FROM transactions WHERE id = ?)"
LIST_TX_NEWEST = "ORDER BY created_at DESC, id DESC LIMIT ?"  # the same index, read backwards
OLDEST_OPEN_SNAPSHOT = (
    "SELECT min(snapshot) FROM transactions "
    "WHERE status NOT IN ('COMMITTED', 'ROLLED_BACK', 'FAILED', 'COMPENSATED')"
)


def keeps_status(u: TxUpdate) -> bool:
    """True iff ``u`` cannot change the row's status: it applies only from the status it sets
    (a step of an ACTIVE transaction)."""
    return u.from_statuses == (u.status,)


@functools.cache
def cas_sql(
    status_in: Callable[[str, int], str],
    with_body: bool,
    touch: bool,
    n: int,
    seal: bool = False,
    keep_status: bool = False,
) -> str:
    """The compare-and-set UPDATE for one shape of ``TxUpdate`` (it affects one row iff it
    applies), ``status_in`` being the dialect's test for one of ``n`` statuses; ``seal``: it
    sets ``audit_seq`` too; ``keep_status`` (``keeps_status``): it leaves ``status`` out of
    its SET — a column assigned is an index entry rewritten even when its value stays, and
    SQLite would write a page of ``transactions_by_status`` on every step. Built once per
    shape: a form of it runs on every step."""
    sets = "revision = ?, next_step_id = ?, updated_at = ?"
    if not keep_status:
        sets = "status = ?, " + sets
    if with_body:
        sets += ", body = ?"
    if touch:
        sets += ", last_activity_at = ?"
    if seal:
        sets += ", audit_seq = ?"
    test = status_in("status", n)
    return f"UPDATE transactions SET {sets} WHERE id = ? AND revision = ? AND {test}"


def cas_params(u: TxUpdate, statuses: Sequence[Any]) -> list[Any]:
    """The parameters of ``cas_sql`` for ``u``; ``statuses`` as the dialect passes a list."""
    params: list[Any] = [u.expected_revision + 1, u.next_step_id, u.now]
    if not keeps_status(u):
        params.insert(0, u.status)
    if u.body is not None:
        params.append(compact(u.body))
    if u.touch_activity:
        params.append(u.now)
    if u.audit_seq > 0:
        params.append(u.audit_seq)
    params.append(u.tx_id)
    params.append(u.expected_revision)
    params.extend(statuses)
    return params


def revision_conflict(u: TxUpdate, found: Sequence[Any] | None) -> RevisionConflict:
    """The error for a compare-and-set that did not apply; ``found`` is the row's
    ``TX_STATE`` as it is now (None if the row is gone)."""
    if found is None:
        return RevisionConflict(f"transaction {u.tx_id} no longer exists")
    return RevisionConflict(
        f"transaction {u.tx_id} changed concurrently (revision {found[0]}, status {found[1]}; "
        f"expected revision {u.expected_revision} in {'/'.join(u.from_statuses)})"
    )


# -- steps, undo log --------------------------------------------------------------------------

STEP_MARKS = ",".join("?" * 17)
# The same seq replaces the attempt (RUNNING becomes its final row); what identifies the
# attempt (step, attempt, epoch, tool, start) stays as first written.
STEP_UPSERT = (
    "ON CONFLICT (tx_id, seq) DO UPDATE SET status = excluded.status, live = excluded.live, "
    "arguments = excluded.arguments, output = excluded.output, detail = excluded.detail, "
    "finished_at = excluded.finished_at, lease_owner = excluded.lease_owner, "
    "lease_until = excluded.lease_until"
)
UPSERT_STEP = f"INSERT INTO steps ({STEP_COLS}) VALUES ({STEP_MARKS}) {STEP_UPSERT}"
LOAD_STEPS = f"SELECT {STEP_COLS} FROM steps WHERE tx_id = ? AND seq > ? ORDER BY seq"
LOAD_LIVE_STEPS = (
    f"SELECT {STEP_COLS} FROM steps WHERE tx_id = ? AND seq > ? AND live = TRUE ORDER BY seq"
)
UNLIVE_STEPS = "UPDATE steps SET live = FALSE WHERE tx_id = ? AND step_id >= ? AND live = TRUE"

LOAD_UNDO = f"SELECT {UNDO_COLS} FROM undo WHERE tx_id = ? ORDER BY id"
INSERT_UNDO = (
    "INSERT INTO undo (tx_id, step_id, handler, args, idempotency_key, status, attempts, "
    "last_error, created_at) VALUES (?,?,?,?,?,?,?,?,?) RETURNING id"
)
SET_UNDO_STATUS = "UPDATE undo SET status = ?, attempts = ?, last_error = ? WHERE id = ?"
DROP_DONE_UNDO = "DELETE FROM undo WHERE tx_id = ? AND step_id >= ? AND status = 'done'"
DROP_UNDO = "DELETE FROM undo WHERE tx_id = ?"
KEEP_UNDO = "INSERT INTO undo_kept (undo_id, tx_id, expires_at) VALUES (?,?,?)"
DROP_UNKEPT_UNDO = (
    "DELETE FROM undo WHERE tx_id = ? AND id NOT IN (SELECT undo_id FROM undo_kept WHERE tx_id = ?)"
)
PRUNE_KEPT_UNDO = (
    "DELETE FROM undo WHERE id IN (SELECT undo_id FROM undo_kept WHERE expires_at <= ?)"
)
PRUNE_UNDO_KEPT = "DELETE FROM undo_kept WHERE expires_at <= ?"

# -- managed state and commit -----------------------------------------------------------------

# The commit counter's row: a commit that publishes writes takes the next number here.
NEXT_VERSION = "UPDATE meta SET value = value + 1 WHERE name = 'commit_seq' RETURNING value"
CURRENT_VERSION = "SELECT value FROM meta WHERE name = 'commit_seq'"
INSERT_KV = "INSERT INTO kv (tenant, key, version, value) VALUES (?,?,?,?)"
READ_STATE = (
    "SELECT value, version FROM kv WHERE tenant = ? AND key = ? ORDER BY version DESC LIMIT 1"
)
READ_STATE_AT = (
    "SELECT value, version FROM kv WHERE tenant = ? AND key = ? AND version <= ? "
    "ORDER BY version DESC LIMIT 1"
)
# Keep, per key, every version above the horizon and the newest one at or below it (what a
# snapshot at the horizon reads); older ones are invisible to everyone.
PRUNE_VERSIONS = (
    "DELETE FROM kv WHERE version < (SELECT max(k2.version) FROM kv k2 "
    "WHERE k2.tenant = kv.tenant AND k2.key = kv.key AND k2.version <= ?)"
)

# -- outbox -------------------------------------------------------------------------------------

OUTBOX_INSERT_COLS = (
    "tenant, tx_id, step_id, channel, payload, idempotency_key, status, attempts, "
    "next_attempt_at, last_error, created_at, delivered_at, lease_until"
)
INSERT_OUTBOX = (
    f"INSERT INTO outbox ({OUTBOX_INSERT_COLS}) "
    f"VALUES (?,?,?,?,?,?,?,0,?,'',?,0,?) RETURNING {OUTBOX_COLS}"
)
OUTBOX_DUE = (
    "((status = 'pending' AND next_attempt_at <= ?) "
    "OR (status = 'delivering' AND lease_until <= ?))"
)


def claim_outbox_sql(due: str, row_lock: str) -> str:
    """Lease the due rows ``due`` selects; ``row_lock`` is how the dialect keeps two
    claimers off one row (SQLite: nothing, its writer is alone)."""
    return (
        f"UPDATE outbox SET status = 'delivering', lease_until = ? WHERE id IN "
        f"(SELECT id FROM outbox WHERE {due} ORDER BY id LIMIT ?{row_lock}) "
        f"RETURNING {OUTBOX_COLS}"
    )


SETTLE_OUTBOX = (
    "UPDATE outbox SET status = ?, attempts = ?, next_attempt_at = ?, last_error = ?, "
    "delivered_at = ?, lease_until = 0 WHERE id = ?"
)
RELEASE_CLAIMS = (
    "UPDATE outbox SET status = 'pending', lease_until = 0, next_attempt_at = ? "
    "WHERE status = 'delivering'"
)
REQUEUE_OUTBOX = (
    "UPDATE outbox SET status = 'pending', next_attempt_at = ?, attempts = 0 "
    "WHERE id = ? AND status = 'dead'"
)
OUTBOX_COUNTS = "SELECT status, count(*) FROM outbox GROUP BY status"


def owned_by(tx_principal: str) -> str:
    """A test that an outbox row's transaction was begun by the principal passed as its one
    parameter; ``tx_principal`` is the dialect's reading of ``t.body``'s principal. A row
    whose transaction is gone passes no owner test (only a reader of every transaction, an
    admin or approver, sees it). One primary-key lookup per row the page reads."""
    return f"EXISTS (SELECT 1 FROM transactions t WHERE t.id = outbox.tx_id AND {tx_principal} = ?)"


# -- request idempotency --------------------------------------------------------------------

# Inside an operation's own unit (begin, a step, a commit) a reply is "first wins": RETURNING
# yields nothing if the id held anything, which the unit turns into AlreadyExists (rolling
# the operation back with it).
_FIRST_WINS = "ON CONFLICT DO NOTHING RETURNING request_id"
# A reply (or claim) that fills in (or takes over) a claim of the same method and payload;
# RETURNING yields nothing if the id holds another request's claim, or any reply.
_FILLS_CLAIM = (
    "ON CONFLICT (tenant, request_id) DO UPDATE SET reply = excluded.reply, "
    "created_at = excluded.created_at WHERE requests.reply = '' "
    "AND requests.method = excluded.method AND requests.payload_hash = excluded.payload_hash "
    "RETURNING request_id"
)
INSERT_REQUEST = (
    f"INSERT INTO requests (tenant, {REQUEST_COLS}) VALUES (?,?,?,?,?,?,?) {_FIRST_WINS}"
)
PUT_REQUEST = f"INSERT INTO requests (tenant, {REQUEST_COLS}) VALUES (?,?,?,?,?,?,?) {_FILLS_CLAIM}"
# The same for a step's reply, under the tenant of the step's transaction (parameters:
# ``tx_request_values``). SQLite needs the WHERE to read ON CONFLICT as an upsert.
_FOR_TX = (
    f"INSERT INTO requests (tenant, {REQUEST_COLS}) "
    "SELECT tenant, ?,?,?,?,?,? FROM transactions WHERE id = ?"
)
INSERT_TX_REQUEST = f"{_FOR_TX} {_FIRST_WINS}"
CLAIM_TX_REQUEST = f"{_FOR_TX} {_FILLS_CLAIM}"
# By the primary key: also the lookup of the transaction a request id names (its ``tx_id``).
GET_REQUEST = f"SELECT {REQUEST_COLS} FROM requests WHERE tenant = ? AND request_id = ?"
PRUNE_REQUESTS = "DELETE FROM requests WHERE created_at < ?"

# -- retention --------------------------------------------------------------------------------

# Ended, older than the horizon, and no effect left to deliver (a delivery writes to the row).
# Kept: a transaction with an effect not yet delivered (its delivery writes to it) or with
# undo records a commit kept for a compensation whose window has not ended (compensate needs
# the transaction and its steps; ``prune_kept_undo`` drops those records when the window ends).
ENDED_BEFORE = (
    "SELECT id FROM transactions t WHERE status IN "
    "('COMMITTED', 'ROLLED_BACK', 'FAILED', 'COMPENSATED') "
    "AND updated_at < ? AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.tx_id = t.id "
    "AND o.status <> 'delivered') "
    "AND NOT EXISTS (SELECT 1 FROM undo_kept k WHERE k.tx_id = t.id) ORDER BY updated_at LIMIT ?"
)
# The chain's head as the row is deleted (the same tests as ``DELETE_ENDED``, in its unit, so
# a tombstone exists iff the row went); nothing for a transaction without a chain.
RECORD_TOMBSTONE = (
    "INSERT INTO audit_tombstones (tx_id, tenant, seq, hash, revision, pruned_at) "
    "SELECT t.id, t.tenant, a.seq, a.hash, t.revision, ? FROM transactions t "
    "JOIN audit a ON a.tx_id = t.id WHERE t.id = ? "
    "AND t.status IN ('COMMITTED', 'ROLLED_BACK', 'FAILED', 'COMPENSATED') AND t.updated_at < ? "
    "ORDER BY a.seq DESC LIMIT 1 ON CONFLICT DO NOTHING"
)
DELETE_TOMBSTONE = "DELETE FROM audit_tombstones WHERE tx_id = ?"
TOMBSTONE = "SELECT seq, hash FROM audit_tombstones WHERE tx_id = ?"
DELETE_STEPS = "DELETE FROM steps WHERE tx_id = ?"
DELETE_UNDO = "DELETE FROM undo WHERE tx_id = ?"
DELETE_RECEIPTS = "DELETE FROM receipts WHERE tx_id = ?"  # previews of a pruned transaction
# The status test again: a terminal status never changes, but the row is re-checked anyway.
DELETE_ENDED = (
    "DELETE FROM transactions WHERE id = ? "
    "AND status IN ('COMMITTED', 'ROLLED_BACK', 'FAILED', 'COMPENSATED') AND updated_at < ?"
)
PRUNE_DELIVERED = "DELETE FROM outbox WHERE status = 'delivered' AND delivered_at < ?"
# Dead letters whose last attempt is older than the horizon (a dead row's next_attempt_at; the
# outbox_due index covers both columns), unless their transaction is still open (not in a
# terminal status); one whose transaction is gone has nothing left to keep it.
PRUNE_DEAD = (
    "DELETE FROM outbox WHERE status = 'dead' AND next_attempt_at < ? AND NOT EXISTS "
    "(SELECT 1 FROM transactions t WHERE t.id = outbox.tx_id AND t.status NOT IN "
    "('COMMITTED', 'ROLLED_BACK', 'FAILED', 'COMPENSATED'))"
)
# Chains whose newest record is older than the horizon and whose transaction is gone; each
# chain is deleted by one statement (all its records or none).
AUDIT_EXPIRED = (
    "SELECT a.tx_id FROM audit a WHERE NOT EXISTS "
    "(SELECT 1 FROM transactions t WHERE t.id = a.tx_id) "
    "GROUP BY a.tx_id HAVING max(a.at) < ? LIMIT ?"
)
DELETE_CHAIN = (
    "DELETE FROM audit WHERE tx_id = ? AND NOT EXISTS "
    "(SELECT 1 FROM transactions t WHERE t.id = ?) "
    "AND (SELECT max(at) FROM audit b WHERE b.tx_id = ?) < ?"
)

# -- audit chains -----------------------------------------------------------------------------

# A position already taken inserts nothing (the caller turns that into RevisionConflict).
INSERT_AUDIT = f"INSERT INTO audit ({AUDIT_COLS}) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING"
AUDIT_KEY = "audit_pkey"  # PostgreSQL's name of the primary key a taken position hits
AUDIT_ROWS = 256  # records per INSERT (six parameters each: far below either driver's limit)


@functools.lru_cache(maxsize=64)
def insert_audit_sql(n: int) -> str:
    """``INSERT_AUDIT`` of ``n`` records in one statement: a write that chains a batch of
    pending step records costs one statement (on PostgreSQL one round trip), not ``n``. It
    affects fewer than ``n`` rows iff a position was taken."""
    return (
        f"INSERT INTO audit ({AUDIT_COLS}) VALUES {','.join(['(?,?,?,?,?,?)'] * n)} "
        "ON CONFLICT DO NOTHING"
    )


def audit_batch_values(records: Sequence[AuditRecord]) -> list[Any]:
    """The parameters of ``insert_audit_sql(len(records))``."""
    return [v for r in records for v in (r.tx_id, r.seq, r.kind, r.at, r.body, r.hash)]


LOAD_AUDIT = f"SELECT {AUDIT_COLS} FROM audit WHERE tx_id = ? AND seq > ? ORDER BY seq LIMIT ?"
AUDIT_HEAD = "SELECT seq, hash FROM audit WHERE tx_id = ? ORDER BY seq DESC LIMIT 1"
# Every transaction with a chain, a row or a tombstone: a row or tombstone whose chain was
# removed whole is listed too.
LIST_AUDITED = (
    "SELECT tx_id FROM audit WHERE tx_id > ? UNION SELECT id FROM transactions WHERE id > ? "
    "UNION SELECT tx_id FROM audit_tombstones WHERE tx_id > ? ORDER BY 1 LIMIT ?"
)
# What opening a store older than the chains starts one for: every transaction it holds.
UNCHAINED_TX = (
    "SELECT id, tenant, revision, status, next_step_id FROM transactions t WHERE NOT EXISTS "
    "(SELECT 1 FROM audit a WHERE a.tx_id = t.id) ORDER BY id"
)
TX_REVISION = "SELECT tenant, revision FROM transactions WHERE id = ?"
# A write that chained pending step records moves the watermark past them (never back).
SET_AUDIT_SEQ = "UPDATE transactions SET audit_seq = ? WHERE id = ? AND audit_seq < ?"
# The step records not chained yet: successful steps after the watermark (``docs/audit.md``).
PENDING_STEPS = (
    "SELECT count(*) FROM steps s JOIN transactions t ON t.id = s.tx_id "
    "WHERE s.tx_id = ? AND s.seq > t.audit_seq AND s.status = 'SUCCESS'"
)
# Migrating to schema 4: the column (PostgreSQL adds ``IF NOT EXISTS``; SQLite has no such
# clause and checks first), set past every step the store holds: each had its record written
# with it then.
ADD_AUDIT_SEQ = "ALTER TABLE transactions ADD COLUMN audit_seq BIGINT NOT NULL DEFAULT 0"
FILL_AUDIT_SEQ = (
    "UPDATE transactions SET audit_seq = "
    "(SELECT coalesce(max(s.seq), 0) FROM steps s WHERE s.tx_id = transactions.id)"
)
OUTBOX_ATTEMPTS = "SELECT id, attempts FROM outbox WHERE tx_id = ?"
# Migrating to schema 6: the column (PostgreSQL adds ``IF NOT EXISTS``; SQLite checks first).
# The replies an older store holds get "": their transaction is not recorded, and a lookup
# reads it from the reply where it says (``core/lookup.py``).
ADD_REQUEST_TX = "ALTER TABLE requests ADD COLUMN tx_id TEXT NOT NULL DEFAULT ''"


def chain_taken(r: AuditRecord) -> RevisionConflict:
    """The error for a record whose position in its chain another append took first."""
    return RevisionConflict(
        f"transaction {r.tx_id}: audit record {r.seq} was appended concurrently"
    )


def audit_values(r: AuditRecord) -> tuple[Any, ...]:
    return (r.tx_id, r.seq, r.kind, r.at, r.body, r.hash)


def audit_row(r: Sequence[Any]) -> AuditRecord:
    return AuditRecord(r[0], int(r[1]), r[2], float(r[3]), r[4], r[5])


def chain_head(rows: Sequence[Sequence[Any]]) -> ChainHead:
    return ChainHead(int(rows[0][0]), str(rows[0][1])) if rows else ChainHead(0, "")


# -- rows -------------------------------------------------------------------------------------


def tx_values(t: TxRow) -> tuple[Any, ...]:
    """``INSERT_TX``'s parameters (the snapshot comes from the database)."""
    return (
        t.id, t.tenant, t.agent_id, t.status, t.revision, t.next_step_id, t.isolation,
        compact(t.body), t.created_at, t.updated_at, t.last_activity_at, t.audit_seq,
    )  # fmt: skip


def tx_row(r: Sequence[Any]) -> TxRow:
    return TxRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]), r[9], r[10], r[11],
        int(r[12]),
    )  # fmt: skip


def step_row(r: Sequence[Any]) -> StepRow:
    return StepRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]), r[9], r[10], r[11],
        json.loads(r[12]), r[13], r[14], r[15], r[16],
    )  # fmt: skip


def step_values(s: StepRow) -> tuple[Any, ...]:
    return (
        s.tx_id, s.seq, s.step_id, s.attempt, s.epoch, s.tool, s.effect, s.status, s.live,
        s.arguments_json, s.output_json, s.raw_context, compact(s.detail), s.started_at,
        s.finished_at, s.lease_owner, s.lease_until,
    )  # fmt: skip


def undo_values(u: UndoRow) -> tuple[Any, ...]:
    """``INSERT_UNDO``'s parameters (the id comes from the database)."""
    return (
        u.tx_id, u.step_id, u.handler, u.args_json, u.idempotency_key, u.status, u.attempts,
        u.last_error, u.created_at,
    )  # fmt: skip


def request_values(tenant: str, r: StoredReply) -> tuple[Any, ...]:
    return (tenant, r.request_id, r.method, r.payload_hash, r.reply_json, r.created_at, r.tx_id)


def tx_request_values(tx_id: str, r: StoredReply) -> tuple[Any, ...]:
    """The parameters of ``INSERT_TX_REQUEST`` and ``CLAIM_TX_REQUEST``: the reply's, then
    the transaction whose tenant it is stored under."""
    return (*request_values("", r)[1:], tx_id)


def request_taken(r: StoredReply) -> AlreadyExists:
    """The error for a reply (or claim) whose request id another request holds already: the
    unit that carried it is rolled back, and the caller reads what is stored."""
    return AlreadyExists(
        f"request_id {r.request_id!r} is already held by another request", request_id=r.request_id
    )


def outbox_row(r: Sequence[Any]) -> OutboxRow:
    return OutboxRow(*r)


def undo_row(r: Sequence[Any]) -> UndoRow:
    return UndoRow(*r)


def outbox_counts(rows: Sequence[Sequence[Any]]) -> dict[str, int]:
    counts = dict.fromkeys(OUTBOX_STATUSES, 0)
    for status, n in rows:
        counts[str(status)] = int(n)
    return counts
