"""Undo actions whose outcome is unknown: the waiting state, and ``reconcile_step`` /
``resolve_step`` of an undo (``docs/compensation.md``, "An undo whose outcome is unknown").

An undo handler that runs past its tool's ``undo_timeout`` or raises ``UncertainOutcome`` may
or may not have undone its step. It is never run again blindly:

- its undo record becomes ``outcome_unknown``, with its ``compensation`` audit record, in the
  write right after the handler gave up — before any other undo runs (the checkpoint). A
  restart reads the status and does not run it again;
- the rollback (or compensating transaction) runs its other undo actions, then **waits**:
  ROLLING_BACK with ``body["rewind"]["undo_unknown"]``, or COMPENSATING with
  ``body["compensation"]["undo_unknown"]``, one record per unknown undo::

      {"undo_id", "step", "tool", "handler", "error", "provider", "operation_id",
       "retry_at", "tries"}

- it is settled by the tool's ``@tool.undo_reconcile`` handler (``reconcile_step(tx, step)``)
  or an operator's word (``resolve_step(tx, step, happened|not_happened)``): ``happened``
  marks the record ``done``; ``not_happened`` marks it ``failed`` (the effect stays; reported,
  the transaction needs a human); ``unknown`` keeps it waiting with a new earliest time. When
  nothing is unknown any more the rollback or compensation goes on where it stopped, as after
  an approval.

The undo records' statuses are the truth (a restart re-derives the waiting state from them);
the records in the plan hold what reconciling needs and what the transaction shows. This
module is the records; ``undo_reconcile`` settles them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agenttx.core.limits import retry_ms
from agenttx.store.contract import UndoRow

UNKNOWN = "outcome_unknown"  # an undo record's status, and its verdict in a plan
_ERROR_CHARS = 500


# ---------------------------------------------------------------------------- the records


def unknown_undo(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The unknown undo actions a rollback or compensation waits on (newest first)."""
    for plan in (body.get("rewind") or {}, body.get("compensation") or {}):
        records = plan.get("undo_unknown")
        if records:
            return sorted(records, key=lambda r: int(r["undo_id"]), reverse=True)
    return []


def unknown_record(
    row: UndoRow,
    tool: str,
    now: float,
    *,
    provider: str = "",
    operation_id: str = "",
    retry_after_ms: int | None = None,
) -> dict[str, Any]:
    """The waiting record of an undo that just became ``outcome_unknown``."""
    return {
        "undo_id": row.id,
        "step": row.step_id,
        "tool": tool,
        "handler": row.handler,
        "error": row.last_error[:_ERROR_CHARS],
        "provider": provider,
        "operation_id": operation_id,
        "retry_at": now + retry_ms(retry_after_ms) / 1000,
        "tries": 0,
    }


def records_for(
    rows: Iterable[UndoRow],
    known: Iterable[Mapping[str, Any]],
    tool_of: Callable[[UndoRow], str],
    now: float,
) -> list[dict[str, Any]]:
    """One record per unknown undo row, newest first: the one already known (kept in the plan,
    or made when the handler gave up), else one from the row alone (a restart after the
    checkpoint, before the plan said it)."""
    by_id = {int(r["undo_id"]): dict(r) for r in known}
    return [
        by_id.get(row.id) or unknown_record(row, tool_of(row), now)
        for row in sorted(rows, key=lambda u: u.id, reverse=True)
        if row.status == UNKNOWN
    ]


def still_unknown(records: Iterable[Mapping[str, Any]], rows: Iterable[UndoRow]) -> bool:
    """True iff one of the waiting ``records`` is still ``outcome_unknown`` in ``rows``."""
    unknown = {u.id for u in rows if u.status == UNKNOWN}
    return any(int(r["undo_id"]) in unknown for r in records)


def unknown_line(transaction_id: str, record: Mapping[str, Any]) -> str:
    """The ``compensation_errors`` line of an undo waiting on its unknown outcome."""
    step = record["step"]
    return (
        f"undo {record['handler']} of step {step}: outcome unknown ({record['error']}); it is "
        f"never run again blindly: reconcile_step({transaction_id}, {step}) asks its "
        f"undo_reconcile handler, or an operator runs `agenttx tx resolve {transaction_id} "
        f"{step} happened|not-happened`"
    )


def unknown_evidence(record: Mapping[str, Any]) -> dict[str, Any]:
    """An unknown undo as a ``compensation_evidence`` entry."""
    return {
        "step": int(record["step"]),
        "tool": str(record["tool"]),
        "contract": "",
        "undo_id": int(record["undo_id"]),
        "verdict": UNKNOWN,
        "reason": f"its outcome is unknown: {record['error']}",
    }


def shown(transaction_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``TransactionInfo`` fields a waiting unknown undo sets (empty if none): it needs a
    human, says so in ``compensation_errors``, and names its step the way a step's unknown
    outcome does, with ``reconcile_state`` "undo_outcome_unknown"."""
    records = unknown_undo(body)
    if not records:
        return {}
    newest = records[0]
    return {
        "requires_human": True,
        "compensation_errors": [
            *body.get("compensation_errors", []),
            *(unknown_line(transaction_id, r) for r in records),
        ],
        "outcome_unknown_step": int(newest["step"]),
        "reconcile_state": "undo_outcome_unknown",
        "reconcile_after": min(float(r.get("retry_at", 0.0)) for r in records),
        "operation_provider": str(newest.get("provider", "")),
        "operation_id": str(newest.get("operation_id", "")),
    }


def with_records(body: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``body`` with its waiting plan's records replaced by ``records`` (none: the key goes)."""
    key = "rewind" if body.get("rewind") else "compensation"
    plan = {k: v for k, v in (body.get(key) or {}).items() if k != "undo_unknown"}
    if records:
        plan["undo_unknown"] = [dict(r) for r in records]
    return dict(body, **{key: plan})
