"""The dependency graph: edges, root-cause search, rewinds and rebuilding after a restart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx.core.graph import DependencyGraph, Edge
from agenttx.core.refs import resolve
from graph_record import add_failed_step, from_dict, to_dict


class Run:
    """Drives a graph the way the engine does: resolve arguments, then record the step."""

    def __init__(self) -> None:
        self.graph = DependencyGraph()
        self.outputs: dict[int, Any] = {}
        self.calls: list[tuple[Any, ...]] = []

    def step(
        self,
        step_id: int,
        arguments: Any,
        output: Any,
        reads: tuple[str, ...] = (),
        writes: tuple[str, ...] = (),
    ) -> list[Edge]:
        inputs, references = resolve(arguments, self.outputs, step_id)
        self.outputs[step_id] = output
        self.calls.append(("ok", step_id, inputs, output, references, reads, writes))
        return self.graph.add_step(step_id, inputs, output, references, reads, writes)

    def fail(self, step_id: int, arguments: Any, reads: tuple[str, ...] = ()) -> None:
        inputs, references = resolve(arguments, self.outputs, step_id)
        self.calls.append(("failed", step_id, inputs, references, reads))
        add_failed_step(self.graph, step_id, inputs, references, reads)


def _edges(graph: DependencyGraph) -> set[tuple[int, int, str, str]]:
    return {(e.source, e.target, e.key, e.kind) for e in graph.edges()}


# --- explicit edges ------------------------------------------------------------------------


def test_reference_creates_an_explicit_edge_keyed_by_the_reference() -> None:
    run = Run()
    run.step(1, {"name": "Ada"}, {"id": 7, "items": [1, 2]})
    created = run.step(2, {"owner": "${steps.1.id}", "first": "${steps.1.items.0}"}, {})
    assert created == [Edge(1, 2, "id", "explicit"), Edge(1, 2, "items", "explicit")]
    assert run.graph.nodes() == [1, 2]


def test_interpolated_reference_creates_an_explicit_edge() -> None:
    run = Run()
    run.step(1, {"key": "k", "value": "c-404"}, {"key": "k", "value": "c-404"})
    created = run.step(2, {"path": "drafts/${steps.1.value}.json"}, {"path": "drafts/c-404.json"})
    assert created == [Edge(1, 2, "value", "explicit")]


def test_duplicate_edges_are_recorded_once() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    created = run.step(2, {"a": "${steps.1.id}", "b": ["${steps.1.id}", "${steps.1.id}"]}, {})
    assert created == [Edge(1, 2, "id", "explicit")]


# --- implicit edges ------------------------------------------------------------------------


def test_equal_value_under_the_same_key_links_implicitly() -> None:
    run = Run()
    run.step(1, {}, {"order_no": "A-17"})
    assert run.step(2, {"order_no": "A-17"}, {}) == [Edge(1, 2, "order_no", "implicit")]


@pytest.mark.parametrize("input_key", ["user_id", "customer_id", "billing_customer_id"])
def test_input_key_ending_in_underscore_output_key_links(input_key: str) -> None:
    run = Run()
    run.step(1, {}, {"id": "u-9"})
    assert run.step(2, {input_key: "u-9"}, {}) == [Edge(1, 2, "id", "implicit")]


@pytest.mark.parametrize("input_key", ["userid", "id_user", "uuid", "user-id"])
def test_unrelated_keys_do_not_link(input_key: str) -> None:
    run = Run()
    run.step(1, {}, {"id": "u-9"})
    assert run.step(2, {input_key: "u-9"}, {}) == []


def test_nested_inputs_and_outputs_link_by_nearest_key() -> None:
    run = Run()
    run.step(1, {}, {"customer": {"id": "c-1", "tags": ["vip"]}})
    created = run.step(2, {"fields": {"customer_id": "c-1"}, "labels": {"tags": ["vip"]}}, {})
    assert created == [Edge(1, 2, "id", "implicit"), Edge(1, 2, "tags", "implicit")]


@pytest.mark.parametrize("value", [True, False, None, ""])
def test_booleans_nulls_and_empty_strings_never_link(value: Any) -> None:
    run = Run()
    run.step(1, {}, {"flag": value, "items": [value]})
    assert run.step(2, {"flag": value, "items": [value]}, {}) == []


@pytest.mark.parametrize(
    ("produced", "consumed", "links"),
    [
        (1, 1, True),
        (1, 1.0, True),
        (2.5, 2.5, True),
        (1, "1", False),
        ("1", 1, False),
        (1, True, False),
        (True, 1, False),
        (0, False, False),
        (float("nan"), float("nan"), False),
    ],
)
def test_values_compare_with_their_type(produced: Any, consumed: Any, links: bool) -> None:
    run = Run()
    run.step(1, {}, {"n": produced})
    assert bool(run.step(2, {"n": consumed}, {})) is links


def test_latest_earlier_producer_wins() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {}, {"id": 7})
    run.step(3, {}, {"other": 7})
    assert run.step(4, {"user_id": 7}, {}) == [Edge(2, 4, "id", "implicit")]


def test_exact_key_wins_a_tie_within_one_producer() -> None:
    run = Run()
    run.step(1, {}, {"id": 7, "user_id": 7})
    assert run.step(2, {"user_id": 7}, {}) == [Edge(1, 2, "user_id", "implicit")]


def test_a_step_never_links_to_itself() -> None:
    run = Run()
    assert run.step(1, {"id": 7}, {"id": 7}) == []


def test_values_under_a_reference_are_not_linked_implicitly() -> None:
    run = Run()
    run.step(1, {}, {"id": 7, "user": {"id": 8}})
    run.step(2, {}, {"id": 8})
    created = run.step(3, {"user_id": "${steps.1.id}", "user": "${steps.1.user}"}, {})
    assert created == [Edge(1, 3, "id", "explicit"), Edge(1, 3, "user", "explicit")]


def test_scalars_without_an_enclosing_key_do_not_link() -> None:
    run = Run()
    run.step(1, {}, 7)
    run.step(2, {}, {"id": 7})
    assert run.step(3, [7, "x"], {}) == []


# --- state edges ---------------------------------------------------------------------------


def test_state_read_links_to_the_latest_earlier_writer() -> None:
    run = Run()
    run.step(1, {"key": "a"}, {}, writes=("a",))
    run.step(2, {"key": "a"}, {}, writes=("a",))
    run.step(3, {"key": "b"}, {}, writes=("b",))
    created = run.step(4, {}, {}, reads=("a", "b", "never-written"))
    assert created == [Edge(2, 4, "a", "state"), Edge(3, 4, "b", "state")]


def test_a_step_reading_and_writing_a_key_links_to_the_previous_writer() -> None:
    run = Run()
    run.step(1, {}, {}, writes=("counter",))
    assert run.step(2, {}, {}, reads=("counter",), writes=("counter",)) == [
        Edge(1, 2, "counter", "state")
    ]
    assert run.step(3, {}, {}, reads=("counter",)) == [Edge(2, 3, "counter", "state")]


def test_failed_step_is_a_node_with_incoming_edges_but_never_a_producer() -> None:
    run = Run()
    run.step(1, {}, {"id": 7}, writes=("k",))
    run.fail(2, {"user_id": 7}, reads=("k",))
    assert run.graph.nodes() == [1, 2]
    assert _edges(run.graph) == {(1, 2, "id", "implicit"), (1, 2, "k", "state")}
    # Re-running step 2 replaces the failed attempt.
    run.step(2, {"x": 1}, {"id": 9})
    assert run.graph.nodes() == [1, 2]
    assert _edges(run.graph) == set()


# --- rewinds -------------------------------------------------------------------------------


def test_drop_from_removes_nodes_edges_and_index_entries() -> None:
    run = Run()
    run.step(1, {}, {"id": 7}, writes=("a",))
    run.step(2, {"user_id": 7}, {"id": 7}, writes=("a",))
    run.step(3, {"user_id": 7}, {}, reads=("a",))
    run.graph.drop_from(2)
    assert run.graph.nodes() == [1]
    assert run.graph.edges() == []
    # With step 2 gone, step 1 is again the latest producer and writer.
    assert run.graph.add_step(2, {"user_id": 7}, {}, (), ("a",)) == [
        Edge(1, 2, "id", "implicit"),
        Edge(1, 2, "a", "state"),
    ]


def test_re_adding_a_step_replaces_it_and_everything_after() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {}, {"id": 8})
    run.step(3, {"user_id": 8}, {})
    run.graph.add_step(2, {}, {"id": 9})
    assert run.graph.nodes() == [1, 2]
    assert run.graph.add_step(3, {"user_id": 8}, {}) == []
    assert run.graph.add_step(3, {"user_id": 9}, {}) == [Edge(2, 3, "id", "implicit")]


def test_drop_from_beyond_the_last_step_does_nothing() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.graph.drop_from(5)
    assert run.graph.nodes() == [1]
    assert 1 in run.graph
    assert len(run.graph) == 1


def test_drop_everything_leaves_an_empty_index() -> None:
    run = Run()
    run.step(1, {}, {"id": 7, "more": {"id": 7, "x": [1, 2, 3]}}, writes=("a", "a"))
    run.step(2, {"user_id": 7}, {"id": 7})
    run.graph.drop_from(1)
    assert run.graph.nodes() == []
    assert to_dict(run.graph) == to_dict(DependencyGraph())
    assert run.graph._index == {}
    assert run.graph._writers == {}


# --- root cause ----------------------------------------------------------------------------


def _invoice_scenario() -> Run:
    run = Run()
    run.step(1, {"table": "customers", "id": "c-1"}, {"table": "customers", "id": "c-1"})
    run.step(
        2,
        {"key": "session/customer", "value": "c-404"},
        {"key": "session/customer", "value": "c-404"},
        writes=("session/customer",),
    )
    run.step(
        3,
        {"path": "drafts/${steps.2.value}.json", "contents": "draft"},
        {"path": "drafts/c-404.json"},
    )
    run.step(4, {"key": "wf/step-4", "value": 4}, {"key": "wf/step-4", "value": 4})
    run.step(5, {"channel": "email", "idempotency_key": "wf-5"}, {"staged": True})
    run.fail(
        6,
        {
            "table": "invoices",
            "id": "inv-1",
            "fields": {"customer_id": "${steps.2.value}"},
            "references": {"customer_id": "customers"},
        },
    )
    return run


def test_root_cause_follows_the_reference_to_the_producing_step() -> None:
    run = _invoice_scenario()
    assert run.graph.root_cause(6, "customer_id") == 2
    assert run.graph.root_cause(6, "fields.customer_id") == 2


def test_root_cause_from_the_arguments_as_sent() -> None:
    run = _invoice_scenario()
    run.graph.drop_from(6)  # the engine may not have recorded the failed step
    arguments = {"table": "invoices", "fields": {"customer_id": "${steps.2.value}"}}
    assert run.graph.root_cause(6, "customer_id", inputs=arguments) == 2
    assert run.graph.root_cause(6, "customer_id") is None  # no node, no inputs


def test_root_cause_from_resolved_inputs_and_their_references() -> None:
    run = _invoice_scenario()
    run.graph.drop_from(6)
    arguments = {"table": "invoices", "fields": {"customer_id": "${steps.2.value}"}}
    resolved, references = resolve(arguments, run.outputs, 6)
    assert run.graph.root_cause(6, "customer_id", inputs=resolved, references=references) == 2
    # Resolved inputs alone no longer say where "c-404" came from.
    assert run.graph.root_cause(6, "customer_id", inputs=resolved) is None


def test_root_cause_with_state_reads_given_as_a_keyword() -> None:
    run = _invoice_scenario()
    run.graph.drop_from(6)
    found = run.graph.root_cause(
        6, "session/customer", inputs={"key": "session/customer"}, state_reads=["session/customer"]
    )
    assert found == 2
    assert run.graph.root_cause(6, "session/customer", inputs={"key": "x"}, state_reads=[]) is None


def test_root_cause_of_an_unresolvable_reference_is_its_step() -> None:
    run = _invoice_scenario()
    arguments = {"customer_id": "${steps.2.customer_id}"}
    assert run.graph.root_cause(6, "customer_id", inputs=arguments) == 2


def test_root_cause_uses_a_reference_key_when_the_key_is_not_an_input() -> None:
    run = Run()
    run.step(1, {}, {"customer": {"id": "c-404"}})
    run.fail(2, {"note": "for ${steps.1.customer}"})
    assert run.graph.root_cause(2, "customer") == 1


def test_root_cause_through_an_implicit_rename_chain() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {"user_id": 7}, {"owner": 7})
    run.fail(3, {"owner_id": 7})
    assert run.graph.root_cause(3, "owner_id") == 1


def test_root_cause_through_an_explicit_rename_chain() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {"user_id": 7}, {"owner": 7})
    run.step(3, {"note": "unrelated"}, {"ok": True})
    run.fail(4, {"owner_id": "${steps.2.owner}"})
    assert run.graph.root_cause(4, "owner_id") == 1


def test_root_cause_stops_where_the_agent_typed_the_value() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {"user_id": 8}, {"owner": 8})  # 8 is new here: step 2 is the root
    run.fail(3, {"owner_id": "${steps.2.owner}"})
    assert run.graph.root_cause(3, "owner_id") == 2


def test_root_cause_passes_through_an_interpolating_step() -> None:
    run = Run()
    run.step(1, {}, {"id": "c-9"})
    run.step(2, {"path": "drafts/${steps.1.id}.json"}, {"path": "drafts/c-9.json"})
    run.fail(3, {"file": "${steps.2.path}"})
    assert run.graph.root_cause(3, "file") == 1


def test_root_cause_passes_through_managed_state() -> None:
    run = Run()
    run.step(1, {"key": "s", "value": "c-404"}, {"key": "s", "value": "c-404"}, writes=("s",))
    run.step(2, {"key": "other"}, {"ok": 1})
    run.step(3, {"key": "s"}, {"key": "s", "value": "c-404"}, reads=("s",))
    run.fail(4, {"customer_id": "${steps.3.value}"})
    assert run.graph.root_cause(4, "customer_id") == 1


def test_root_cause_of_a_state_key() -> None:
    run = Run()
    run.step(1, {}, {}, writes=("session/customer",))
    run.fail(2, {"key": "x"}, reads=("session/customer",))
    assert run.graph.root_cause(2, "session/customer") == 1


def test_root_cause_with_several_sources_picks_the_earliest() -> None:
    run = Run()
    run.step(1, {}, {"id": "a"})
    run.step(2, {}, {"id": "b"})
    run.fail(3, {"ids": ["${steps.2.id}", "${steps.1.id}"]})
    assert run.graph.root_cause(3, "ids") == 1


def test_root_cause_inside_a_referenced_object() -> None:
    run = Run()
    run.step(1, {}, {"id": 5})
    run.step(2, {"user_id": 5}, {"user": {"id": 5, "name": "x"}})
    run.fail(3, {"payload": "${steps.2.user}"})
    assert run.graph.root_cause(3, "payload.id") == 1
    assert run.graph.root_cause(3, "name") == 2


@pytest.mark.parametrize(
    ("inputs", "key"),
    [
        ({"customer_id": "typed-by-agent"}, "customer_id"),  # no earlier step produced it
        ({"other": 1}, "customer_id"),  # the key is not an input
        ({"flag": True}, "flag"),  # booleans never link
    ],
)
def test_root_cause_is_none_when_nothing_traces(inputs: Any, key: str) -> None:
    run = Run()
    run.step(1, {}, {"id": "c-1", "flag": True})
    run.fail(2, inputs)
    assert run.graph.root_cause(2, key) is None


def test_root_cause_does_not_follow_uninformative_values() -> None:
    run = Run()
    run.step(1, {}, {"active": True})
    run.step(2, {"active": "${steps.1.active}"}, {"enabled": True})
    run.fail(3, {"enabled": "${steps.2.enabled}"})
    assert run.graph.root_cause(3, "enabled") == 2


def test_root_cause_of_a_step_that_is_not_the_newest() -> None:
    run = Run()
    run.step(1, {}, {"id": 7})
    run.step(2, {"user_id": 7}, {"id": 8})
    run.step(3, {}, {"id": 7})
    # Step 2's own inputs are re-examined: the producer must be earlier than step 2.
    assert run.graph.root_cause(2, "user_id", inputs={"user_id": 7}) == 1
    assert run.graph.root_cause(2, "user_id") == 1


# --- durability ----------------------------------------------------------------------------


def _busy_run() -> Run:
    run = _invoice_scenario()
    run.graph.drop_from(6)
    run.calls.append(("drop", 6))
    run.step(6, {"customer_id": "c-1", "n": 1.0, "items": [{"sku_id": 4}]}, {"id": "inv-1"})
    run.step(7, {"invoice_id": "inv-1", "sku": 4}, {"sku": 4}, reads=("session/customer",))
    run.fail(8, {"x": "${steps.7.sku}"}, reads=("wf/step-4",))
    return run


def test_to_dict_from_dict_round_trip_rebuilds_the_same_graph() -> None:
    run = _busy_run()
    data = json.loads(json.dumps(to_dict(run.graph)))
    rebuilt = from_dict(data)
    assert rebuilt.nodes() == run.graph.nodes()
    assert rebuilt.edges() == run.graph.edges()
    assert to_dict(rebuilt) == to_dict(run.graph)
    assert rebuilt._index == run.graph._index
    assert rebuilt._writers == run.graph._writers
    assert rebuilt.root_cause(8, "x") == run.graph.root_cause(8, "x") == 7
    # Both keep working the same way.
    assert rebuilt.add_step(9, {"sku": 4}, {}) == run.graph.add_step(9, {"sku": 4}, {})


def test_replaying_add_step_in_order_rebuilds_the_same_graph() -> None:
    run = _busy_run()
    replayed = DependencyGraph()
    for call in run.calls:
        if call[0] == "ok":
            replayed.add_step(*call[1:])
        elif call[0] == "failed":
            add_failed_step(replayed, *call[1:])
        else:
            replayed.drop_from(call[1])
    assert replayed.edges() == run.graph.edges()
    assert to_dict(replayed) == to_dict(run.graph)


@pytest.mark.parametrize(
    "data", [{}, {"version": 99, "steps": []}, {"version": 1, "steps": [{"step_id": 1}]}, []]
)
def test_from_dict_rejects_malformed_records(data: Any) -> None:
    with pytest.raises(ValueError):
        from_dict(data)


# --- properties ----------------------------------------------------------------------------

_KEYS = st.sampled_from(["id", "user_id", "customer_id", "owner", "value", "name", "n"])
_VALUES = st.one_of(
    st.sampled_from([0, 1, 1.0, 7, "7", "c-1", "", True, False, None]),
    st.integers(-3, 3),
)
_IO = st.dictionaries(_KEYS, st.one_of(_VALUES, st.lists(_VALUES, max_size=3)), max_size=4)
_STATE = st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)
_ACTION = st.one_of(
    st.tuples(st.just("step"), _IO, _IO, _STATE, _STATE),
    st.tuples(st.just("rewind"), st.integers(1, 8)),
)


@settings(max_examples=150)
@given(actions=st.lists(_ACTION, max_size=12))
def test_random_histories_keep_every_invariant(actions: list[Any]) -> None:
    graph = DependencyGraph()
    live: list[tuple[Any, ...]] = []  # the add_step calls that are still live
    next_id = 1
    for action in actions:
        if action[0] == "rewind":
            target = min(action[1], next_id)
            graph.drop_from(target)
            live = [call for call in live if call[0] < target]
            next_id = target
            continue
        _, inputs, output, reads, writes = action
        call = (next_id, inputs, output, (), reads, writes)
        edges = graph.add_step(*call)
        live.append(call)
        for edge in edges:
            assert edge.source < edge.target == next_id
            assert edge.kind in ("implicit", "state")
        next_id += 1
    # A graph built only from the live steps is the same graph: rewinds leave nothing behind.
    fresh = DependencyGraph()
    for call in live:
        fresh.add_step(*call)
    assert fresh.edges() == graph.edges()
    assert fresh._index == graph._index
    assert fresh._writers == graph._writers
    assert from_dict(to_dict(graph)).edges() == graph.edges()
    for edge in graph.edges():
        assert edge.source < edge.target
    for step_id in graph.nodes():
        for key in ("id", "user_id", "value"):
            root = graph.root_cause(step_id, key)
            assert root is None or root < step_id
