"""The operation table (``agenttx.api.operations``) covers the wire's service once, and the
surfaces derived from it serve what it says: the gRPC servicer one method per row, ``/v1`` a
request message filled from each route's models."""

from __future__ import annotations

import asyncio

import pytest

from agenttx.api.grpc.server import AgentTxServicer
from agenttx.api.http.v1.operations import OPERATIONS, Operation, request_of
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.api.operations import ROWS, Row
from agenttx.api.operations.bodies import BeginBody, ResolveBody, StepBody
from agenttx.errors import ERROR_CODES, InvalidArgument
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["AgentTxService"]


def test_every_unary_rpc_has_one_row_with_its_request_and_reply() -> None:
    unary = {m.name: m for m in SERVICE.methods if not m.server_streaming}
    assert sorted(row.rpc for row in ROWS) == sorted(unary)
    for row in ROWS:
        method = unary[row.rpc]
        assert row.request.DESCRIPTOR is method.input_type, row.rpc
        assert row.reply.DESCRIPTOR is method.output_type, row.rpc
    # The server stream is served by hand, on both surfaces.
    assert "WatchTransaction" not in {row.rpc for row in ROWS}
    assert {row.name for row in ROWS} >= {"begin", "execute_step", "commit", "rollback"}
    assert len({row.name for row in ROWS}) == len(ROWS)


def test_each_rows_errors_are_reasons_of_the_one_table() -> None:
    for row in ROWS:
        assert row.errors, row.rpc
        assert set(row.errors) <= set(ERROR_CODES), (row.rpc, set(row.errors) - set(ERROR_CODES))


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.rpc)
def test_the_servicer_method_is_derived_from_the_row(row: Row) -> None:
    method = getattr(AgentTxServicer, row.rpc)
    base = getattr(pb_grpc.AgentTxServiceServicer, row.rpc)
    assert method is not base
    assert method.__name__ == row.rpc


def test_every_route_is_a_row_route_and_unique() -> None:
    served = (*OPERATIONS, *SAFETY_OPERATIONS)
    assert len({(op.method, op.path) for op in served}) == len(served)
    assert len({op.operation_id for op in served}) == len(served)
    assert {op.row.rpc for op in served} <= {row.rpc for row in ROWS}


@pytest.mark.parametrize("op", [*OPERATIONS, *SAFETY_OPERATIONS], ids=lambda op: op.operation_id)
def test_every_model_field_has_a_field_of_the_request(op: Operation) -> None:
    fields = op.row.request.DESCRIPTOR.fields_by_name
    for model in (op.route.body, op.route.query):
        for name in model.model_fields if model is not None else ():
            assert (
                name in fields
                or f"{name}_json" in fields
                or (name == "status" and op.route.statuses is not None)
            ), f"{op.operation_id}: {name}"


def _op(rpc: str) -> Operation:
    return next(op for op in (*OPERATIONS, *SAFETY_OPERATIONS) if op.row.rpc == rpc)


def test_a_steps_arguments_object_goes_as_its_json_text_and_the_path_as_fields() -> None:
    body = StepBody(step_id=3, tool_name="kv.put", arguments={"key": "é", "n": 1})
    request = asyncio.run(request_of(_op("ExecuteStep"), {"transaction_id": "tx_1"}, body, None, 0))
    assert isinstance(request, pb.ExecuteStepRequest)
    assert (request.transaction_id, request.step_id, request.tool_name) == ("tx_1", 3, "kv.put")
    assert request.arguments_json == '{"key":"é","n":1}'


def test_arguments_and_arguments_json_together_are_refused() -> None:
    body = StepBody(step_id=1, tool_name="kv.put", arguments={}, arguments_json="{}")
    with pytest.raises(InvalidArgument, match="not both"):
        asyncio.run(request_of(_op("ExecuteStep"), {"transaction_id": "tx_1"}, body, None, 0))


def test_an_empty_policy_is_sent_and_an_absent_one_is_not() -> None:
    op = _op("BeginTransaction")
    sent = asyncio.run(request_of(op, {}, BeginBody.model_validate({"policy": {}}), None, 0))
    absent = asyncio.run(request_of(op, {}, BeginBody(), None, 0))
    assert isinstance(sent, pb.BeginTransactionRequest)
    assert isinstance(absent, pb.BeginTransactionRequest)
    assert sent.HasField("policy")
    assert not absent.HasField("policy")
    assert list(absent.labels) == []
    assert absent.isolation == "snapshot"


def test_a_path_number_is_read_in_its_range_and_an_output_goes_as_json_text() -> None:
    body = ResolveBody(outcome="happened", output={"id": 7})
    path = {"transaction_id": "tx_1", "step_id": "2"}
    request = asyncio.run(request_of(_op("ResolveStep"), path, body, None, 0))
    assert isinstance(request, pb.ResolveStepRequest)
    assert (request.step_id, request.output_json) == (2, '{"id":7}')
    with pytest.raises(InvalidArgument):
        asyncio.run(request_of(_op("ResolveStep"), {**path, "step_id": "+2"}, body, None, 0))
