"""Issue 11, points 1 and 2: a failure whose cause is the step's own is retried in place and
keeps every earlier step; same-step retries have their own bound (``max_step_retries``) and
never spend the replay budget. Engine tests run on both stores with the real built-in tools.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agenttx
from agenttx import StepStatus, Strategy
from agenttx.api.operations.table import begin_policy
from agenttx.client._wire import begin_request
from agenttx.core.controller import ControllerState, Failure, RollbackController
from agenttx.core.graph import DependencyGraph
from agenttx.types import RollbackPolicy
from agenttx.wire import agenttx_pb2 as pb

RETRY = Strategy.RETRY
DJ = Strategy.DEPENDENCY_JUMP
LB = Strategy.LOCAL_BACKTRACK
RESET = Strategy.GLOBAL_RESET


@agenttx.tool(name="test.greet", effect="state")
async def greet(ctx: agenttx.ToolContext, name: str, greeting: str = "hello") -> dict[str, str]:
    await ctx.state.put(f"greeted/{name}", greeting)
    return {"text": f"{greeting}, {name}"}


async def _committed(engine: agenttx.Engine, key: str) -> Any:
    reader = (await engine.begin()).transaction_id
    r = await engine.execute_step(reader, 1, "kv.get", {"key": key})
    await engine.rollback(reader)
    return r.output["value"] if r.status is StepStatus.SUCCESS else None


# --- the decision, end to end --------------------------------------------------------------


async def test_missing_literal_key_retries_and_keeps_the_earlier_write(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    assert (await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})).next_step_id == 2
    r = await engine.execute_step(tx, 2, "kv.get", {"key": "nope"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert (r.strategy, r.rollback_to_step, r.next_step_id) == (RETRY, 2, 2)
    assert r.error_category == "not_found"
    # step 1 was not undone: its output is still there for a reference, and it commits
    r = await engine.execute_step(tx, 2, "kv.get", {"key": "${steps.1.key}"})
    assert r.output == {"key": "a", "value": 1}
    await engine.commit(tx)
    assert await _committed(engine, "a") == 1


async def test_a_value_from_a_reference_still_jumps_to_its_producer(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "cust", "value": "c-404"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    r = await engine.execute_step(
        tx, 3, "record.get", {"table": "customers", "id": "${steps.1.value}"}
    )
    assert (r.strategy, r.next_step_id) == (DJ, 1)


async def test_a_value_from_an_implicit_edge_still_jumps_to_its_producer(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "record.insert", {"table": "customers", "id": "c-7"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    # "c-7" is typed, but it equals step 1's output under the same key: the graph ties them
    r = await engine.execute_step(tx, 3, "record.get", {"table": "orders", "id": "c-7"})
    assert (r.strategy, r.next_step_id) == (DJ, 1)


async def test_a_misspelled_argument_of_a_user_tool_retries_in_place(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=[greet])
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    r = await engine.execute_step(tx, 2, "test.greet", {"name": "Ada", "greting": "hi"})
    assert (r.strategy, r.next_step_id) == (RETRY, 2)
    r = await engine.execute_step(tx, 2, "test.greet", {"name": "Ada", "greeting": "hi"})
    assert r.output == {"text": "hi, Ada"}
    await engine.commit(tx)
    assert await _committed(engine, "a") == 1


async def test_malformed_json_and_unknown_tools_retry_in_place(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    r = await engine.execute_step(tx, 2, "kv.put", '{"key": "b",')
    assert (r.strategy, r.next_step_id) == (RETRY, 2)
    r = await engine.execute_step(tx, 2, "kv.putt", {"key": "b"})
    assert (r.strategy, r.next_step_id) == (RETRY, 2)


async def test_three_typos_at_step_one_never_reset_the_transaction(
    engine: agenttx.Engine,
) -> None:
    # max(1, ⌈2·1·1⌉) = 2 replayed steps is the whole budget at N = 1: retries used to spend it
    tx = (await engine.begin()).transaction_id
    got = [await engine.execute_step(tx, 1, "kv.put", {"kee": "a"}) for _ in range(3)]
    assert [r.strategy for r in got] == [RETRY] * 3
    assert not any(r.context_reset for r in got)
    # the same step keeps failing: now it escalates as a persistent failure
    r = await engine.execute_step(tx, 1, "kv.put", {"kee": "a"})
    assert (r.strategy, r.next_step_id) == (LB, 1)
    assert (await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})).next_step_id == 2
    assert (await engine.commit(tx)).committed
    assert (await engine.get_transaction(tx)).global_resets == 0


async def test_max_step_retries_per_transaction(engine: agenttx.Engine) -> None:
    tx = (await engine.begin(policy={"max_step_retries": 1})).transaction_id
    assert (await engine.get_transaction(tx)).policy.max_step_retries == 1
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    first = await engine.execute_step(tx, 2, "kv.get", {"key": "nope"})
    second = await engine.execute_step(tx, 2, "kv.get", {"key": "nope"})
    assert [first.strategy, second.strategy] == [RETRY, LB]
    assert second.next_step_id == 1

    none = (await engine.begin(policy=RollbackPolicy(max_step_retries=0))).transaction_id
    await engine.execute_step(none, 1, "kv.put", {"key": "a", "value": 1})
    r = await engine.execute_step(none, 2, "kv.get", {"key": "nope"})
    assert (r.strategy, r.next_step_id) == (LB, 1)  # the reference's decision


async def test_the_retry_streak_ends_when_the_step_succeeds(open_engine: Any) -> None:
    engine = await open_engine()
    tx = (await engine.begin(policy={"max_step_retries": 1})).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    assert (await engine.execute_step(tx, 2, "kv.get", {"key": "x"})).strategy is RETRY
    await engine.execute_step(tx, 2, "kv.get", {"key": "a"})
    await engine.rollback(tx, to_step=2)
    # a later failure of step 2 starts a new streak, also in an engine opened afresh
    await engine.close()
    engine = await open_engine()
    assert (await engine.execute_step(tx, 2, "kv.get", {"key": "x"})).strategy is RETRY


@pytest.mark.parametrize("value", [33, -1, 2.5, "3"])
def test_max_step_retries_out_of_range_is_refused(value: Any) -> None:
    with pytest.raises(agenttx.InvalidArgument, match=r"max_step_retries must be 0\.\.32"):
        RollbackPolicy(max_step_retries=value)


def test_max_step_retries_crosses_the_wire() -> None:
    req = begin_request("a", None, {"max_step_retries": 5}, "snapshot", (), None)
    assert req.policy.HasField("max_step_retries")
    assert not req.policy.HasField("max_local_depth")  # the server's default fills it
    assert begin_policy(req) == {
        "max_local_depth": None,
        "max_global_resets": None,
        "replay_budget_factor": None,
        "max_step_retries": 5,
    }
    assert not pb.RollbackPolicy().HasField("max_step_retries")


def test_policy_round_trips_through_its_dict() -> None:
    for policy in (RollbackPolicy(), RollbackPolicy(max_step_retries=0)):
        assert RollbackPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy
    assert RollbackPolicy.from_dict({}).max_step_retries is None


# --- the decision table (docs/rollback-strategies.md) ---------------------------------------


@pytest.mark.parametrize(
    ("category", "root", "in_arguments", "literal", "expected"),
    [
        # transient: retried whatever the graph says
        ("timeout", None, False, False, RETRY),
        ("rate_limited", 2, False, False, RETRY),
        # argument validation: retried unless an earlier step supplied the value
        ("missing_field", None, False, False, RETRY),
        ("type_mismatch", 2, False, False, DJ),
        ("unknown", None, True, False, RETRY),  # e.g. pydantic extra_forbidden
        ("unknown", 2, True, False, DJ),
        # lookup / constraint: retried only on a literal of the step's own arguments
        ("not_found", None, False, True, RETRY),
        ("foreign_key", None, False, True, RETRY),
        ("unique_violation", None, False, True, RETRY),
        ("file_not_found", None, False, True, RETRY),
        ("not_found", None, False, False, LB),
        ("foreign_key", 2, False, False, DJ),
        ("path_escape", None, False, True, RETRY),
        # anything else: on literal inputs, retried in place of the first local backtrack;
        # otherwise the reference's decisions
        ("unknown", None, False, True, RETRY),
        ("permission_denied", None, False, True, RETRY),
        ("unknown", None, False, False, LB),
        ("unknown", 2, False, True, DJ),
        ("unknown", 2, False, False, DJ),
    ],
)
def test_decision_table(
    category: str, root: int | None, in_arguments: bool, literal: bool, expected: Strategy
) -> None:
    failure = Failure(6, category, "k", root, in_arguments=in_arguments, literal=literal)
    d = RollbackController().decide(failure, ControllerState(), RollbackPolicy())
    assert d.strategy is expected


def test_a_literal_retry_takes_the_place_of_the_first_local_backtrack() -> None:
    """Rule 1b: counted as K's first failure, so a persistent failure on typed inputs escalates
    as the reference's would (LB 5, LB 4, reset) with its first backtrack replaced."""
    c = RollbackController()
    typed = Failure(6, "unknown", literal=True)
    s = ControllerState()
    got = [c.decide(typed, s, RollbackPolicy()) for _ in range(3)]
    assert [(d.strategy, d.target) for d in got] == [(RETRY, 6), (LB, 4), (RESET, 1)]
    assert s.replay_used == 0  # the new epoch starts at 0; the retry never charged it
    # D = 0 has no first backtrack to replace; retries off is the reference's decision
    assert c.decide(typed, ControllerState(), RollbackPolicy(max_local_depth=0)).strategy is RESET
    assert c.decide(typed, ControllerState(), RollbackPolicy(max_step_retries=0)).strategy is LB


def test_a_streak_is_per_step_and_cleared_by_success() -> None:
    c, s, policy = RollbackController(), ControllerState(), RollbackPolicy(max_step_retries=2)
    typo = Failure(3, "missing_field")
    assert [c.decide(typo, s, policy).strategy for _ in range(3)] == [RETRY, RETRY, LB]
    c.on_step_succeeded(s, 3)
    assert s.retries == {}
    assert c.decide(typo, s, policy).strategy is RETRY
    assert c.decide(Failure(4, "missing_field"), s, policy).strategy is RETRY


def test_the_policy_bound_beats_the_controllers_default() -> None:
    c = RollbackController(max_retries_per_step=5)
    assert c.retry_limit(RollbackPolicy()) == 5
    assert c.retry_limit(RollbackPolicy(max_step_retries=1)) == 1
    assert RollbackController().retry_limit(RollbackPolicy(max_step_retries=0)) == 0


# --- termination with streaks that end on success ------------------------------------------

CATEGORIES = ["timeout", "missing_field", "not_found", "unknown", "foreign_key"]


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 24),
    depth=st.integers(0, 16),
    resets=st.integers(0, 6),
    factor=st.one_of(st.floats(0.1, 50), st.sampled_from([0.1, 1000.0])),
    retries=st.one_of(st.none(), st.integers(0, 16)),
    p_fail=st.floats(0, 1),
    rng=st.randoms(use_true_random=False),
)
def test_every_transaction_ends_within_the_new_bound(
    n: int,
    depth: int,
    resets: int,
    factor: float,
    retries: int | None,
    p_fail: float,
    rng: random.Random,
) -> None:
    """(resets + 1) · (B + N) · (R + 1) step runs at most, whatever fails how, with retry
    streaks cleared by every success and failures local, literal or traced at random."""
    policy = RollbackPolicy(depth, resets, factor, retries)
    c = RollbackController()
    limit = c.retry_limit(policy)
    bound = (resets + 1) * (policy.replay_budget(n) + n) * (limit + 1)
    state, calls, step = ControllerState(), 0, 1
    while step <= n:
        calls += 1
        assert calls <= bound
        c.on_step_started(state, step)
        if rng.random() >= p_fail:
            c.on_step_succeeded(state, step)
            step += 1
            continue
        failure = Failure(
            step,
            rng.choice(CATEGORIES),
            root_step=rng.choice([None, None, rng.randint(0, step + 1)]),
            in_arguments=rng.random() < 0.3,
            literal=rng.random() < 0.5,
        )
        d = c.decide(failure, state, policy)
        assert all(v <= limit for v in state.retries.values())
        assert state.replay_used <= policy.replay_budget(state.furthest_step)
        if d.strategy is Strategy.ABORT:
            break
        state = ControllerState.from_dict(json.loads(json.dumps(state.to_dict())))
        step = d.target


# --- the graph's literal test ---------------------------------------------------------------


def _graph() -> DependencyGraph:
    g = DependencyGraph()
    g.add_step(1, {"key": "a", "value": "c-404"}, {"key": "a", "value": "c-404"})
    g.add_step(2, {"table": "customers", "id": "c-7"}, {"table": "customers", "id": "c-7"})
    g.add_step(3, {"key": "s"}, {"key": "s", "value": 1}, state_writes=["kv/s"])
    return g


@pytest.mark.parametrize(
    ("inputs", "key", "state_reads", "literal"),
    [
        ({"table": "orders", "id": "o-1"}, "id", (), True),  # typed, no earlier output equal
        ({"fields": {"customer_id": "x-1"}}, "customer_id", (), True),  # at any depth
        ({"id": "${steps.1.value}"}, "id", (), False),  # a reference supplied it
        ({"table": "orders", "id": "c-7"}, "id", (), False),  # an implicit edge from step 2
        ({"key": "nope"}, "key", ("kv/s",), False),  # read state step 3 wrote
        ({"key": "nope"}, "key", ("kv/nope",), True),  # read state nobody wrote
        ({"table": "orders"}, "id", (), True),  # the key is not an argument: all inputs typed
        ({"name": "zzz"}, "zzz", (), True),  # a KeyError on an argument's value
        ({"name": "${steps.1.value}"}, "zzz", (), False),  # ... that a reference supplied
        ({"name": "zzz"}, "zzz", ("kv/s",), False),  # ... or after reading state step 3 wrote
        ({"path": "reports/x.txt"}, "", (), True),  # no key named, nothing from earlier
        ({"path": "${steps.1.key}.txt"}, "", (), False),  # no key named, a reference
    ],
)
def test_a_literal_is_typed_at_the_step_and_supplied_by_no_earlier_one(
    inputs: dict[str, Any], key: str, state_reads: tuple[str, ...], literal: bool
) -> None:
    assert _graph().is_literal(4, key, inputs=inputs, state_reads=state_reads) is literal


def test_a_permanent_failure_keeps_earlier_steps_then_aborts() -> None:
    # auth / quota: nothing in the transaction caused it and no rewind can fix it
    c = RollbackController(permanent_categories=frozenset({"http_auth"}))
    s, policy = ControllerState(), RollbackPolicy(max_step_retries=2)
    got = [c.decide(Failure(5, "http_auth"), s, policy) for _ in range(3)]
    assert [d.strategy for d in got] == [RETRY, RETRY, Strategy.ABORT]
    assert got[-1].abort_reason == "step 5 keeps failing with http_auth; fix it outside"
    assert (s.failures, s.replay_used) == ({}, 0)  # nothing earlier was undone or charged
    # without the set, the same category is the reference's local backtrack
    no_set = RollbackController(permanent_categories=frozenset())
    d = no_set.decide(Failure(5, "http_auth"), ControllerState(), policy)
    assert d.strategy is LB
