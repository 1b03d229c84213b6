"""The consequential-action and effect operations of ``/v1`` on a real ``agenttx serve
--http-addr``: preview, approve and commit with the receipt; undo and redo; reconcile and
resolve refusals; compensation; effects. Same engine as gRPC, wire field names, the one
error shape; every operation is in ``/openapi.json``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from http_harness import assert_error_shape, http_base, request, start_http_server
from server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("httpsafety") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.fixture(scope="module")
def base(server: ServerProcess) -> str:
    return http_base(server)


def begin(base: str, **body: Any) -> str:
    r = request(base, "POST", "/v1/transactions", body)
    assert r.status == 200, r.raw
    return str(r.json["transaction_id"])


def put(base: str, tx: str, step_id: int, key: str, value: Any) -> Any:
    r = request(
        base,
        "POST",
        f"/v1/transactions/{tx}/steps",
        {"step_id": step_id, "tool_name": "kv.put", "arguments": {"key": key, "value": value}},
    )
    assert r.status == 200, r.raw
    assert r.json["status"] == "SUCCESS", r.json
    return r.json


def test_every_safety_operation_is_in_the_openapi_document(base: str) -> None:
    doc = request(base, "GET", "/openapi.json").json
    ids = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert {op.operation_id for op in SAFETY_OPERATIONS} <= ids


def test_an_approval_required_commit_goes_through_preview_and_approval(base: str) -> None:
    tx = begin(base, agent_id="http-safety", principal="alice", mode="approval_required")
    put(base, tx, 1, "http-limit", 500)
    refused = request(base, "POST", f"/v1/transactions/{tx}/commit", {})
    assert_error_shape(refused, 409, "APPROVAL_REQUIRED")
    preview = request(base, "POST", f"/v1/transactions/{tx}/preview", {})
    assert preview.status == 200, preview.raw
    p = preview.json
    assert [c["key"] for c in p["changes"]["state"]] == ["kv/http-limit"] or any(
        "http-limit" in c["key"] for c in p["changes"]["state"]
    )
    assert p["changes"]["state"][0]["key"] == "kv/http-limit"
    receipt = p["receipt_id"]
    # The transaction's own principal cannot approve its work.
    same = request(
        base,
        "POST",
        f"/v1/transactions/{tx}/approve",
        {"receipt_id": receipt, "principal": "alice"},
    )
    assert_error_shape(same, 409, "APPROVAL_REFUSED")
    approved = request(
        base, "POST", f"/v1/transactions/{tx}/approve", {"receipt_id": receipt, "principal": "bob"}
    )
    assert approved.status == 200, approved.raw
    assert approved.json["approved_by"] == "bob"
    committed = request(
        base,
        "POST",
        f"/v1/transactions/{tx}/commit",
        {"receipt_id": receipt, "expected_revision": p["revision"]},
    )
    assert committed.status == 200, committed.raw
    assert committed.json["committed"] is True


def test_reconcile_and_resolve_refuse_a_step_that_is_not_unknown(base: str) -> None:
    tx = begin(base, agent_id="http-reconcile")
    put(base, tx, 1, "http-rec", 1)
    for path, body in (
        (f"/v1/transactions/{tx}/steps/1/reconcile", {}),
        (f"/v1/transactions/{tx}/steps/1/resolve", {"outcome": "happened"}),
    ):
        reply = request(base, "POST", path, body)
        assert reply.status in (400, 409), reply.raw
        assert_error_shape(reply, reply.status)
    bad = request(base, "POST", f"/v1/transactions/{tx}/steps/x/reconcile", {})
    assert_error_shape(bad, 400, "INVALID_ARGUMENT")


def test_compensation_preview_and_effects_of_a_transaction(base: str) -> None:
    tx = begin(base, agent_id="http-comp")
    put(base, tx, 1, "http-comp", 1)
    assert request(base, "POST", f"/v1/transactions/{tx}/commit", {}).status == 200
    plan = request(base, "POST", f"/v1/transactions/{tx}/compensate", {"preview": True})
    assert plan.status == 200, plan.raw
    nothing = request(base, "POST", f"/v1/transactions/{tx}/compensate", {"reason": "refund"})
    assert_error_shape(nothing, 409)  # a state-only transaction has nothing to compensate
    effects = request(base, "GET", f"/v1/transactions/{tx}/effects")
    assert effects.status == 200, effects.raw
    assert effects.json["effects"] == []
    everything = request(base, "GET", "/v1/effects?page_size=5")
    assert everything.status == 200, everything.raw
    missing = request(base, "POST", f"/v1/transactions/{tx}/effects/999999/retry", {})
    assert_error_shape(missing, 404, "NOT_FOUND")
