"""Attempt numbers: every attempt of a step has its own, 1, 2, 3 … in the order they ran,
whatever ended the earlier ones (a failure, a rewind by the controller or the caller, an
undo, an outside call that did not happen) — so a history never shows ``#3.1`` twice.

The numbers live in the transaction's body, written only by writes that happen anyway, so a
successful step (the hot path, whose write carries no body) pays nothing:

- ``attempts``: step id → the number of its latest failed attempt, while its retry streak
  lasts (the step pipeline clears it when the step succeeds);
- ``tried``: step id → the number of its latest attempt that no longer stands: undone by a
  rewind (written by the rewind's last write, for the live steps it undoes) or whose outside
  call did not happen (written with the OUTCOME_UNKNOWN row).

A step's next attempt is one more than the larger of the two. ``tried`` has at most one entry
per step id ever undone, so it is bounded by the transaction's step limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agenttx.store.contract import StepRow


def next_attempt(body: Mapping[str, Any], step_id: int) -> int:
    """The number the next attempt of ``step_id`` gets."""
    key = str(step_id)
    failed = int(body.get("attempts", {}).get(key, 0))
    tried = int(body.get("tried", {}).get(key, 0))
    return max(failed, tried) + 1


def with_tried(body: dict[str, Any], rows: Iterable[StepRow]) -> dict[str, Any]:
    """``body`` with ``rows`` (attempts that no longer stand) noted in ``tried``; ``body``
    itself if there are none."""
    tried: dict[str, int] | None = None
    for row in rows:
        if tried is None:
            tried = dict(body.get("tried", {}))
        key = str(row.step_id)
        tried[key] = max(int(tried.get(key, 0)), row.attempt)
    return body if tried is None else dict(body, tried=tried)
