"""``RollbackPolicy.max_step_retries`` (wire field 4, ours) over a real gRPC server: honoured per
transaction, reported back by GetTransaction, unset when the client sends none, refused out of
range; the same-step retries it bounds show in the replies' step ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import pytest

from agenttx.wire import agenttx_pb2 as pb

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from served_engine import Served

pytest_plugins = ["served_engine"]  # ``s``: this test's engine behind a server


async def test_max_step_retries_bounds_same_step_retries(s: Served) -> None:
    tx = await s.begin(policy=pb.RollbackPolicy(max_step_retries=1))
    assert (await s.get(tx)).policy.max_step_retries == 1
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    first = await s.step(tx, 2, "kv.get", {"key": "missing"})
    second = await s.step(tx, 2, "kv.get", {"key": "missing"})
    # A plain client is sent a RETRY as the reference's nearest strategy (docs/api.md); the
    # step ids say what happened: step 2 retried in place, step 1 kept, then a backtrack.
    assert (first.rollback_to_step, first.next_step_id) == (2, 2)
    assert second.strategy == pb.RollbackStrategy.Value("ROLLBACK_STRATEGY_LOCAL_BACKTRACK")
    assert (second.rollback_to_step, second.next_step_id) == (1, 1)


async def test_an_unset_bound_stays_unset_on_the_wire(s: Served) -> None:
    tx = await s.begin(policy=pb.RollbackPolicy(max_local_depth=1))
    policy = (await s.get(tx)).policy
    assert not policy.HasField("max_step_retries")  # the server's default applies
    assert policy.max_local_depth == 1


async def test_an_out_of_range_bound_is_invalid_argument(s: Served) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.begin(policy=pb.RollbackPolicy(max_step_retries=33))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_step_retries must be 0..32" in (caught.value.details() or "")
