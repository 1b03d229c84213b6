"""The stored form of a call's reply (what a retry with the same request_id gets back).

The reply is encoded from the result's fields without ``dataclasses.asdict`` (which
deep-copied every value on the hot path); the text must stay exactly what asdict gave, since
stores hold replies written before, and it must read back into an equal result.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest

from agenttx.core.requests import Request, from_json
from agenttx.types import (
    BeginResult,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    Strategy,
    TxStatus,
)


def _asdict_text(result: Any) -> str:
    """The encoding as it was: asdict, then enums by value."""

    def enum_value(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return value.value
        raise TypeError(type(value).__name__)

    return json.dumps({"ok": dataclasses.asdict(result)}, default=enum_value)


RESULTS = [
    BeginResult("tx1", 1),
    StepResult(
        transaction_id="tx1",
        step_id=3,
        status=StepStatus.SUCCESS,
        output={"key": "a/1", "version": 2, "nested": [1, (2, 3), {"x": None}], "é": "ü"},
        output_json='{"key":"a/1"}',
        next_step_id=4,
        constraints=["Hint: one"],
        revision=5,
    ),
    StepResult(
        transaction_id="tx1",
        step_id=2,
        status=StepStatus.ROLLBACK_TRIGGERED,
        clean_hint="Hint: the key `user_id` is missing",
        strategy=Strategy.RETRY,
        rollback_to_step=2,
        next_step_id=2,
        error_category="key_error",
        rollback_latency_ms=1.5,
        compensation_errors=["undo failed"],
        transaction_status=TxStatus.ACTIVE,
        hint_key="user_id",
    ),
    CommitResult("tx1", True, 10, 1, ["smtp down"], effects_queued=2),
    RollbackResult("tx1", True, 0, 1, [], transaction_status=TxStatus.ROLLED_BACK),
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_stored_reply_text_is_what_asdict_gave_and_reads_back(result: Any) -> None:
    request = Request("default", "rid-1", "ExecuteStep", "digest", 0.0)
    text = request.reply(result).reply_json
    assert text == _asdict_text(result)
    rebuilt = from_json(type(result), json.loads(text)["ok"])
    assert type(rebuilt) is type(result)
    assert request.reply(rebuilt).reply_json == text  # enums and values read back alike


def test_a_value_json_cannot_hold_is_refused() -> None:
    request = Request("default", "rid-2", "ExecuteStep", "digest", 0.0)
    result = StepResult(transaction_id="tx1", step_id=1, status=StepStatus.SUCCESS, output={1j})
    with pytest.raises(TypeError, match="cannot store set in a reply"):
        request.reply(result)
