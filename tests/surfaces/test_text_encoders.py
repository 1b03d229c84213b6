"""``jsontext.encoder``: reusable encoders whose text is byte for byte what ``json.dumps`` gives
with the same arguments — the payload hash of a request and a stored reply must stay what
they were when stores wrote them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.core.requests import payload_hash
from agenttx.jsontext import encoder

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**80)
    | st.floats()  # NaN and infinities too: json.dumps writes them by default
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner) | st.tuples(inner, inner),
    max_leaves=40,
)


def _same_text(value: Any) -> None:
    canonical = encoder(default=str, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    plain = encoder(default=str, ensure_ascii=True, separators=(", ", ": "))
    assert plain(value) == json.dumps(value, default=str)
    unicode = encoder(default=repr, ensure_ascii=False, separators=(",", ":"))
    assert unicode(value) == json.dumps(
        value, default=repr, ensure_ascii=False, separators=(",", ":")
    )


@settings(max_examples=400)
@given(VALUES)
def test_the_text_is_what_json_dumps_gives(value: Any) -> None:
    _same_text(value)


@pytest.mark.parametrize(
    "value",
    [
        "bare é string",
        {"z": 1, "a": [float("nan"), float("inf")], "é": {"b": None, "a": 10**30}},
        {2: "int key", 2.5: "float key", 1: "another"},
        [{1, 2}, b"bytes"],  # values only default= can turn into text
    ],
)
def test_odd_values_are_written_as_json_dumps_writes_them(value: Any) -> None:
    _same_text(value)


def test_keys_that_cannot_be_sorted_fail_as_json_dumps_fails() -> None:
    canonical = encoder(default=str, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    with pytest.raises(TypeError):
        json.dumps({1: "a", "b": 2}, sort_keys=True, separators=(",", ":"), default=str)
    with pytest.raises(TypeError):
        canonical({1: "a", "b": 2})


def test_a_value_that_contains_itself_is_refused_with_a_value_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    plain = encoder(default=str, ensure_ascii=True, separators=(", ", ": "))
    with pytest.raises(ValueError, match="Circular reference"):
        plain({"a": loop})


def test_a_value_default_cannot_turn_into_json_raises_what_default_raises() -> None:
    def refuse(value: Any) -> Any:
        raise TypeError(f"no {type(value).__name__}")

    strict = encoder(default=refuse, ensure_ascii=True, separators=(",", ":"))
    with pytest.raises(TypeError, match="no set"):
        strict({"a": {1}})


def test_the_payload_hash_is_the_one_stores_hold() -> None:
    # The hash of a request as it was always computed: a retry after an upgrade must match.
    payload = ["tx_1", 3, "kv.put", '{"key":"ü","value":1.5}', "", {"b": 1, "a": [None]}]
    canonical = json.dumps(
        ["execute_step", payload], sort_keys=True, separators=(",", ":"), default=str
    )
    assert payload_hash("execute_step", payload) == hashlib.sha256(canonical.encode()).hexdigest()
