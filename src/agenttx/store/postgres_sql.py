"""PostgreSQL's own statements: the one-statement and one-pipeline forms of a begin, a step,
a receipt's decision and a commit, built from ``sql.py``'s parts (``PostgresStore`` runs them).

Every write that must happen only if a compare-and-set applied is a data-modifying CTE that
selects from the CAS (``cas``): data-modifying CTEs all run to their end on the statement's
snapshot, so "only if" is a ``FROM cas`` or ``EXISTS (SELECT 1 FROM cas)``, and the only way
to undo the CAS from inside the statement is for the statement to fail (a taken request id or
audit position does, on its primary key). Placeholders are ``?`` until ``pg`` renders them,
except arrays': ``%b``, psycopg's binary format, whose elements go as they are — in the text
format every quote of a JSON value is escaped through a regular expression, ~30 µs of CPU
a commit's audit record (measured).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from agenttx.audit import AuditRecord
from agenttx.store import sql
from agenttx.store.contract import CommitPlan


@functools.lru_cache(maxsize=1024)
def pg(query: str) -> str:
    """``query`` with psycopg's placeholders (``sql`` writes ``?``, which psycopg reads as
    text); cached, as the same few statements run all the time."""
    return query.replace("?", "%s")


def audit_cte(n: int, source: str) -> str:
    """The data-modifying CTE inserting ``n`` audit records ("" if none), from ``source``
    (``cas``: only if the CAS applied; ``""``: unconditionally). One CTE of six array
    parameters (``audit_params``) whatever ``n``: a write that chains a batch of pending step
    records is planned and bound as cheaply as one record. A position already taken fails
    the statement on the primary key, undoing all of it (see ``step_write``)."""
    if n <= 0:
        return ""
    rows = (
        "unnest(%b::text[], %b::bigint[], %b::text[], %b::double precision[], %b::text[], "
        "%b::text[]) AS a(tx_id, seq, kind, at, body, hash)"
    )
    select = f"SELECT a.* FROM {source}, {rows}" if source else f"SELECT * FROM {rows}"
    return f", aud AS (INSERT INTO audit ({sql.AUDIT_COLS}) {select})"


def audit_params(records: Sequence[AuditRecord]) -> list[Any]:
    """The parameters of ``audit_cte``: one array per column ([] if no records)."""
    if not records:
        return []
    return [
        [r.tx_id for r in records],
        [r.seq for r in records],
        [r.kind for r in records],
        [float(r.at) for r in records],  # a binary array's elements are all of one type
        [r.body for r in records],
        [r.hash for r in records],
    ]


def seal_cte(records: Sequence[AuditRecord], audit_seq: int, source: str) -> str:
    """The CTE that moves the transaction's watermark with records that chained its pending
    step records (``audit_seq`` > 0; ``source`` as in ``audit_cte``); "" if none."""
    if audit_seq <= 0 or not records:
        return ""
    where = f" AND EXISTS (SELECT 1 FROM {source})" if source else ""
    return (
        ", seal AS (UPDATE transactions SET audit_seq = ? "
        f"WHERE id = ? AND audit_seq < ?{where} RETURNING 1)"
    )


def seal_params(records: Sequence[AuditRecord], audit_seq: int) -> list[Any]:
    if audit_seq <= 0 or not records:
        return []
    return [audit_seq, records[0].tx_id, audit_seq]


# The stored reply of a write whose CAS applied, under the transaction's tenant (parameters:
# ``sql.request_values`` without the tenant).
REPLY_FROM_CAS = (
    f", req AS (INSERT INTO requests (tenant, {sql.REQUEST_COLS}) "
    "SELECT tenant, ?,?,?,?,?,? FROM cas)"
)


@functools.lru_cache(maxsize=128)
def step_write(cas: str, with_reply: bool, n_audit: int = 0) -> str:
    """The step write as one statement: the step row (and with ``with_reply`` the stored
    reply, under the transaction's tenant, and the ``n_audit`` records of the update) is
    inserted only if the CAS applied.

    The reply is a plain INSERT, not ``ON CONFLICT DO NOTHING``: data-modifying CTEs all run
    to their end, so the only way for a taken request id to undo the CAS and the step row of
    the same statement is for the statement to fail — which the primary key does."""
    reply = REPLY_FROM_CAS if with_reply else ""
    return pg(
        f"WITH cas AS ({cas} RETURNING tenant){reply}{audit_cte(n_audit, 'cas')} "
        f"INSERT INTO steps ({sql.STEP_COLS}) "
        f"SELECT {sql.STEP_MARKS} FROM cas {sql.STEP_UPSERT} RETURNING 1"
    )


@functools.lru_cache(maxsize=16)
def insert_tx(with_reply: bool, n_audit: int) -> str:
    """A begin, its reply and its audit records in one statement; a taken request id fails it
    (see ``step_write``)."""
    ctes = []
    if with_reply:
        ctes.append(
            f"req AS (INSERT INTO requests (tenant, {sql.REQUEST_COLS}) VALUES (?,?,?,?,?,?,?))"
        )
    audit = audit_cte(n_audit, "").removeprefix(", ")
    if audit:
        ctes.append(audit)
    return pg(f"WITH {', '.join(ctes)} {sql.INSERT_TX}" if ctes else sql.INSERT_TX)


# A condition that holds once the transaction-scoped advisory lock is held (the function
# returns void, which is not null): an InitPlan, evaluated once, before any row is taken.
XACT_LOCK = " AND (SELECT pg_advisory_xact_lock(?)) IS NOT NULL"


# The newest committed version of each of many keys (a preview's batch read).
READ_STATES = (
    "SELECT DISTINCT ON (key) key, value, version FROM kv WHERE tenant = ? AND key = ANY(?) "
    "ORDER BY key, version DESC"
)


# -- the commit: one pipeline, one round trip (``PostgresStore.commit``) ----------------------
#
# LOCK_HEADS, then COMMIT_WRITE (it applies iff no check finds a newer version), then
# COMMIT_CONFLICT (it applies iff one does), in one pipeline: no statement waits on another's
# result, so the commit is one round trip and, ended by one Sync, one server transaction.

# A key never written, checked or to be written, gets a head at 0, so it has a row to lock
# (a head at 0 reads as no version, as a written key's head does until its commit applies).
ADD_HEADS = pg(
    "INSERT INTO kv_head (tenant, key, version) "
    "SELECT ?, k, 0 FROM unnest(%b::text[]) AS k ON CONFLICT DO NOTHING"
)
# Locked in key order, so two committers never wait for each other in a cycle. Held to the
# end of the commit: the checks of the statements after it read the heads as they are.
LOCK_HEADS = pg(
    "SELECT key, version FROM kv_head WHERE tenant = ? AND key = ANY(%b::text[]) "
    "ORDER BY key FOR UPDATE"
)
# The checked keys whose newest version is past what their check allows (``check_params``).
_CONFLICTS = (
    "SELECT h.key, h.version FROM kv_head h, "
    "unnest(%b::text[], %b::bigint[]) AS c(key, max_version) "
    "WHERE h.tenant = ? AND h.key = c.key AND h.version > c.max_version"
)


def check_params(plan: CommitPlan) -> list[Any]:
    return [[c.key for c in plan.checks], [c.max_version for c in plan.checks], plan.tenant]


@functools.lru_cache(maxsize=256)
def commit_write(
    cas: str, checked: bool, with_reply: bool, n_audit: int, writes: bool, effects: bool, kept: bool
) -> str:
    """A successful commit as one statement (``commit_write_params``): the CAS of
    ``on_success``, applied only if no check finds a newer version, and, only if it applied,
    the reply, the audit records, the writes at the next version, the outbox rows and the drop
    of the undo log. Its rows: none iff the CAS did not apply; else the version (0 without
    writes) and, with effects, one row per outbox row it inserted, with that row's columns.

    The version is the counter row's, taken in this statement and held to the commit's end,
    so versions become visible in the order they were numbered: a snapshot (the counter's
    value when a transaction began) never sees a smaller version appear later. A bare
    SEQUENCE would hand out numbers without that order, which is why the counter is a row."""
    test = f" AND NOT EXISTS ({_CONFLICTS})" if checked else ""
    ctes = [f"WITH cas AS ({cas}{test} RETURNING tenant)"]
    if with_reply:
        ctes.append(REPLY_FROM_CAS)
    ctes.append(audit_cte(n_audit, "cas"))
    if writes:
        ctes.append(
            ", ver AS (UPDATE meta SET value = value + 1 "
            "WHERE name = 'commit_seq' AND EXISTS (SELECT 1 FROM cas) RETURNING value)"
            ", kv AS (INSERT INTO kv (tenant, key, version, value) SELECT ?, w.key, ver.value, "
            "w.value FROM ver, unnest(%b::text[], %b::text[]) AS w(key, value))"
            ", head AS (UPDATE kv_head SET version = ver.value FROM ver "
            "WHERE kv_head.tenant = ? AND kv_head.key = ANY(%b::text[]))"
        )
    if effects:
        # In the plan's order, so the outbox ids follow it.
        ctes.append(
            f", ob AS (INSERT INTO outbox ({sql.OUTBOX_INSERT_COLS}) "
            "SELECT ?, ?, e.step_id, e.channel, e.payload, e.idempotency_key, ?, 0, ?, '', ?, 0, ? "
            "FROM cas, unnest(%b::integer[], %b::text[], %b::text[], %b::text[]) WITH ORDINALITY "
            "AS e(step_id, channel, payload, idempotency_key, n) ORDER BY e.n "
            f"RETURNING {sql.OUTBOX_COLS})"
        )
    if kept:
        # Records a compensation may still need outlive the commit, until their window.
        ctes.append(
            ", kept AS (INSERT INTO undo_kept (undo_id, tx_id, expires_at) "
            "SELECT k.id, ?, k.expires_at FROM cas, "
            "unnest(%b::bigint[], %b::double precision[]) AS k(id, expires_at))"
            ", undo AS (DELETE FROM undo WHERE tx_id = ? AND id <> ALL(%b::bigint[]) "
            "AND id NOT IN (SELECT undo_id FROM undo_kept WHERE tx_id = ?) "
            "AND EXISTS (SELECT 1 FROM cas))"
        )
    else:
        ctes.append(", undo AS (DELETE FROM undo WHERE tx_id = ? AND EXISTS (SELECT 1 FROM cas))")
    version = "(SELECT value FROM ver)" if writes else "0"
    rows = f"{version}, ob.* FROM cas, ob" if effects else f"{version} FROM cas"
    return pg(f"{''.join(ctes)} SELECT {rows}")


def commit_write_params(plan: CommitPlan, cas_params: Sequence[Any]) -> list[Any]:
    """The parameters of ``commit_write`` for ``plan``, in the order of its placeholders."""
    tx_id, tenant, now = plan.on_success.tx_id, plan.tenant, plan.on_success.now
    params = [*cas_params]
    if plan.checks:
        params += check_params(plan)
    if plan.reply is not None:
        params += sql.request_values("", plan.reply)[1:]
    params += audit_params(plan.on_success.audit)
    if plan.writes:
        keys = list(plan.writes)
        params += [tenant, keys, list(plan.writes.values()), tenant, keys]
    if plan.effects:
        status = "delivering" if plan.claim_until > 0 else "pending"
        params += [tenant, tx_id, status, now, now, plan.claim_until]
        effects = plan.effects
        params += [[e.step_id for e in effects], [e.channel for e in effects]]
        params += [[e.payload_json for e in effects], [e.idempotency_key for e in effects]]
    if plan.keep_undo:
        ids = [u for u, _ in plan.keep_undo]
        params += [tx_id, ids, [float(end) for _, end in plan.keep_undo], tx_id, ids, tx_id]
    else:
        params.append(tx_id)
    return params


@functools.lru_cache(maxsize=64)
def commit_conflict(cas: str, n_audit: int) -> str:
    """A commit that lost validation as one statement (``check_params``, then the CAS's and the
    audit records' parameters): the CAS of ``on_conflict``, applied only if a check finds a
    newer version, with its audit records; its rows, only if it applied: each conflicting
    key and its newest version."""
    return pg(
        f"WITH conflict AS ({_CONFLICTS}), "
        f"cas AS ({cas} AND EXISTS (SELECT 1 FROM conflict) RETURNING tenant)"
        f"{audit_cte(n_audit, 'cas')} SELECT key, version FROM conflict "
        "WHERE EXISTS (SELECT 1 FROM cas)"
    )
