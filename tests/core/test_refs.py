"""Step references: syntax, types, interpolation, escapes and the errors an agent sees."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.core.refs import (
    Reference,
    UnresolvedReference,
    find_references,
    lookup_path,
    resolve,
)

OUTPUTS: dict[int, Any] = {
    1: {"id": 7, "name": "Ada", "tags": ["a", "b"], "price": 2.5, "ok": True, "none": None},
    2: {"id": "c-1", "name": "Acme", "order": {"number": 42, "items": [{"sku": "x"}, 9]}},
    3: "plain text",
    4: {"0": "zero-key", "10": {"deep": "ünïcode"}},
}


def _resolve(arguments: Any, current: int = 5) -> Any:
    return resolve(arguments, OUTPUTS, current)[0]


def _error(arguments: Any, current: int = 5) -> UnresolvedReference:
    with pytest.raises(UnresolvedReference) as info:
        resolve(arguments, OUTPUTS, current)
    return info.value


# --- whole-string references keep their JSON type -------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${steps.1.id}", 7),
        ("${steps.1.price}", 2.5),
        ("${steps.1.ok}", True),
        ("${steps.1.none}", None),
        ("${steps.1.tags}", ["a", "b"]),
        ("${steps.2.order}", {"number": 42, "items": [{"sku": "x"}, 9]}),
        ("${steps.2.id}", "c-1"),
        ("${steps.3}", "plain text"),
    ],
)
def test_whole_string_reference_becomes_the_value_with_its_type(text: str, expected: Any) -> None:
    value = _resolve({"v": text})["v"]
    assert value == expected
    assert type(value) is type(expected)


def test_reference_without_path_is_the_whole_output() -> None:
    assert _resolve({"all": "${steps.1}"})["all"] == OUTPUTS[1]


def test_numeric_segments_index_arrays_and_numeric_string_keys() -> None:
    assert _resolve({"a": "${steps.1.tags.1}"}) == {"a": "b"}
    assert _resolve({"a": "${steps.2.order.items.0.sku}"}) == {"a": "x"}
    assert _resolve({"a": "${steps.4.0}"}) == {"a": "zero-key"}
    assert _resolve({"a": "${steps.4.10.deep}"}) == {"a": "ünïcode"}


def test_references_resolve_at_any_depth_in_values_and_list_items() -> None:
    arguments = {"a": [{"b": ["${steps.1.id}", {"c": "${steps.2.id}"}]}], "d": "${steps.1.name}"}
    resolved, used = resolve(arguments, OUTPUTS, 5)
    assert resolved == {"a": [{"b": [7, {"c": "c-1"}]}], "d": "Ada"}
    assert [(r.step_id, r.path, r.arg_path) for r in used] == [
        (1, ("id",), ("a", 0, "b", 0)),
        (2, ("id",), ("a", 0, "b", 1, "c")),
        (1, ("name",), ("d",)),
    ]


def test_top_level_string_and_list_arguments_resolve() -> None:
    assert _resolve("${steps.1.id}") == 7
    assert _resolve(["${steps.1.id}", 1]) == [7, 1]


def test_dict_keys_are_never_resolved() -> None:
    arguments = {"${steps.1.id}": "${steps.1.id}", "$${x}": 1}
    assert _resolve(arguments) == {"${steps.1.id}": 7, "$${x}": 1}


# --- interpolation -------------------------------------------------------------------------


def test_interpolation_inserts_strings_verbatim() -> None:
    assert _resolve({"p": "drafts/${steps.2.id}.json"}) == {"p": "drafts/c-1.json"}
    assert _resolve({"p": "<${steps.4.10.deep}>"}) == {"p": "<ünïcode>"}


def test_interpolation_inserts_other_values_as_compact_json() -> None:
    text = "n=${steps.1.id} f=${steps.1.price} b=${steps.1.ok} z=${steps.1.none} t=${steps.1.tags}"
    assert _resolve({"s": text})["s"] == 'n=7 f=2.5 b=true z=null t=["a","b"]'
    assert _resolve({"s": "o=${steps.2.order}"})["s"] == 'o={"number":42,"items":[{"sku":"x"},9]}'
    assert _resolve({"s": "u=${steps.4.10}"})["s"] == 'u={"deep":"ünïcode"}'


def test_interpolated_text_is_not_resolved_again() -> None:
    outputs = {1: {"t": "${steps.1.t}"}}
    assert resolve({"a": "x ${steps.1.t}", "b": "${steps.1.t}"}, outputs, 2)[0] == {
        "a": "x ${steps.1.t}",
        "b": "${steps.1.t}",
    }


def test_several_references_in_one_string() -> None:
    resolved, used = resolve({"s": "Order ${steps.2.order.number} for ${steps.1.name}"}, OUTPUTS, 5)
    assert resolved == {"s": "Order 42 for Ada"}
    assert [r.step_id for r in used] == [2, 1]


# --- escape and literal text ---------------------------------------------------------------


def test_double_dollar_escapes_a_literal_dollar_brace() -> None:
    resolved, used = resolve({"s": "$${steps.1.id} costs $${HOME}", "t": "$${"}, OUTPUTS, 5)
    assert resolved == {"s": "${steps.1.id} costs ${HOME}", "t": "${"}
    assert used == []
    assert find_references({"s": "$${steps.1.id}"}) == []


def test_escape_and_reference_side_by_side() -> None:
    assert _resolve({"s": "$${steps.1.id}=${steps.1.id}"}) == {"s": "${steps.1.id}=7"}
    # "$$${" is "$" followed by the escape "$${": the escape is matched first, left to right.
    assert _resolve({"s": "$$${steps.1.id}"}) == {"s": "$${steps.1.id}"}


def test_dollar_dollar_without_brace_is_untouched() -> None:
    assert _resolve({"s": "pid $$ and $$x"}) == {"s": "pid $$ and $$x"}


@pytest.mark.parametrize(
    "text", ["${HOME}", "${ steps.1.id }", "${stepsX.1}", "${steps_1}", "${", "x ${y} $"]
)
def test_dollar_brace_not_followed_by_steps_is_literal_text(text: str) -> None:
    assert _resolve({"s": text}) == {"s": text}
    assert find_references({"s": text}) == []


@pytest.mark.parametrize(
    "text",
    [
        "${steps}",
        "${steps.}",
        "${steps.x.id}",
        "${steps.1.}",
        "${steps.1..id}",
        "${steps.1.a{b}",
        "prefix ${steps.1.id",
        "${steps.-1.id}",
        "${steps." + "9" * 19 + "}",
    ],
)
def test_malformed_steps_reference_is_bad_syntax(text: str) -> None:
    error = _error({"field": text})
    assert error.kind == "bad_syntax"
    assert error.key == "field"
    assert error.step_id == 0  # no earlier step is at fault
    assert str(error).startswith("unresolved reference ${steps")
    assert "$${" in str(error)  # tells the agent how to write a literal
    assert find_references({"field": text}) == []


# --- errors --------------------------------------------------------------------------------


def test_missing_key_names_the_key_and_the_keys_that_exist() -> None:
    outputs = {2: {"name": "Acme", "id": "c-1"}}
    with pytest.raises(UnresolvedReference) as info:
        resolve({"customer_id": "${steps.2.customer_id}"}, outputs, 3)
    error = info.value
    assert str(error) == (
        "unresolved reference ${steps.2.customer_id}: step 2 output has no key 'customer_id' "
        "(keys: id, name)"
    )
    assert error.kind == "missing_key"
    assert error.step_id == 2
    assert error.key == "customer_id"
    assert error.available_keys == ["id", "name"]
    assert error.reference == "${steps.2.customer_id}"


def test_missing_nested_key_names_where_the_lookup_stopped() -> None:
    error = _error({"n": "${steps.2.order.num}"})
    assert str(error) == (
        "unresolved reference ${steps.2.order.num}: step 2 output at 'order' has no key 'num' "
        "(keys: items, number)"
    )
    assert error.available_keys == ["items", "number"]


def test_index_out_of_range_reports_the_array_length() -> None:
    error = _error({"t": "${steps.1.tags.5}"})
    assert error.kind == "missing_key"
    assert error.key == "tags"
    assert error.available_keys == []
    assert "at 'tags' has no index 5 (it is an array of 2 items)" in str(error)


def test_key_on_an_array_or_a_scalar_says_what_is_there() -> None:
    assert "use a numeric index" in str(_error({"t": "${steps.1.tags.first}"}))
    error = _error({"t": "${steps.1.id.value}"})
    assert "at 'id' has no key 'value' (it is a number)" in str(error)
    assert "(it is a string)" in str(_error({"t": "${steps.3.x}"}))
    assert "(it has no keys)" in str(resolve_error({"t": "${steps.1.x}"}, {1: {}}, 2))


def resolve_error(arguments: Any, outputs: dict[int, Any], current: int) -> UnresolvedReference:
    with pytest.raises(UnresolvedReference) as info:
        resolve(arguments, outputs, current)
    return info.value


def test_huge_index_is_missing_not_a_crash() -> None:
    error = _error({"t": "${steps.1.tags." + "1" * 5000 + "}"})
    assert error.kind == "missing_key"


def test_many_keys_are_capped_in_the_message() -> None:
    outputs = {1: {f"k{i:03}": i for i in range(100)}}
    error = resolve_error({"t": "${steps.1.nope}"}, outputs, 2)
    assert len(error.available_keys) == 100
    assert "(+80 more)" in str(error)


def test_reference_to_a_later_step_is_unavailable() -> None:
    error = _error({"id": "${steps.5.id}"}, current=3)
    assert str(error) == (
        "unavailable step reference ${steps.5.id}: step 5 has not completed (current step 3)"
    )
    assert error.kind == "unavailable_step"
    assert error.step_id == 5
    assert error.key == "id"


def test_reference_to_the_current_step_is_unavailable() -> None:
    error = _error({"id": "${steps.3.id}"}, current=3)
    assert error.kind == "unavailable_step"
    assert "step 3 is the current step" in str(error)


def test_reference_to_an_earlier_step_without_output_is_unavailable() -> None:
    error = resolve_error({"x": "${steps.2}"}, {1: {}}, 4)
    assert error.kind == "unavailable_step"
    assert error.key == "x"  # no path: the argument key names it
    assert "step 2 has not completed (current step 4)" in str(error)
    assert resolve_error({"x": "${steps.0}"}, {1: {}}, 4).kind == "unavailable_step"


def test_error_survives_pickling() -> None:
    error = _error({"customer_id": "${steps.2.customer_id}"})
    copy_ = pickle.loads(pickle.dumps(error))
    assert (copy_.kind, copy_.key, copy_.available_keys, str(copy_)) == (
        error.kind,
        error.key,
        error.available_keys,
        str(error),
    )


# --- structure -----------------------------------------------------------------------------


def test_input_is_not_mutated_and_result_shares_nothing_with_outputs() -> None:
    arguments = {"o": "${steps.2.order}", "l": ["${steps.1.tags}"], "k": {"x": 1}}
    before = copy.deepcopy(arguments)
    outputs = copy.deepcopy(OUTPUTS)
    resolved, _ = resolve(arguments, outputs, 5)
    assert arguments == before
    assert resolved["k"] is not arguments["k"]
    resolved["o"]["items"].append("mutated")
    resolved["l"][0].append("mutated")
    assert outputs == OUTPUTS


def test_non_json_leaves_pass_through_untouched() -> None:
    marker = object()
    resolved, used = resolve({"a": marker, "b": ("${steps.1.id}",)}, OUTPUTS, 5)
    assert resolved["a"] is marker
    assert resolved["b"] == ("${steps.1.id}",)
    assert used == []


def test_very_deep_nesting_does_not_exhaust_the_stack() -> None:
    depth = 20_000
    arguments: Any = "${steps.1.id}"
    for _ in range(depth):
        arguments = [arguments]
    resolved, used = resolve(arguments, OUTPUTS, 5)
    assert len(used) == 1
    assert len(used[0].arg_path) == depth
    for _ in range(depth):
        assert isinstance(resolved, list)
        resolved = resolved[0]
    assert resolved == 7
    assert len(find_references(arguments)) == 1


# --- Reference and helpers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "key"),
    [
        (Reference(2, ("customer_id",), ("x",)), "customer_id"),
        (Reference(2, ("items", "0"), ("x",)), "items"),
        (Reference(2, ("order", "items", "3", "sku"), ()), "sku"),
        (Reference(2, (), ("fields", "customer_id")), "customer_id"),
        (Reference(2, ("0",), ("list", 3)), "list"),
        (Reference(2, (), (0,)), ""),
    ],
)
def test_reference_key(reference: Reference, key: str) -> None:
    assert reference.key == key


def test_reference_text() -> None:
    assert Reference(2, ("a", "0"), ()).text == "${steps.2.a.0}"
    assert Reference(3, (), ()).text == "${steps.3}"


def test_find_references_is_a_syntax_scan_in_document_order() -> None:
    arguments = {
        "a": "${steps.9.x} and ${steps.1}",
        "b": [{"c": "${steps.2.order.items.0}"}],
        "d": "$${steps.3.y} ${HOME} ${steps.bad}",
        "e": 5,
    }
    assert find_references(arguments) == [
        Reference(9, ("x",), ("a",)),
        Reference(1, (), ("a",)),
        Reference(2, ("order", "items", "0"), ("b", 0, "c")),
    ]


def test_lookup_path() -> None:
    assert lookup_path(OUTPUTS[2], ["order", "items", 0, "sku"]) == "x"
    assert lookup_path(OUTPUTS[2], ("order", "items", "1")) == 9
    with pytest.raises(KeyError):
        lookup_path(OUTPUTS[2], ["order", "nope"])


# --- properties ----------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    ["${", "$${", "$", "{", "}", "steps", "steps.", ".", "0", "1", "2", "9", "id", "a", " ", "é"]
)
_TRICKY_TEXT = st.one_of(st.text(max_size=20), st.lists(_FRAGMENTS, max_size=10).map("".join))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    _TRICKY_TEXT,
)
JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_TRICKY_TEXT, inner, max_size=4)
    ),
    max_leaves=20,
)
_OUTPUTS = st.dictionaries(st.integers(min_value=0, max_value=4), JSON, max_size=4)


def _typed(value: Any) -> str:
    """A rendering that tells 1 from 1.0 and True from 1."""
    return json.dumps(value, sort_keys=False)


@settings(max_examples=300)
@given(arguments=JSON, outputs=_OUTPUTS, current=st.integers(min_value=0, max_value=6))
def test_resolve_raises_only_unresolved_reference(
    arguments: Any, outputs: dict[int, Any], current: int
) -> None:
    failure: UnresolvedReference | None = None
    try:
        resolved, used = resolve(arguments, outputs, current)
    except UnresolvedReference as error:
        failure = error
    if failure is not None:
        assert failure.kind in ("unavailable_step", "missing_key", "bad_syntax")
        assert str(failure).startswith(("unresolved reference", "unavailable step reference"))
        return
    assert used == find_references(arguments)
    json.dumps(resolved)  # still JSON


@given(value=JSON)
def test_whole_string_reference_round_trips_any_json_value(value: Any) -> None:
    resolved, _ = resolve({"v": "${steps.1}", "w": ["${steps.1}"]}, {1: value}, 2)
    assert _typed(resolved["v"]) == _typed(value)
    assert _typed(resolved["w"][0]) == _typed(value)


@given(key=st.text(min_size=1).filter(lambda k: not set(k) & set(".{}")), value=JSON)
def test_whole_string_reference_round_trips_through_a_key(key: str, value: Any) -> None:
    resolved, _ = resolve("${steps.3." + key + "}", {3: {key: value}}, 4)
    assert _typed(resolved) == _typed(value)


@given(arguments=JSON)
def test_arguments_without_dollar_brace_come_back_equal(arguments: Any) -> None:
    if "${" in json.dumps(arguments, ensure_ascii=False):
        return
    resolved, used = resolve(arguments, {}, 1)
    assert _typed(resolved) == _typed(arguments)
    assert used == []


@given(
    prefix=st.text().filter(lambda s: "${" not in s and not s.endswith("$")),
    inserted=st.text(),
    suffix=st.text().filter(lambda s: "${" not in s),
)
def test_interpolated_strings_are_verbatim(prefix: str, inserted: str, suffix: str) -> None:
    resolved, _ = resolve({"s": prefix + "${steps.1.v}" + suffix}, {1: {"v": inserted}}, 2)
    assert resolved == {"s": prefix + inserted + suffix}


@given(prefix=st.text(max_size=5).filter(lambda s: not s.endswith("$")), value=JSON)
def test_interpolated_values_are_compact_json(prefix: str, value: Any) -> None:
    if isinstance(value, str) or "${" in prefix:
        return
    resolved, _ = resolve({"s": prefix + "${steps.1}!"}, {1: value}, 2)
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert resolved == {"s": prefix + compact + "!"}
