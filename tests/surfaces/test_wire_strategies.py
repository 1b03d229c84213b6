"""ROLLBACK_STRATEGY_RETRY (7) reaches only clients that say they can name it.

A client built from the reference's proto has an enum that stops at ABORT (6); it is sent
LOCAL_BACKTRACK in place of RETRY, with the same ``rollback_to_step`` and ``next_step_id``.
A client that sends the metadata entry ``agenttx-accept-strategies: retry`` — our client does,
on every call — gets RETRY. The mapping is made per call, so a stored reply replayed under its
request_id is shaped for whoever asks.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from agenttx.client import AgentTxClient, AsyncAgentTxClient, RollbackTriggered
from agenttx.types import ACCEPT_STRATEGIES_METADATA, StepStatus, Strategy
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from reference_client import ReferenceClient

# The session's reference client, generated once; ``target``, this test's engine behind a server.
pytest_plugins = ["reference_client", "served_engine"]

GOOD = json.dumps({"key": "k", "value": 1})
MISSING_KEY = json.dumps({"value": 1})  # an argument error: the controller answers RETRY

# The reference client (reference_client.py): a step that fails with an argument error, given
# the good and the bad arguments as its two extra strings.
REFERENCE_DRIVER = r"""
tx = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="ref")).transaction_id
seen = []
for step, arguments in ((1, args[0]), (2, args[1]), (2, args[0])):
    r = stub.ExecuteStep(pb.ExecuteStepRequest(
        transaction_id=tx, step_id=step, tool_name="kv.put", arguments_json=arguments))
    known = r.strategy in pb.RollbackStrategy.values()
    seen.append({
        "status": pb.StepStatus.Name(r.status),
        "strategy": r.strategy,
        "strategy_name": pb.RollbackStrategy.Name(r.strategy) if known else None,
        "rollback_to_step": r.rollback_to_step,
        "next_step_id": r.next_step_id,
    })
"""


async def test_a_reference_client_gets_local_backtrack_in_place_of_retry(
    reference_client: ReferenceClient, target: str
) -> None:
    first, failed, again = await reference_client.run(REFERENCE_DRIVER, target, GOOD, MISSING_KEY)

    assert first["status"] == "STEP_STATUS_SUCCESS"
    assert failed["status"] == "STEP_STATUS_ROLLBACK_TRIGGERED"
    # A value its enum can name, with RETRY's target: the same step, nothing earlier undone.
    assert failed["strategy"] == pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK
    assert failed["strategy_name"] == "ROLLBACK_STRATEGY_LOCAL_BACKTRACK"
    assert (failed["rollback_to_step"], failed["next_step_id"]) == (2, 2)
    assert again["status"] == "STEP_STATUS_SUCCESS"
    assert again["next_step_id"] == 3


async def _failing_step(
    stub: Any, metadata: Any, request_id: str = ""
) -> tuple[str, pb.ExecuteStepResponse]:
    """Begin, run step 1, and send step 2 with an argument error; (transaction id, reply)."""
    tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
    await stub.ExecuteStep(
        pb.ExecuteStepRequest(transaction_id=tx, step_id=1, tool_name="kv.put", arguments_json=GOOD)
    )
    reply: pb.ExecuteStepResponse = await stub.ExecuteStep(
        pb.ExecuteStepRequest(
            transaction_id=tx,
            step_id=2,
            tool_name="kv.put",
            arguments_json=MISSING_KEY,
            request_id=request_id,
        ),
        metadata=metadata,
    )
    return tx, reply


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (None, pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK),
        (((ACCEPT_STRATEGIES_METADATA, ""),), pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK),
        (((ACCEPT_STRATEGIES_METADATA, "abort"),), pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK),
        (((ACCEPT_STRATEGIES_METADATA, "retry"),), pb.ROLLBACK_STRATEGY_RETRY),
        (((ACCEPT_STRATEGIES_METADATA, " Retry , some-future-one"),), pb.ROLLBACK_STRATEGY_RETRY),
        (
            ((ACCEPT_STRATEGIES_METADATA, "other"), (ACCEPT_STRATEGIES_METADATA, "retry")),
            pb.ROLLBACK_STRATEGY_RETRY,
        ),
    ],
)
async def test_retry_is_sent_only_when_the_metadata_names_it(
    target: str, metadata: Any, expected: int
) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        _, reply = await _failing_step(stub, metadata)
    assert reply.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert reply.strategy == expected
    assert (reply.rollback_to_step, reply.next_step_id) == (2, 2)


async def test_a_replayed_reply_is_shaped_for_the_client_that_asks(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        tx, ours = await _failing_step(stub, ((ACCEPT_STRATEGIES_METADATA, "retry"),), "req-1")
        assert ours.strategy == pb.ROLLBACK_STRATEGY_RETRY
        # The same request again (same request_id and payload) from a client that does not
        # name RETRY: the stored reply, with the strategy it can name.
        replayed = await stub.ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=tx,
                step_id=2,
                tool_name="kv.put",
                arguments_json=MISSING_KEY,
                request_id="req-1",
            )
        )
    assert replayed.revision == ours.revision  # the stored reply, not a second run
    assert replayed.strategy == pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK
    assert (replayed.rollback_to_step, replayed.next_step_id) == (2, 2)


async def test_our_async_client_says_it_understands_retry(target: str) -> None:
    async with AsyncAgentTxClient(target, timeout=10) as client:
        tx = (await client.begin()).transaction_id
        await client.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
        r = await client.execute_step(tx, 2, "kv.put", {"value": 1})
        assert (r.status, r.strategy) == (StepStatus.ROLLBACK_TRIGGERED, Strategy.RETRY)
        assert (r.rollback_to_step, r.next_step_id) == (2, 2)
        async with client.transaction() as helper:
            await helper.step("kv.put", {"key": "k", "value": 1})
            with pytest.raises(RollbackTriggered) as raised:
                await helper.step("kv.put", {"value": 1})
            assert raised.value.strategy is Strategy.RETRY
            await helper.step("kv.put", {"key": "k2", "value": 2})


async def test_our_sync_client_says_it_understands_retry_alongside_its_own_metadata(
    target: str,
) -> None:
    def run() -> tuple[Any, Any]:
        with AgentTxClient(target, timeout=10, metadata=[("x-team", "billing")]) as client:
            tx = client.begin().transaction_id
            client.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
            return client.execute_step(tx, 2, "kv.put", {"value": 1}), client.metadata

    r, metadata = await asyncio.to_thread(run)
    assert (r.status, r.strategy) == (StepStatus.ROLLBACK_TRIGGERED, Strategy.RETRY)
    assert (r.rollback_to_step, r.next_step_id) == (2, 2)
    assert metadata == (("x-team", "billing"),)  # the caller's own metadata is left as given
