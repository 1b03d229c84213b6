"""``agenttx.fieldcopy.field_copy``: a value read back from the wire equals the value the server
sent, for each type the reply builders and the client readers copy through it, and a field
one side lacks is refused loudly instead of dropped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agenttx.api import audit_wire, compensation_wire, effects_wire, receipts_wire
from agenttx.audit import AuditVerification
from agenttx.client import _audit, _compensation, _effects, _receipts, _wire
from agenttx.fieldcopy import field_copy
from agenttx.receipts import Approval, EffectChange, FileChange, Refusal
from agenttx.types import CompensationAction, EffectInfo, ReceiptView
from agenttx.wire import agenttx_pb2 as pb


def _sample(cls: type, **given: Any) -> Any:
    """An instance with a distinct value in each field (by its declared type)."""
    values: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(cls)):
        kind = str(f.type)
        values[f.name] = (
            n % 2 == 0
            if kind == "bool"
            else n + 1
            if kind == "int"
            else n + 0.5
            if kind == "float"
            else f"v{n}"
        )
    return cls(**{**values, **given})


@pytest.mark.parametrize(
    ("value", "send", "read"),
    [
        (_sample(ReceiptView), receipts_wire.receipt, _wire.receipt_view),
        (_sample(CompensationAction), compensation_wire.action, _compensation.action),
        (_sample(EffectInfo), effects_wire.record, _effects.effect),
        (_sample(AuditVerification, pending=0), audit_wire.verification, _audit.verification),
        (_sample(Approval), receipts_wire.approval_reply, _receipts.approval_result),
        (_sample(Refusal), receipts_wire.refusal_reply, _receipts.refusal_result),
    ],
    ids=lambda v: type(v).__name__ if dataclasses.is_dataclass(v) else "",
)
def test_a_value_sent_and_read_back_is_equal(value: Any, send: Any, read: Any) -> None:
    assert read(send(value)) == value


def test_each_field_of_a_change_crosses_in_both_directions() -> None:
    for cls, message in ((FileChange, pb.FileChange), (EffectChange, pb.EffectChange)):
        value = _sample(cls)
        assert field_copy(field_copy(value, message), cls) == value


def test_a_field_the_source_lacks_is_refused() -> None:
    # pb.Snapshot has no `next_step_id`, so reading a BeginResult's fields from it must fail.
    from agenttx.types import BeginResult

    with pytest.raises(AttributeError):
        field_copy(pb.Snapshot(transaction_id="t", revision=1), BeginResult)


def test_given_fields_replace_the_copied_ones() -> None:
    copied = field_copy(_sample(ReceiptView), ReceiptView, reason="refused: no")
    assert copied.reason == "refused: no"
    assert copied.receipt_id == "v0"
