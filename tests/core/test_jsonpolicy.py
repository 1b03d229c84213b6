"""The one JSON acceptance policy (``agenttx.jsonpolicy``): what it accepts, what it refuses
and with which rule, for text and for Python values, and that refusing costs no recursion."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx import jsonpolicy
from agenttx.jsonpolicy import MAX_DEPTH, MAX_INT_DIGITS, JsonRefused
from agenttx.jsontext import compact


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


ACCEPTED = [
    "{}",
    '{"a": 1, "b": [true, false, null], "c": "text é 😀"}',
    '"\\ud83d\\ude00"',  # a surrogate pair is one character, not a lone surrogate
    nested(MAX_DEPTH),
    "1" + "0" * (MAX_INT_DIGITS - 1),
    "-" + "9" * MAX_INT_DIGITS,
    "1e308",
    "1.5e-400",  # underflows to 0.0: finite
    '"' + "9" * 500 + '"',  # a long digit run inside a string is text
    json.dumps([{"k": i} for i in range(5000)]),
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_ordinary_json_is_accepted_unchanged(text: str) -> None:
    assert jsonpolicy.parse(text) == json.loads(text)


REFUSED = [
    ("{", "json_syntax"),
    ('{"a": 1,}', "json_syntax"),
    ('\ufeff{"a": 1}', "json_syntax"),
    (nested(MAX_DEPTH + 1), "json_depth"),
    (nested(1000), "json_depth"),
    (nested(200_000), "json_depth"),
    ('{"a": ' * 70 + "1" + "}" * 70, "json_depth"),
    ("1" + "0" * MAX_INT_DIGITS, "json_integer_digits"),
    ("9" * 5000, "json_integer_digits"),
    ("9" * 100_000, "json_integer_digits"),
    ("NaN", "json_finite_numbers"),
    ("[Infinity]", "json_finite_numbers"),
    ('{"a": -Infinity}', "json_finite_numbers"),
    ("1e400", "json_finite_numbers"),
    ("-1" + "0" * 400 + ".5", "json_finite_numbers"),
    ('"\\ud800"', "json_utf8"),
    ('"\\udc00\\ud800"', "json_utf8"),
    ('{"\\udfff": 1}', "json_utf8"),
    ('["ok", {"deep": ["\\uDBFF"]}]', "json_utf8"),
]


@pytest.mark.parametrize(("text", "rule"), REFUSED)
def test_json_outside_the_policy_is_refused_naming_the_rule(text: str, rule: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        jsonpolicy.parse(text)
    assert refused.value.rule == rule
    if rule != "json_syntax":
        assert rule in refused.value.message  # the hint names the limit


VALUES_REFUSED = [
    ({"a": "\ud800"}, "json_utf8"),
    ({"\udc00": 1}, "json_utf8"),
    ({1: "a"}, "json_keys"),
    ({"a": {2: "b"}}, "json_keys"),
    ({"a": [float("inf")]}, "json_finite_numbers"),
    ({"a": 10**150}, "json_integer_digits"),
    ({"a": {"b": {1, 2}}}, "json_type"),
]


@pytest.mark.parametrize(("value", "rule"), VALUES_REFUSED)
def test_python_values_are_held_to_the_same_policy(value: object, rule: str) -> None:
    try:
        text = compact(value)
    except (TypeError, ValueError):
        text = json.dumps(value, default=str, allow_nan=True, ensure_ascii=False)
    with pytest.raises(JsonRefused) as refused:
        jsonpolicy.check(value, text)
    assert refused.value.rule == rule


def test_a_python_value_too_deep_is_refused() -> None:
    value: list[object] = []
    for _ in range(MAX_DEPTH):
        value = [value]
    with pytest.raises(JsonRefused, match="json_depth"):
        jsonpolicy.check(value, compact(value))


def test_check_returns_the_utf8_size() -> None:
    assert jsonpolicy.check({"a": "é"}, compact({"a": "é"})) == len('{"a":"é"}'.encode())


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(10**30), 10**30)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=30,
    )
)
def test_every_json_value_within_the_limits_round_trips(value: object) -> None:
    text = json.dumps(value)
    parsed = jsonpolicy.parse(text)
    assert compact(parsed) == compact(json.loads(text))
    assert not (isinstance(parsed, float) and math.isnan(parsed))
