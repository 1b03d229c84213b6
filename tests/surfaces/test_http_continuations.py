"""Over ``/v1`` a refusal carries the continuation the MCP adapter gives the same error (issue
16: "the continuation of the MCP issue"), not the catch-all "AgentTx failed to handle the
call ... quoting the correlationId" (HTTP has no correlation id): a commit conflict says to
begin again on the current values, an undo or redo with nothing to do says what to call
instead, a reused request_id says to pick a new one. Real ``agenttx serve --http-addr``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from http_harness import assert_error_shape, http_base, request, start_http_server

CATCH_ALL = "failed to handle the call"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = start_http_server(tmp_path_factory.mktemp("http-continuations") / "data")
    with proc.killed_on_error():
        yield http_base(proc)
    assert proc.terminate() == 0


def begin(base: str) -> str:
    r = request(base, "POST", "/v1/transactions", {})
    assert r.status == 200, r.raw
    return str(r.json["transaction_id"])


def put(base: str, tx: str, step_id: int, key: str, value: Any, **extra: Any) -> Any:
    body = {"step_id": step_id, "tool_name": "kv.put", "arguments": {"key": key, "value": value}}
    return request(base, "POST", f"/v1/transactions/{tx}/steps", {**body, **extra})


def continuation(reply: Any, status: int, reason: str) -> dict[str, Any]:
    error = assert_error_shape(reply, status, reason)
    assert CATCH_ALL not in error["continuation"]["instruction"], error
    return dict(error["continuation"])


def test_a_commit_conflict_says_to_begin_again(base: str) -> None:
    first, second = begin(base), begin(base)
    for tx in (first, second):
        assert put(base, tx, 1, "contended", tx).json["status"] == "SUCCESS"
    assert request(base, "POST", f"/v1/transactions/{first}/commit").status == 200
    lost = request(base, "POST", f"/v1/transactions/{second}/commit")
    cont = continuation(lost, 409, "COMMIT_CONFLICT")
    assert cont["kind"] == "CallTool"
    assert cont["operation"] == "POST /v1/transactions"
    assert "kv/contended" in cont["instruction"]


def test_undo_and_redo_with_nothing_to_do_say_what_to_call(base: str) -> None:
    tx = begin(base)
    redo = request(base, "POST", f"/v1/transactions/{tx}/redo", {})
    assert continuation(redo, 409, "REDO_REFUSED")["kind"] == "CallTool"
    undo = request(base, "POST", f"/v1/transactions/{tx}/undo", {})
    assert continuation(undo, 409, "UNDO_REFUSED")["kind"] == "ChooseTool"


def test_a_reused_request_id_says_to_pick_a_new_one(base: str) -> None:
    tx = begin(base)
    assert put(base, tx, 1, "k", 1, request_id="same").status == 200
    reused = put(base, tx, 1, "k", 2, request_id="same")
    cont = continuation(reused, 409, "ALREADY_EXISTS")
    assert cont["kind"] == "ReviseRequest"
    assert "new request_id" in cont["instruction"]
