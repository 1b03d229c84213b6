"""``AsyncAgentTxClient.find_transaction`` against a real server (issue 23.8): the client
rebuilds exactly the ``FoundTransaction`` the engine returns, by a receipt id and by each
call's request id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

import agenttx
from agenttx.client import AsyncAgentTxClient

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def test_the_client_finds_what_the_engine_finds(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    s = await serve()
    client = s.client
    tx = (await client.begin(agent_id="remote", request_id="c-begin")).transaction_id
    await client.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="c-step")
    receipt = (await client.preview_commit(tx)).receipt_id
    await client.commit(tx, receipt_id=receipt, request_id="c-commit")
    for key in ({"receipt_id": receipt}, *({"request_id": r} for r in ("c-begin", "c-step"))):
        found = await client.find_transaction(**key)
        assert found == await s.engine.find_transaction(**key)
        assert found.transaction_id == tx
        assert found.result.ending is agenttx.Ending.COMMITTED
        assert found.result.commit_receipt_id == receipt
    with pytest.raises(agenttx.NotFound, match="request_id `c-none` not found"):
        await client.find_transaction(request_id="c-none")


async def test_the_client_refuses_both_keys_or_neither_before_sending() -> None:
    # The request holds one key only (a oneof), so the client says what the engine says.
    client = AsyncAgentTxClient("127.0.0.1:9", timeout=1)  # nothing listens: nothing is sent
    try:
        with pytest.raises(agenttx.InvalidArgument, match=r"exactly one .* both were given"):
            await client.find_transaction(receipt_id="rcpt_x", request_id="r-x")
        with pytest.raises(agenttx.InvalidArgument, match=r"exactly one .* neither was given"):
            await client.find_transaction()
    finally:
        await client.close()


async def test_the_generic_call_sends_a_rows_request_and_maps_its_errors(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    # ``call`` is what the CLI and ``agenttx mcp --server`` send a row's request with.
    from agenttx.wire import agenttx_pb2 as pb

    s = await serve()
    client = s.client
    tx = (await client.begin(agent_id="generic", request_id="g-begin")).transaction_id
    reply = await client.call("FindTransaction", pb.FindTransactionRequest(request_id="g-begin"))
    assert isinstance(reply, pb.FindTransactionResponse)
    assert (reply.transaction.transaction_id, reply.result.ending) == (tx, "open")
    assert reply.request_method == "begin"
    with pytest.raises(agenttx.NotFound, match="request_id `g-none` not found"):
        await client.call("FindTransaction", pb.FindTransactionRequest(request_id="g-none"))
    with pytest.raises(ValueError, match=r"no RPC of agenttx\.v1\.AgentTxService taking"):
        await client.call("GetTransaction", pb.FindTransactionRequest(request_id="g-begin"))
    with pytest.raises(ValueError, match="'Nothing' is no RPC"):
        await client.call("Nothing", pb.FindTransactionRequest())
