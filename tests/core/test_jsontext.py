"""``compact``: the one JSON text AgentTx stores, byte for byte what the standard library writes."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.jsontext import compact

STANDARD = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner) | st.tuples(inner, inner),
    max_leaves=40,
)


@settings(max_examples=500)
@given(VALUES)
def test_the_text_is_the_standard_compact_text(value: Any) -> None:
    assert compact(value) == STANDARD.encode(value)


def test_keys_and_big_integers_are_written_as_the_standard_library_writes_them() -> None:
    odd_keys = {1: "x", None: "z", 1.5: "w", False: "f"}
    assert compact(odd_keys) == STANDARD.encode(odd_keys)
    assert compact(10**40) == str(10**40)
    assert compact('é\u2028"\\') == STANDARD.encode('é\u2028"\\')


@pytest.mark.parametrize("value", [float("nan"), {"a": [float("inf")]}, -float("inf")])
def test_non_finite_floats_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        compact(value)


@pytest.mark.parametrize("value", [object(), {"s": {1, 2}}, b"bytes"])
def test_values_json_cannot_hold_are_refused(value: Any) -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        compact(value)


def test_a_value_that_contains_itself_is_refused_with_a_value_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        compact({"a": loop})


def test_threads_encoding_the_same_value_at_once_agree() -> None:
    # One encoder serves every thread (sync tools run on worker threads): nothing it keeps
    # between calls may leak from one call into another.
    shared = {"rows": [{"id": i, "tags": ["a", "b"], "n": i / 3} for i in range(200)]}
    expected = STANDARD.encode(shared)
    seen: list[str] = []

    def encode_many() -> None:
        seen.extend(compact(shared) for _ in range(50))

    threads = [threading.Thread(target=encode_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 200
    assert set(seen) == {expected}
