"""The step record's data written out directly (``step_event_text``, the hot path) is exactly
the canonical JSON of ``step_event``'s data, for every shape a step row's detail can take."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.audit import EMPTY, canonical, make_record, record_from_text
from agenttx.core.audit import step_event, step_event_text
from agenttx.store.contract import StepRow

texts = st.text(max_size=40)  # any code point, surrogates and controls included
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
details = st.fixed_dictionaries(
    {},
    optional={
        "hint": texts,
        "category": texts,
        "w": st.lists(st.tuples(texts, st.none() | texts, st.integers(0, 9)), max_size=3),
        "fx": st.lists(st.tuples(texts, texts, texts), max_size=3),
        "undo": json_values,
        "rid": texts,
        "reads": st.lists(texts, max_size=2),
    },
)


@st.composite
def step_rows(draw: Any) -> StepRow:
    return StepRow(
        tx_id="tx_1",
        seq=draw(st.integers(1, 10**6)),
        step_id=draw(st.integers(1, 10**6)),
        attempt=draw(st.integers(1, 100)),
        epoch=draw(st.integers(0, 100)),
        tool=draw(texts),
        effect=draw(st.sampled_from(["read", "state", "compensatable", "staged", "irreversible"])),
        status=draw(st.sampled_from(["RUNNING", "SUCCESS", "FAILED", "OUTCOME_UNKNOWN", "?"])),
        live=draw(st.booleans()),
        arguments_json=draw(st.sampled_from(["", "{}", '{"k":"v"}', '{"k":"\\u00e9"}'])),
        output_json=draw(st.sampled_from(["", "null", '{"ok":true}'])),
        raw_context="",
        detail=draw(details),
        started_at=1.5,
        finished_at=2.5,
        lease_owner="",
        lease_until=0.0,
    )


@settings(max_examples=400, deadline=None)
@given(step_rows())
def test_step_text_is_the_canonical_text_of_the_step_event(row: StepRow) -> None:
    kind, data = step_event(row)
    assert step_event_text(row) == (kind, canonical(data))


@settings(max_examples=100, deadline=None)
@given(step_rows(), st.floats(0, 2e9), st.integers(0, 10**6))
def test_a_record_from_text_equals_the_record_of_the_event(
    row: StepRow, at: float, rev: int
) -> None:
    kind, data = step_event(row)
    _, text = step_event_text(row)
    head = EMPTY._replace(seq=4, hash="ab" * 32)
    args = {"tx_id": "tx_1", "tenant": "t", "kind": kind, "at": at, "revision": rev}
    assert record_from_text(head, **args, data_text=text) == make_record(head, **args, data=data)
