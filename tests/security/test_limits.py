"""The reference's caps, with clear errors; bad input loses nothing."""

from __future__ import annotations

import pytest

import agenttx
from agenttx import StepStatus


async def test_begin_caps(engine: agenttx.Engine) -> None:
    with pytest.raises(agenttx.InvalidArgument, match="agent_id exceeds 256 bytes"):
        await engine.begin(agent_id="é" * 129)
    with pytest.raises(agenttx.InvalidArgument, match="metadata exceeds 64 entries"):
        await engine.begin(metadata={str(i): "v" for i in range(65)})
    assert await engine.begin(agent_id="a" * 256, metadata={str(i): "" for i in range(64)})


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"max_local_depth": 17}, "max_local_depth"),
        ({"max_global_resets": 17}, "max_global_resets"),
        ({"replay_budget_factor": 0.05}, "replay_budget_factor"),
        ({"replay_budget_factor": 1001}, "replay_budget_factor"),
    ],
)
async def test_policy_ranges(
    engine: agenttx.Engine, policy: dict[str, float], message: str
) -> None:
    with pytest.raises(agenttx.InvalidArgument, match=message):
        await engine.begin(policy=policy)


async def test_step_request_caps(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.InvalidArgument, match="step_id must be >= 1"):
        await engine.execute_step(tx, 0, "kv.put", {})
    with pytest.raises(agenttx.InvalidArgument, match="tool_name must be 1-128 bytes"):
        await engine.execute_step(tx, 1, "", {})
    with pytest.raises(agenttx.InvalidArgument, match="tool_name must be 1-128 bytes"):
        await engine.execute_step(tx, 1, "t" * 129, {})
    with pytest.raises(agenttx.InvalidArgument, match="arguments_json exceeds 1048576 bytes"):
        await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": "x" * (1 << 20)})
    with pytest.raises(agenttx.InvalidArgument, match="raw_context exceeds 1048576 bytes"):
        await engine.execute_step(tx, 1, "kv.put", {"key": "a"}, raw_context="x" * (1 << 20 | 1))
    # None of that consumed the step: step 1 is still the one expected, and works.
    r = await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    assert r.status is StepStatus.SUCCESS


async def test_state_key_size(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.put", {"key": "k" * 1100, "value": 1})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "1-1024 bytes" in r.clean_hint or r.error_category != ""
    r = await engine.execute_step(tx, 1, "kv.put", {"key": "k" * 1000, "value": 1})
    assert r.status is StepStatus.SUCCESS


async def test_rollback_to_step_must_be_before_the_next(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a"})
    with pytest.raises(agenttx.InvalidArgument, match="must be lower than the next step 2"):
        await engine.rollback(tx, to_step=2)


async def test_committed_data_survives_bad_requests(open_engine: object) -> None:
    engine = await open_engine()  # type: ignore[operator]
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "keep", "value": 42})
    await engine.commit(tx)
    other = (await engine.begin()).transaction_id
    for bad in ("{", "[1,", '"just a string"', "null"):
        await engine.execute_step(other, 1, "kv.put", bad)
    reader = (await engine.begin()).transaction_id
    r = await engine.execute_step(reader, 1, "kv.get", {"key": "keep"})
    assert r.output == {"key": "keep", "value": 42}
