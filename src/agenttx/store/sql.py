"""SQL shared by the relational stores: column lists, row mapping and filter building.

Each backend keeps only what its dialect needs (placeholders, locking, upserts); everything
both write the same way lives here, so the two stores cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agenttx.jsontext import compact
from agenttx.store.contract import OutboxRow, StepRow, TxRow, UndoRow

TX_COLS = (
    "id, tenant, agent_id, status, revision, next_step_id, snapshot, isolation, body, "
    "created_at, updated_at, last_activity_at"
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
REQUEST_COLS = "request_id, method, payload_hash, reply, created_at"
TERMINAL_STATUSES = ("COMMITTED", "ROLLED_BACK", "FAILED")
OUTBOX_STATUSES = ("pending", "delivering", "delivered", "dead")


def dumps(obj: Any) -> str:
    return compact(obj)


def tx_row(r: Sequence[Any]) -> TxRow:
    return TxRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8]), *r[9:12])


def step_row(r: Sequence[Any]) -> StepRow:
    return StepRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8]), r[9], r[10], r[11],
        json.loads(r[12]), r[13], r[14], r[15], r[16],
    )  # fmt: skip


def step_values(s: StepRow) -> tuple[Any, ...]:
    return (
        s.tx_id, s.seq, s.step_id, s.attempt, s.epoch, s.tool, s.effect, s.status, s.live,
        s.arguments_json, s.output_json, s.raw_context, dumps(s.detail), s.started_at,
        s.finished_at, s.lease_owner, s.lease_until,
    )  # fmt: skip


def outbox_row(r: Sequence[Any]) -> OutboxRow:
    return OutboxRow(*r)


def undo_row(r: Sequence[Any]) -> UndoRow:
    return UndoRow(*r)


def in_list(column: str, values: Sequence[Any] | range, mark: str) -> str:
    """``column IN (…)`` with one placeholder per value (both drivers accept this form)."""
    return f"{column} IN ({','.join([mark] * len(values))})"


def transaction_filters(
    mark: str,
    *,
    statuses: Sequence[str],
    agent_id: str | None,
    tenant: str | None,
    idle_before: float | None,
    after_id: str,
) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of ``Store.list_transactions``."""
    where: list[str] = [f"id > {mark}"]
    params: list[Any] = [after_id]
    if statuses:
        where.append(in_list("status", statuses, mark))
        params.extend(statuses)
    if agent_id is not None:
        where.append(f"agent_id = {mark}")
        params.append(agent_id)
    if tenant is not None:
        where.append(f"tenant = {mark}")
        params.append(tenant)
    if idle_before is not None:
        where.append(f"last_activity_at < {mark}")
        params.append(idle_before)
    return " AND ".join(where), params


def outbox_filters(
    mark: str, *, statuses: Sequence[str], tx_id: str | None
) -> tuple[str, list[Any]]:
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if statuses:
        where.append(in_list("status", statuses, mark))
        params.extend(statuses)
    if tx_id is not None:
        where.append(f"tx_id = {mark}")
        params.append(tx_id)
    return " AND ".join(where), params


def outbox_counts(rows: Sequence[Sequence[Any]]) -> dict[str, int]:
    counts = dict.fromkeys(OUTBOX_STATUSES, 0)
    for status, n in rows:
        counts[str(status)] = int(n)
    return counts
