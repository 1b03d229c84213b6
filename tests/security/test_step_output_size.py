"""A step's output is measured in UTF-8 bytes before the step becomes durable: an output
whose reply would not fit in a gRPC message is a step failure with a hint naming the limit,
nothing of it is stored, and an output that fits reaches a plain gRPC client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import agenttx
from agenttx import StepStatus
from agenttx.api.history import MAX_MESSAGE_BYTES
from agenttx.core.limits import MAX_OUTPUT_BYTES, reply_room
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving


@agenttx.tool(name="test.blob", effect="state")
async def blob(ctx: agenttx.ToolContext, size: int, char: str = "x", key: str = "") -> str:
    """``char`` repeated ``size`` times (after writing ``key``, if given)."""
    if key:
        await ctx.state.put(f"kv/{key}", "written by the oversized step")
    return char * size


def test_the_output_limit_leaves_the_reply_room_under_the_server_message_cap() -> None:
    assert MAX_OUTPUT_BYTES < MAX_MESSAGE_BYTES
    assert reply_room(["Hint: a learned rule."]) < MAX_OUTPUT_BYTES


async def test_three_million_two_byte_characters_are_a_step_failure_naming_the_limit(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=[blob])
    tx = (await engine.begin()).transaction_id
    # 3M characters pass a cap that counts characters (4M); as UTF-8 they are 6 MB.
    r = await engine.execute_step(tx, 1, "test.blob", {"size": 3_000_000, "char": "é"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert r.clean_hint.startswith("Hint: ")
    assert len(r.clean_hint) <= 240
    assert f"{MAX_OUTPUT_BYTES}-byte limit" in r.clean_hint
    assert "6000002 bytes" in r.clean_hint  # the JSON string's two quotes included
    assert r.next_step_id == 1  # the agent resends the step asking for less
    assert r.output is None
    assert r.output_json == ""


async def test_nothing_of_an_oversized_step_is_stored(open_engine: Any) -> None:
    engine = await open_engine(tools=[blob])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "test.blob", {"size": MAX_OUTPUT_BYTES, "key": "big"})
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    rows = await engine.store.load_steps(tx, live_only=False)
    assert [(row.status, row.live, row.output_json) for row in rows] == [("FAILED", False, "")]
    # The state the step wrote went with it: the next step does not see it (kv.get finds no
    # such key), and committing publishes nothing.
    got = await engine.execute_step(tx, 1, "kv.get", {"key": "big"})
    assert got.status is StepStatus.ROLLBACK_TRIGGERED  # kv.get fails on a missing key only
    done = await engine.execute_step(tx, got.next_step_id, "kv.put", {"key": "other", "value": 1})
    assert done.status is StepStatus.SUCCESS
    await engine.commit(tx)
    assert await engine.store.read_state("default", "kv/big", None) == (None, 0)
    value, _ = await engine.store.read_state("default", "kv/other", None)
    assert value == "1"


@pytest.fixture
async def stub(open_engine: Any) -> AsyncIterator[Any]:
    """A plain generated stub with gRPC's default limits (a reference client's) on a served
    engine that has ``test.blob``."""
    engine = await open_engine(tools=[blob])
    async with serving(engine) as address:
        channel = grpc.aio.insecure_channel(address)
        try:
            yield pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        finally:
            await channel.close()


async def _step(stub: Any, tx: str, step_id: int, tool: str, args: dict[str, Any]) -> Any:
    return await stub.ExecuteStep(
        pb.ExecuteStepRequest(
            transaction_id=tx, step_id=step_id, tool_name=tool, arguments_json=json.dumps(args)
        )
    )


async def test_an_output_that_fills_the_room_left_by_the_constraints_reaches_the_client(
    stub: Any,
) -> None:
    tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
    # A failure first, so the reply also carries a learned constraint.
    failed = await _step(stub, tx, 1, "no.such_tool", {})
    assert failed.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    constraints = list(failed.constraints)
    assert constraints
    room = reply_room(constraints)
    # One byte over the room: refused before it is durable, and the refusal is delivered.
    over = await _step(stub, tx, 1, "test.blob", {"size": room - 1})
    assert over.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert f"{room}-byte limit" in over.clean_hint
    # Exactly the room the reply now leaves (the refusal added its hint to the constraints;
    # the string and its two quotes): the whole reply arrives.
    room = reply_room(list(over.constraints))
    ok = await _step(stub, tx, int(over.next_step_id), "test.blob", {"size": room - 2})
    assert ok.status == pb.STEP_STATUS_SUCCESS
    assert len(ok.output_json.encode()) == room
    assert ok.ByteSize() <= MAX_MESSAGE_BYTES
