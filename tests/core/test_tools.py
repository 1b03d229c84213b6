"""The tool contract: schemas from type hints, validation, sync and async tools, timeouts,
effect classes, undo handlers, fatal and uncertain failures, loading tools from modules."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import EffectClass, StepStatus, Strategy, TxStatus
from agenttx.tools.registry import load_tools


@agenttx.tool(name="math.add", effect="read", description="Add two integers.")
async def add(ctx: agenttx.ToolContext, a: int, b: int = 0) -> dict[str, int]:
    return {"sum": a + b}


@agenttx.tool(name="math.mul_sync", effect="read")
def mul_sync(ctx: agenttx.SyncToolContext, a: int, b: int) -> dict[str, int]:
    time.sleep(0.001)  # a blocking call: it runs on a worker thread
    return {"product": a * b}


@agenttx.tool(name="counter.bump_sync", effect="state")
def bump_sync(ctx: agenttx.SyncToolContext, key: str) -> int:
    value = int(ctx.state.get(key, 0)) + 1
    ctx.state.put(key, value)
    return value


def test_input_schema_comes_from_type_hints() -> None:
    schema = add.input_schema
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["required"] == ["a"]
    assert add.effect is EffectClass.READ
    assert add.describe()["description"] == "Add two integers."


async def test_async_and_sync_tools_run(open_engine: Any) -> None:
    engine = await open_engine(tools=[add, mul_sync, bump_sync])
    tx = (await engine.begin()).transaction_id
    assert (await engine.execute_step(tx, 1, "math.add", {"a": 2, "b": 3})).output == {"sum": 5}
    r = await engine.execute_step(tx, 2, "math.mul_sync", {"a": 4, "b": 5})
    assert r.output == {"product": 20}
    assert (await engine.execute_step(tx, 3, "counter.bump_sync", {"key": "c"})).output == 1
    assert (await engine.execute_step(tx, 4, "counter.bump_sync", {"key": "c"})).output == 2


async def test_arguments_are_validated_before_the_tool_runs(open_engine: Any) -> None:
    calls: list[int] = []

    @agenttx.tool(name="strict.tool", effect="read")
    async def strict(ctx: agenttx.ToolContext, count: int) -> int:
        calls.append(count)
        return count

    engine = await open_engine(tools=[strict])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "strict.tool", {"count": "many"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.next_step_id == 1  # the same step, with other arguments
    assert r.strategy is Strategy.RETRY
    r = await engine.execute_step(tx, 1, "strict.tool", {})
    assert "count" in r.clean_hint
    r = await engine.execute_step(tx, 1, "strict.tool", {"count": 3, "extra": 1})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert calls == []


async def test_unknown_tool_lists_the_registered_ones(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.putt", {"key": "a"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "unknown_tool"
    info = await engine.get_transaction(tx)
    assert "kv.put" in info.steps[-1].clean_hint or "kv.put" in r.clean_hint


async def test_malformed_json_arguments_are_a_step_failure(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.put", '{"key": ')
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "malformed_json"
    assert r.next_step_id == 1


async def test_a_slow_tool_times_out(open_engine: Any) -> None:
    import asyncio

    @agenttx.tool(name="slow.read", effect="read", timeout=0.05)
    async def slow(ctx: agenttx.ToolContext) -> None:
        await asyncio.sleep(5)

    engine = await open_engine(tools=[slow])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "slow.read", {})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.error_category == "timeout"
    assert r.strategy is Strategy.RETRY


async def test_fatal_error_aborts_at_once(open_engine: Any, tmp_path: Path) -> None:
    @agenttx.tool(name="pay.charge", effect="irreversible")
    async def charge(ctx: agenttx.ToolContext, amount: int) -> None:
        raise agenttx.FatalToolError("card reported stolen")

    engine = await open_engine(tools=[charge])
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "fs.write", {"path": "a.txt", "contents": "x"})
    r = await engine.execute_step(tx, 2, "pay.charge", {"amount": 5})
    assert r.status is StepStatus.FAILED
    assert r.strategy is Strategy.ABORT
    assert r.next_step_id == 0
    assert "fatal" in r.abort_reason
    assert not (tmp_path / "files" / "a.txt").exists()  # the earlier write was undone
    assert (await engine.get_transaction(tx)).status is TxStatus.FAILED


async def test_compensatable_tool_is_undone_newest_first(open_engine: Any) -> None:
    log: list[str] = []

    @agenttx.tool(name="crm.create", effect="compensatable")
    async def create(ctx: agenttx.ToolContext, email: str) -> dict[str, str]:
        await ctx.register_undo({"email": email})
        log.append(f"create {email}")
        return {"email": email}

    @create.undo
    async def delete(ctx: Any, email: str) -> None:
        log.append(f"delete {email}")

    engine = await open_engine(tools=[create])
    tx = (await engine.begin()).transaction_id
    for i, email in enumerate(["a@x", "b@x", "c@x"], start=1):
        await engine.execute_step(tx, i, "crm.create", {"email": email})
    result = await engine.rollback(tx, to_step=2)
    assert result.compensations_run == 2
    assert result.next_step_id == 2
    assert log[3:] == ["delete c@x", "delete b@x"]
    result = await engine.rollback(tx)
    assert result.compensations_run == 1
    assert log[-1] == "delete a@x"


async def test_failing_compensation_is_retried_then_needs_a_human(open_engine: Any) -> None:
    tries: list[int] = []

    @agenttx.tool(name="api.call", effect="compensatable")
    async def call(ctx: agenttx.ToolContext) -> None:
        await ctx.register_undo({})

    @call.undo
    async def undo(ctx: Any) -> None:
        tries.append(1)
        raise ConnectionError("api down")

    engine = await open_engine(tools=[call], compensation_retries=3)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "api.call", {})
    result = await engine.rollback(tx)
    assert len(tries) == 3
    assert result.compensation_errors
    assert "api down" in result.compensation_errors[0]
    info = await engine.get_transaction(tx)
    assert info.requires_human
    assert "api down" in info.compensation_errors[0]


async def test_uncertain_outcome_blocks_until_resolved(open_engine: Any) -> None:
    @agenttx.tool(name="pay.send", effect="irreversible")
    async def send(ctx: agenttx.ToolContext, amount: int) -> None:
        raise agenttx.UncertainOutcome("gateway timed out after sending", operation_id="op-1")

    engine = await open_engine(tools=[send])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.send", {"amount": 10})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    assert r.next_step_id == 1
    with pytest.raises(agenttx.OutcomeUnknownPending):
        await engine.execute_step(tx, 1, "pay.send", {"amount": 10})
    with pytest.raises(agenttx.OutcomeUnknownPending):
        await engine.commit(tx)
    info = await engine.resolve_outcome(tx, 1, happened=True, output={"paid": 10})
    assert info.next_step_id == 2
    assert (await engine.commit(tx)).steps_committed == 1


async def test_outcome_not_happened_lets_the_step_run_again(open_engine: Any) -> None:
    attempts: list[int] = []

    @agenttx.tool(name="pay.maybe", effect="irreversible")
    async def maybe(ctx: agenttx.ToolContext) -> dict[str, bool]:
        attempts.append(1)
        if len(attempts) == 1:
            raise agenttx.UncertainOutcome("no answer")
        return {"ok": True}

    engine = await open_engine(tools=[maybe])
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "pay.maybe", {})
    await engine.resolve_outcome(tx, 1, happened=False)
    r = await engine.execute_step(tx, 1, "pay.maybe", {})
    assert r.status is StepStatus.SUCCESS


def test_tools_load_from_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_tools.py").write_text(
        textwrap.dedent(
            """
            import agenttx

            @agenttx.tool(name="greet.hello", effect="read")
            async def hello(ctx, name: str) -> str:
                return f"hello {name}"

            TOOLS = [hello]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert [t.name for t in load_tools("my_tools")] == ["greet.hello"]
        assert [t.name for t in load_tools("my_tools:TOOLS")] == ["greet.hello"]
        with pytest.raises(agenttx.InvalidArgument, match="no attribute"):
            load_tools("my_tools:nope")
        with pytest.raises(agenttx.InvalidArgument, match="cannot import"):
            load_tools("no_such_module_xyz")
    finally:
        sys.modules.pop("my_tools", None)


def test_bad_tool_declarations_are_rejected() -> None:
    with pytest.raises(agenttx.InvalidArgument, match="unknown effect class"):
        agenttx.tool(name="x.y", effect="magic")
    with pytest.raises(agenttx.InvalidArgument, match="tool name"):

        @agenttx.tool(name="x" * 129, effect="read")
        async def too_long(ctx: agenttx.ToolContext) -> None: ...


async def test_tool_output_must_be_json(open_engine: Any) -> None:
    @agenttx.tool(name="bad.output", effect="read")
    async def bad(ctx: agenttx.ToolContext) -> object:
        return object()

    engine = await open_engine(tools=[bad])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "bad.output", {})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert "JSON" in r.clean_hint or "serializable" in r.clean_hint
