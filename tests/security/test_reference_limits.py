"""References cannot escape the size limits: the resolved arguments are limited (bytes and
count of references) while they are resolved, before anything is built in full; the step
fails with a hint naming the limit and nothing oversized is stored. Engine-level, both
stores; the gRPC side is in ``test_hostile_inputs.py``."""

from __future__ import annotations

import time
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus
from agenttx.core.refs import ResolveLimits, json_size_within, resolve
from agenttx.errors import ArgumentsRefused
from agenttx.jsontext import compact

MB = "x" * 1_000_000


def ok(result: agenttx.StepResult) -> bool:
    return result.status is StepStatus.SUCCESS


@pytest.mark.serial  # a wall-clock bound
def test_resolving_stops_at_the_budget_before_building_the_expansion() -> None:
    outputs = {1: {"value": MB}}
    arguments = {"value": ["${steps.1.value}"] * 500}
    started = time.perf_counter()
    with pytest.raises(ArgumentsRefused) as refused:
        resolve(arguments, outputs, 2, ResolveLimits(1 << 20, 1024))
    assert refused.value.limit == "max_resolved_arguments_bytes"
    assert time.perf_counter() - started < 0.5  # 500 MB was never built


def test_the_reference_count_is_limited() -> None:
    outputs = {1: {"key": "k"}}
    arguments = {"v": "${steps.1.key}" * 11}
    with pytest.raises(ArgumentsRefused) as refused:
        resolve(arguments, outputs, 2, ResolveLimits(1 << 20, 10))
    assert refused.value.limit == "max_references"
    resolved, used = resolve(arguments, outputs, 2, ResolveLimits(1 << 20, 11))
    assert resolved == {"v": "k" * 11}
    assert len(used) == 11


def test_within_the_limits_resolving_is_unchanged() -> None:
    outputs = {1: {"value": MB[:1000], "n": [1, 2, {"a": None}]}}
    arguments = {"a": "${steps.1.value}", "b": "n=${steps.1.n}", "c": ["${steps.1.n.2}"]}
    limited = resolve(arguments, outputs, 2, ResolveLimits(1 << 20, 1024))
    assert limited == resolve(arguments, outputs, 2)


@pytest.mark.serial  # a wall-clock bound
def test_the_size_measure_is_a_lower_bound_that_stops_at_its_budget() -> None:
    value = {"a": ["x" * 10, 1, None, True, {"b": "é"}]}
    assert json_size_within(value, 10**9) <= len(compact(value).encode())
    huge = [[0] * 1000] * 10_000  # 10 million numbers
    started = time.perf_counter()
    assert json_size_within(huge, 5000) > 5000
    assert time.perf_counter() - started < 0.1


async def test_a_reference_bomb_is_a_step_failure_that_stores_only_the_sent_arguments(
    open_engine: Any,
) -> None:
    engine: agenttx.Engine = await open_engine()
    tx = (await engine.begin()).transaction_id
    assert ok(await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": MB}))
    sent = {"key": "k2", "value": ["${steps.1.value}"] * 500}
    r = await engine.execute_step(tx, 2, "kv.put", sent)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "max_resolved_arguments_bytes" in r.clean_hint
    assert r.next_step_id == 2  # the step's own arguments are at fault: resend them
    rows = await engine.store.load_steps(tx, live_only=False)
    failed = [row for row in rows if row.status == "FAILED"]
    assert [len(row.arguments_json) for row in failed] == [len(compact(sent))]


async def test_the_limits_are_engine_settings(open_engine: Any) -> None:
    engine: agenttx.Engine = await open_engine(max_resolved_arguments_bytes=4096, max_references=2)
    tx = (await engine.begin()).transaction_id
    assert ok(await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": "y" * 3000}))
    r = await engine.execute_step(tx, 2, "kv.put", {"key": "a", "value": "${steps.1.value}"})
    assert r.status is StepStatus.SUCCESS  # 3 KB resolved: under 4 KiB
    r = await engine.execute_step(
        tx, 3, "kv.put", {"key": "a", "value": ["${steps.1.value}", "${steps.1.value}"]}
    )
    assert "max_resolved_arguments_bytes" in r.clean_hint
    r = await engine.execute_step(tx, 3, "kv.put", {"key": "a", "value": "${steps.1.key}" * 3})
    assert "max_references" in r.clean_hint
    with pytest.raises(agenttx.InvalidArgument, match="max_references"):
        await open_engine(max_references=0)


async def test_escapes_that_grow_the_text_are_caught_by_the_exact_check(open_engine: Any) -> None:
    # Control characters cost 1 in the budget's lower bound and 6 bytes in JSON (\u0001):
    # the resolved text is measured exactly before it is stored or handed to the tool.
    engine: agenttx.Engine = await open_engine(max_resolved_arguments_bytes=100_000)
    tx = (await engine.begin()).transaction_id
    assert ok(await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": "\x01" * 30_000}))
    r = await engine.execute_step(tx, 2, "kv.put", {"key": "a", "value": "${steps.1.value}"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "max_resolved_arguments_bytes" in r.clean_hint
