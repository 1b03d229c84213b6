"""The HTTP/JSON API under ``/v1`` on a real ``agenttx serve --http-addr``: the same service as
gRPC (one engine), wire field names, one error shape with gRPC codes and a continuation, HTTP
statuses from the one table, limits at the boundary, server-sent events."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from agenttx.api.http.v1.errors import ERROR_STATUSES
from agenttx.api.http.v1.operations import OPERATIONS
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.client import AgentTxClient
from agenttx.errors import ERROR_CODES
from http_harness import JSON, assert_error_shape, http_base, request, sse_events, start_http_server
from server_process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("httpapi") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.fixture(scope="module")
def base(server: ServerProcess) -> str:
    return http_base(server)


def begin(base: str, **body: Any) -> str:
    r = request(base, "POST", "/v1/transactions", body)
    assert r.status == 200, r.raw
    assert r.json["next_step_id"] == 1
    return str(r.json["transaction_id"])


def step(base: str, tx: str, step_id: int, tool: str, **body: Any) -> Any:
    return request(
        base,
        "POST",
        f"/v1/transactions/{tx}/steps",
        {"step_id": step_id, "tool_name": tool, **body},
    )


def test_a_task_runs_over_http_and_grpc_sees_the_same_transaction(
    base: str, server: ServerProcess
) -> None:
    tx = begin(base, agent_id="http-agent", metadata={"task": "t1"}, labels=["l1"])
    one = step(base, tx, 1, "kv.put", arguments={"key": "user", "value": {"id": 7}})
    assert one.status == 200
    assert one.json["status"] == "SUCCESS"
    assert one.json["output"] == {"key": "user", "value": {"id": 7}}
    assert one.json["next_step_id"] == 2
    # arguments_json: the same call as text, references and all.
    two = step(base, tx, 2, "kv.get", arguments_json='{"key": "user"}', raw_context="read it back")
    assert two.json["status"] == "SUCCESS"
    assert two.json["output"]["value"] == {"id": 7}
    done = request(base, "POST", f"/v1/transactions/{tx}/commit", {})
    assert done.status == 200
    assert (done.json["committed"], done.json["transaction_status"]) == (True, "COMMITTED")
    with AgentTxClient(server.address) as client:
        seen = client.get_transaction(tx)
    assert seen.status.value == "COMMITTED"
    assert seen.agent_id == "http-agent"
    got = request(base, "GET", f"/v1/transactions/{tx}").json
    assert got["status"] == "COMMITTED"
    assert got["metadata"] == {"task": "t1"}
    assert [(c["step_id"], c["raw_context"]) for c in got["context"]] == [
        (1, ""),
        (2, "read it back"),
    ]


@pytest.mark.parametrize("mode", ["", "transactional", "approval_required"])
def test_a_begin_reply_carries_the_snapshot_and_the_mode_as_grpc_does(
    base: str, server: ServerProcess, mode: str
) -> None:
    body: dict[str, Any] = {"principal": "alice", "request_id": f"begin-{mode}"}
    if mode:
        body["mode"] = mode
    r = request(base, "POST", "/v1/transactions", body)
    assert r.status == 200, r.raw
    tx = r.json["transaction_id"]
    assert r.json["snapshot"] == {"transaction_id": tx, "revision": 1}
    assert r.json["mode"] == (mode or "transactional")
    # A replay of the same request is the same reply, snapshot and mode included.
    assert request(base, "POST", "/v1/transactions", body).json == r.json
    with AgentTxClient(server.address) as client:
        assert client.get_transaction(tx).mode == (mode or "transactional")


def test_a_failed_step_is_data_with_its_decision_and_root_cause(base: str) -> None:
    tx = begin(base)
    assert step(base, tx, 1, "kv.put", arguments={"key": "u", "value": {"id": 7}}).status == 200
    bad = step(base, tx, 2, "record.get", arguments={"table": "users", "id": "${steps.1.value.id}"})
    assert bad.status == 200  # a tool's failure is data in an OK reply, as over gRPC
    assert bad.json["status"] == "ROLLBACK_TRIGGERED"
    assert bad.json["strategy"] == "DEPENDENCY_JUMP"
    assert bad.json["rollback_to_step"] == 1
    assert bad.json["clean_hint"].startswith("Hint: ")
    got = request(base, "GET", f"/v1/transactions/{tx}").json
    assert got["decisions"] == [
        {
            "step_id": 2,
            "attempt": 1,
            "strategy": "DEPENDENCY_JUMP",
            "rollback_to_step": 1,
            "root_cause_step": 1,
            "hint_key": "id",
            "history_index": 1,
        }
    ]


def test_the_graph_names_each_edge_kind(base: str) -> None:
    tx = begin(base)
    step(base, tx, 1, "kv.put", arguments={"key": "user", "value": {"id": 7}})
    step(base, tx, 2, "kv.put", arguments={"key": "copy", "value": "${steps.1.value}"})
    step(base, tx, 3, "kv.put", arguments={"key": "order", "value": {"user_id": 7}})
    got = request(base, "GET", f"/v1/transactions/{tx}").json
    pairs = zip(got["edges"], got["edge_kinds"], strict=True)
    kinds = {(e["from_step"], e["to_step"]): k for e, k in pairs}
    assert kinds[(1, 2)] == "explicit"
    assert "implicit" in got["edge_kinds"]
    assert len(got["edges"]) == len(got["edge_kinds"])


def test_a_wrong_step_is_409_with_the_expected_step_and_a_retry(base: str) -> None:
    tx = begin(base)
    r = step(base, tx, 5, "kv.put", arguments={"key": "k", "value": 1})
    error = assert_error_shape(r, 409, "WRONG_STEP")
    assert error["code"] == "FAILED_PRECONDITION"
    assert error["details"] == {"transaction_id": tx, "expected": 1, "got": 5}
    assert error["continuation"]["kind"] == "RetryRequest"


def test_an_unknown_transaction_is_404_and_says_to_begin_one(base: str) -> None:
    r = request(base, "POST", "/v1/transactions/tx_nope/commit", {})
    error = assert_error_shape(r, 404, "NOT_FOUND")
    assert error["continuation"]["kind"] == "CallTool"
    assert error["continuation"]["operation"] == "POST /v1/transactions"
    assert_error_shape(request(base, "GET", "/v1/transactions/tx_nope"), 404, "NOT_FOUND")


def test_an_ended_transaction_refuses_steps_with_409(base: str) -> None:
    tx = begin(base)
    assert request(base, "POST", f"/v1/transactions/{tx}/rollback").status == 200
    r = step(base, tx, 1, "kv.put", arguments={"key": "k", "value": 1})
    assert_error_shape(r, 409, "NOT_ACTIVE")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"step_id": "1", "tool_name": "kv.put"}, "step_id"),
        ({"tool_name": "kv.put"}, "step_id: Field required"),
        ({"step_id": 1, "tool_name": "kv.put", "surprise": 1}, "surprise"),
        ({"step_id": 1, "tool_name": "kv.put", "arguments": [1]}, "arguments"),
        (
            {"step_id": 1, "tool_name": "kv.put", "arguments": {}, "arguments_json": "{}"},
            "not both",
        ),
        ({"step_id": 0, "tool_name": "kv.put"}, "step_id"),
    ],
)
def test_a_malformed_request_is_400_naming_the_field(base: str, body: Any, says: str) -> None:
    tx = begin(base)
    r = request(base, "POST", f"/v1/transactions/{tx}/steps", body)
    error = assert_error_shape(r, 400)
    assert error["code"] == "INVALID_ARGUMENT"
    assert says in error["message"]
    assert error["continuation"]["kind"] == "ReviseRequest"
    # Nothing happened: the transaction still expects step 1.
    assert request(base, "GET", f"/v1/transactions/{tx}").json["next_step_id"] == 1


def test_bad_json_and_a_wrong_content_type_are_refused(base: str) -> None:
    assert_error_shape(
        request(
            base,
            "POST",
            "/v1/transactions",
            raw=b"{nope",
            headers={"content-type": "application/json"},
        ),
        400,
    )
    r = request(
        base, "POST", "/v1/transactions", raw=b"agent_id=x", headers={"content-type": "text/plain"}
    )
    assert "application/json" in assert_error_shape(r, 415)["message"]


def test_a_body_over_the_limit_is_413_before_it_is_read(base: str) -> None:
    tx = begin(base)
    big = b'{"step_id":1,"tool_name":"kv.put","arguments_json":"' + b"x" * (5 << 20) + b'"}'
    r = request(
        base,
        "POST",
        f"/v1/transactions/{tx}/steps",
        raw=big,
        headers={"content-type": "application/json"},
    )
    assert "4194304 bytes" in assert_error_shape(r, 413)["message"]
    # Chunked (no Content-Length): refused once past the limit, all the same.
    host = urlsplit(base).netloc
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.putrequest("POST", f"/v1/transactions/{tx}/steps")
    conn.putheader("content-type", "application/json")
    conn.putheader("transfer-encoding", "chunked")
    conn.endheaders()
    try:
        chunk = b"x" * (1 << 20)
        for _ in range(6):
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before the rest is sent
    reply = conn.getresponse()
    assert reply.status == 413
    conn.close()
    assert request(base, "GET", f"/v1/transactions/{tx}").json["next_step_id"] == 1


def test_unknown_routes_and_methods_answer_in_the_error_shape(base: str) -> None:
    assert_error_shape(request(base, "GET", "/v1/nothing-here"), 404, "NO_SUCH_ROUTE")
    assert_error_shape(request(base, "DELETE", "/v1/tools"), 405, "METHOD_NOT_ALLOWED")


def test_a_refused_method_names_the_allowed_ones(base: str) -> None:
    # RFC 9110: a 405 carries Allow, listing every method of the path, not of one route.
    for method in ("DELETE", "TRACE", "OPTIONS"):
        refused = request(base, method, "/v1/transactions")
        assert_error_shape(refused, 405, "METHOD_NOT_ALLOWED")
        assert refused.headers["allow"] == "GET, HEAD, POST"
    assert request(base, "PUT", "/v1/tools").headers["allow"] == "GET, HEAD"
    assert request(base, "GET", "/v1/transactions/tx_1/commit").headers["allow"] == "POST"


def test_a_path_id_of_no_transaction_shape_is_refused_by_its_pattern(base: str) -> None:
    # Found by schemathesis: the audit of an id the document's pattern refuses was a 200
    # ("no audit records"). A path's id is checked against the document's pattern first.
    for path in ("/v1/transactions/%C3%BC/audit", "/v1/transactions/%C3%BC/events"):
        refused = assert_error_shape(request(base, "GET", path), 400, "INVALID_ARGUMENT")
        assert "is not a transaction id" in refused["message"]
    too_long = request(base, "GET", "/v1/transactions/" + "t" * 129)
    assert "visible ASCII" in assert_error_shape(too_long, 400)["message"]
    assert_error_shape(request(base, "GET", "/v1/transactions/tx_none"), 404)


def test_an_optional_body_is_absent_or_json_never_blank(base: str) -> None:
    # Found by schemathesis: a body of one space was taken as no body.
    tx = begin(base)
    assert request(base, "POST", f"/v1/transactions/{tx}/preview", raw=b"").status == 200
    blank = request(base, "POST", f"/v1/transactions/{tx}/preview", raw=b" ", headers=JSON)
    assert "not JSON" in assert_error_shape(blank, 400)["message"]


def test_a_whole_float_is_the_whole_number(base: str) -> None:
    # JSON and JSON Schema's integer make 1.0 the number 1, as every other surface reads it.
    tx = begin(base)
    one = step(base, tx, 1.0, "kv.put", arguments={"key": "k", "value": 1})  # type: ignore[arg-type]
    assert (one.status, one.json["status"]) == (200, "SUCCESS")
    half = step(base, tx, 2.5, "kv.put", arguments={"key": "k", "value": 1})  # type: ignore[arg-type]
    assert (
        "step_id must be a whole number from 1 to 4294967295, got 2.5"
        in (assert_error_shape(half, 400)["message"])
    )
    revision = request(base, "GET", f"/v1/transactions/{tx}").json["revision"]
    commit = request(base, "POST", f"/v1/transactions/{tx}/commit", {"expected_revision": 2.0**40})
    assert assert_error_shape(commit, 409)["reason"] != "INVALID_ARGUMENT"  # read, not refused
    done = request(
        base, "POST", f"/v1/transactions/{tx}/commit", {"expected_revision": float(revision)}
    )
    assert done.status == 200, done.json


def test_listing_filters_and_pages(base: str) -> None:
    agent = "lister"
    ids = [begin(base, agent_id=agent, labels=["page"]) for _ in range(3)]
    request(base, "POST", f"/v1/transactions/{ids[0]}/rollback")
    first = request(base, "GET", f"/v1/transactions?agent_id={agent}&page_size=2").json
    assert [t["transaction_id"] for t in first["transactions"]] == ids[:2]
    assert first["next_page_token"]
    rest = request(
        base,
        "GET",
        f"/v1/transactions?agent_id={agent}&page_size=2&page_token={first['next_page_token']}",
    ).json
    assert [t["transaction_id"] for t in rest["transactions"]] == ids[2:]
    active = request(base, "GET", f"/v1/transactions?agent_id={agent}&status=ACTIVE").json
    assert [t["transaction_id"] for t in active["transactions"]] == ids[1:]
    both = request(
        base, "GET", f"/v1/transactions?agent_id={agent}&status=active,rolled_back&label=page"
    ).json
    assert len(both["transactions"]) == 3
    assert_error_shape(request(base, "GET", "/v1/transactions?page_size=0"), 400)
    assert_error_shape(request(base, "GET", "/v1/transactions?status=NOPE"), 400)
    # Spaces around names and empty entries are no filter; what else the pattern refuses is
    # refused, by name (the OpenAPI document states the same pattern).
    spaced = f"/v1/transactions?agent_id={agent}&status=%20Active%20,,&status="
    assert len(request(base, "GET", spaced).json["transactions"]) == 2
    for bad in ("ACTIVE%09", "ACTIVE_", "COMPEN%C5%BFATED"):
        refused = request(base, "GET", f"/v1/transactions?status={bad}")
        assert "unknown status" in assert_error_shape(refused, 400)["message"]
    tenant = request(base, "GET", "/v1/transactions?tenant=-acme")
    assert "is not a tenant name" in assert_error_shape(tenant, 400)["message"]


def test_a_stream_past_the_current_revision_is_answered_at_once(base: str) -> None:
    # Found by schemathesis: the answer waited for the first event, so a stream asked for what
    # comes after the current revision of an open transaction sent not even its headers until
    # the transaction changed (a read timeout for a client, no `open` for an EventSource).
    tx = begin(base)
    revision = request(base, "GET", f"/v1/transactions/{tx}").json["revision"]
    # sse_events returns once the headers came: before the step below, which it must not need.
    stream = sse_events(base, f"/v1/transactions/{tx}/events?after_revision={revision}", timeout=20)
    step(base, tx, 1, "kv.put", arguments={"key": "a", "value": 1})
    event = next(stream)
    assert (event["event"], event["transaction_id"]) == ("transaction", tx)
    assert event["revision"] > revision
    gone = request(base, "GET", "/v1/transactions/tx_none/events?after_revision=5")
    assert_error_shape(gone, 404)


def test_tools_are_listed_with_their_schemas(base: str) -> None:
    tools = {t["name"]: t for t in request(base, "GET", "/v1/tools").json["tools"]}
    assert tools["kv.put"]["effect"] == "state"
    assert tools["kv.put"]["input_schema"]["type"] == "object"


def test_a_request_id_replays_the_stored_reply(base: str) -> None:
    tx = begin(base)
    body = {"arguments": {"key": "once", "value": 1}, "request_id": "r-1"}
    first = step(base, tx, 1, "kv.put", **body).json
    again = step(base, tx, 1, "kv.put", **body).json
    assert again == first
    other = step(base, tx, 1, "kv.put", arguments={"key": "once", "value": 2}, request_id="r-1")
    assert_error_shape(other, 409, "ALREADY_EXISTS")


def test_a_transactions_events_stream_until_it_ends(base: str) -> None:
    tx = begin(base)
    seen: list[dict[str, Any]] = []
    stream = sse_events(base, f"/v1/transactions/{tx}/events")
    seen.append(next(stream))  # the current state first
    assert (seen[0]["revision"], seen[0]["status"], seen[0]["id"]) == (1, "ACTIVE", "1")

    def work() -> None:
        step(base, tx, 1, "kv.put", arguments={"key": "sse", "value": 1})
        request(base, "POST", f"/v1/transactions/{tx}/commit", {})

    worker = threading.Thread(target=work)
    worker.start()
    seen += list(stream)  # ends by itself when the transaction does
    worker.join()
    assert seen[-1]["status"] == "COMMITTED"
    revisions = [e["revision"] for e in seen]
    assert revisions == sorted(set(revisions))
    # Reconnecting after the last revision seen: nothing is repeated (the stream is over),
    # and the answer is the 204 that stops a browser's EventSource from reconnecting.
    for ask in (
        {"path": f"/v1/transactions/{tx}/events?after_revision={revisions[-1]}"},
        {"path": f"/v1/transactions/{tx}/events", "headers": {"last-event-id": seen[-1]["id"]}},
    ):
        over = request(base, "GET", ask["path"], headers=ask.get("headers"))
        assert (over.status, over.raw) == (204, b"")
    # Asked from an earlier revision, the ended transaction's last state is still sent.
    assert [e["status"] for e in sse_events(base, f"/v1/transactions/{tx}/events")] == ["COMMITTED"]
    assert_error_shape(request(base, "GET", "/v1/transactions/tx_nope/events"), 404)
    r = request(base, "GET", f"/v1/transactions/{tx}/events?after_revision=x")
    assert_error_shape(r, 400)


def test_all_events_include_a_transaction_begun_over_grpc(base: str, server: ServerProcess) -> None:
    stream = sse_events(base, "/v1/events")
    got: list[dict[str, Any]] = []

    def read() -> None:
        for e in stream:
            got.append(e)
            if e["status"] == "ROLLED_BACK":
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="grpc").transaction_id
        client.rollback(tx)
    reader.join(20)
    assert [e["status"] for e in got if e["transaction_id"] == tx][-1] == "ROLLED_BACK"


def test_every_status_the_table_maps_to_is_documented() -> None:
    assert {row.http_status for row in ERROR_CODES.values()} <= set(ERROR_STATUSES)


def test_the_openapi_document_lists_every_operation(base: str) -> None:
    doc = request(base, "GET", "/openapi.json").json
    assert doc["openapi"].startswith("3.1")
    ids = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    served = (*OPERATIONS, *SAFETY_OPERATIONS)
    assert {op.operation_id for op in served} | {"WatchTransaction", "WatchAll"} == ids
    step_reply = doc["components"]["schemas"]["ExecuteStepResponse"]["properties"]
    assert "output" in step_reply
    assert "SUCCESS" in step_reply["status"]["enum"]


def test_the_document_states_what_the_server_refuses(base: str) -> None:
    # What the longer schemathesis run found: the policy's ranges and "not both" are stated.
    schemas = request(base, "GET", "/openapi.json").json["components"]["schemas"]
    retries = schemas["PolicyBody"]["properties"]["max_step_retries"]["anyOf"][0]
    assert retries["maximum"] == 32
    tx = begin(base)
    over = request(base, "POST", "/v1/transactions", {"policy": {"max_step_retries": 33}})
    assert "max_step_retries" in assert_error_shape(over, 400)["message"]
    assert schemas["StepBody"]["not"]["required"] == ["arguments", "arguments_json"]
    both = step(base, tx, 1, "kv.put", arguments={"key": "k", "value": 1}, arguments_json="{}")
    assert "not both" in assert_error_shape(both, 400)["message"]


def test_a_stopping_server_ends_its_event_streams_at_once(tmp_path: Any) -> None:
    from datetime import datetime

    proc = start_http_server(tmp_path / "data")
    with proc.killed_on_error():
        stream = sse_events(http_base(proc), "/v1/events")
        assert proc.terminate() == 0
    assert list(stream) == []  # ended by the server, not cut
    records = proc.log_records()
    assert not [r for r in records if r.get("level") == "error"], records

    def at(msg: str) -> datetime:
        [r] = [r for r in records if str(r.get("msg", "")).startswith(msg)]
        return datetime.fromisoformat(str(r["ts"]).replace("Z", "+00:00"))

    # Without ending the streams, uvicorn would wait its 5 s graceful-shutdown timeout.
    assert (at("stopped") - at("draining")).total_seconds() < 4
