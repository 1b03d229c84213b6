"""The stored form of a call's reply (what a retry with the same request_id gets back).

The reply is encoded from the result's fields without ``dataclasses.asdict`` (which
deep-copied every value on the hot path), compact and without the fields that hold their
defaults (a step's request row is then a third of its full size: fewer WAL frames a step). It
must read back into an equal result, and so must a reply stored as it used to be written
(asdict's full, spaced text), since stores hold those.
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
def test_a_stored_reply_reads_back_equal_and_so_does_one_stored_as_before(result: Any) -> None:
    request = Request("default", "rid-1", "ExecuteStep", "digest", 0.0)
    text = request.reply(result).reply_json
    rebuilt = from_json(type(result), json.loads(text)["ok"])
    assert type(rebuilt) is type(result)
    assert _asdict_text(rebuilt) == _asdict_text(result)  # every field, enums and values alike
    before = from_json(type(result), json.loads(_asdict_text(result))["ok"])
    assert _asdict_text(before) == _asdict_text(result)
    assert request.reply(before).reply_json == text


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_a_stored_reply_leaves_out_the_fields_that_hold_their_defaults(result: Any) -> None:
    stored = json.loads(
        Request("default", "rid-1", "ExecuteStep", "d", 0.0).reply(result).reply_json
    )
    kept = set(stored["ok"])
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else f.default_factory()
            if f.default_factory is not dataclasses.MISSING
            else dataclasses.MISSING
        )
        assert (f.name in kept) == (default is dataclasses.MISSING or value != default), f.name
