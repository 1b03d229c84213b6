"""Numbers and bytes at the edge of every surface, against one real ``agenttx serve`` (gRPC,
HTTP ``/v1`` and MCP over HTTP) and the real CLI:

- a whole-number field holding 5,000 digits (or past its range) is INVALID_ARGUMENT naming
  the field and its range on MCP, HTTP and the CLI (it was INTERNAL: ``int()`` refuses past
  4,300 digits), and a gRPC ``uint64`` past 2⁶³−1 is too (it was INTERNAL in the store);
- a gRPC request that is not a valid message, or holds a string that is not UTF-8, is
  INVALID_ARGUMENT saying so (it was ``UNKNOWN: Unexpected <class DecodeError>``);
- on ``/v1`` a lone surrogate, 500-deep nesting or a 5,000-digit integer in a step's
  ``arguments`` is the failed step with a hint that gRPC gives (it was a 400), while a body
  that is not JSON stays a 400.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from mcp import Client

from agenttx.wire import agenttx_pb2 as pb
from http_harness import Reply, assert_error_shape, http_base, request, start_http_server
from mcp_harness import structured
from server_process import ServerProcess, agenttx_command, server_env

HUGE = "9" * 5000
UINT32 = "4294967295"
INT64 = "9223372036854775807"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("edges") / "data", "--mcp-effect-tools")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def begin(server: ServerProcess) -> str:
    reply = request(http_base(server), "POST", "/v1/transactions", {})
    assert reply.status == 200, reply.raw
    return str(reply.json["transaction_id"])


def refused_naming(reply: Reply, field: str, low: int, high: str) -> None:
    error = assert_error_shape(reply, 400)
    assert error["code"] == "INVALID_ARGUMENT", error
    assert f"{field} must be a whole number from {low} to {high}" in error["message"], error


# --------------------------------------------------------------------------- whole numbers


def test_http_whole_number_fields_are_refused_by_name_and_range(server: ServerProcess) -> None:
    base = http_base(server)
    tx = begin(server)
    steps = f"/v1/transactions/{tx}/steps"
    cases: list[tuple[str, str, Any, str, int, str]] = [
        ("POST", steps, f'{{"step_id": {HUGE}, "tool_name": "kv.put"}}', "step_id", 1, UINT32),
        ("POST", steps, '{"step_id": 4294967296, "tool_name": "kv.put"}', "step_id", 1, UINT32),
        ("POST", steps, '{"step_id": 1e300, "tool_name": "kv.put"}', "step_id", 1, UINT32),
        ("POST", f"/v1/transactions/{tx}/rollback", f'{{"to_step": {HUGE}}}', "to_step", 0, UINT32),
        (
            "POST",
            f"/v1/transactions/{tx}/commit",
            f'{{"expected_revision": {HUGE}}}',
            "expected_revision",
            1,
            INT64,
        ),
        ("GET", f"/v1/transactions?page_size={HUGE}", None, "page_size", 1, "500"),
        ("GET", f"/v1/effects?after_id={HUGE}", None, "after_id", 0, INT64),
        ("GET", f"/v1/effects?after_id={1 << 63}", None, "after_id", 0, INT64),
        ("POST", f"/v1/transactions/{tx}/effects/{HUGE}/retry", "", "effect_id", 1, INT64),
        ("POST", f"/v1/transactions/{tx}/steps/{HUGE}/reconcile", "", "step_id", 1, UINT32),
        (
            "GET",
            f"/v1/transactions/{tx}/events?after_revision={HUGE}",
            None,
            "after_revision",
            0,
            INT64,
        ),
    ]
    for method, path, body, field, low, high in cases:
        raw = None if body is None else body.encode()
        headers = {"content-type": "application/json"} if body is not None else {}
        reply = request(base, method, path, raw=raw, headers=headers)
        refused_naming(reply, field, low, high)
        assert len(reply.raw) < 2000  # the 5,000 digits are not echoed back


async def test_mcp_whole_number_arguments_are_refused_by_name_and_range(
    server: ServerProcess,
) -> None:
    tx = begin(server)
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("run_step", {"transaction_id": tx, "step_id": HUGE, "tool": "kv.put"}, "step_id"),
        ("run_step", {"transaction_id": tx, "step_id": 2.0**40, "tool": "kv.put"}, "step_id"),
        ("rollback_transaction", {"transaction_id": tx, "to_step": HUGE}, "to_step"),
        ("list_transactions", {"page_size": HUGE}, "page_size"),
        ("list_effects", {"after_id": HUGE}, "after_id"),
        ("list_effects", {"after_id": str(1 << 63)}, "after_id"),
        ("retry_effect", {"effect_id": HUGE}, "effect_id"),
        (
            "commit_transaction",
            {"transaction_id": tx, "expected_revision": HUGE},
            "expected_revision",
        ),
        ("reconcile_step", {"transaction_id": tx, "step_id": HUGE}, "step_id"),
    ]
    async with Client(http_base(server) + "/mcp", mode="auto", read_timeout_seconds=30) as c:
        for tool, arguments, field in calls:
            reply = structured(await c.call_tool(tool, arguments))
            assert reply["ok"] is False, (tool, reply)
            assert reply["error"]["code"] == "INVALID_ARGUMENT", (tool, reply)
            assert f"{field} must be a whole number from" in reply["error"]["message"], reply
            assert len(reply["error"]["message"]) < 200
        # The transaction is untouched: the refused calls changed nothing.
        info = request(http_base(server), "GET", f"/v1/transactions/{tx}")
        assert info.json["status"] == "ACTIVE"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tx", "step", "tx_x", HUGE, "kv.put", "{}"], "step_id must be a whole number from 1"),
        (["tx", "step", "tx_x", "99999999999", "kv.put", "{}"], f"to {UINT32}, got 99999999999"),
        (["effects", "retry", HUGE], "effect_id must be a whole number from 1"),
        (["tx", "reconcile", "tx_x", HUGE], "step_id must be a whole number from 1"),
    ],
)
def test_cli_whole_numbers_are_refused_by_name_and_range(
    server: ServerProcess, args: list[str], says: str
) -> None:
    done = subprocess.run(
        [*agenttx_command(*args), "--server", server.address],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr) < 2000


# --------------------------------------------------------------------------- gRPC bytes


def raw_call(server: ServerProcess, method: str, data: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel:
        call = channel.unary_unary(
            f"/agenttx.v1.AgentTxService/{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as refused:
            call(data, timeout=30)
    return refused.value


def test_grpc_uint64_fields_past_int64_are_invalid_argument(server: ServerProcess) -> None:
    tx = begin(server)
    wide = (1 << 64) - 1
    for method, message, field in [
        (
            "ListAuditRecords",
            pb.ListAuditRecordsRequest(transaction_id=tx, after_seq=wide),
            "after_seq",
        ),
        ("ListEffects", pb.ListEffectsRequest(after_id=1 << 63), "after_id"),
        ("RetryEffect", pb.RetryEffectRequest(effect_id=wide), "effect_id"),
        (
            "CommitTransaction",
            pb.CommitTransactionRequest(transaction_id=tx, expected_revision=wide),
            "expected_revision",
        ),
    ]:
        err = raw_call(server, method, message.SerializeToString())
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err)
        assert f"{field} must be a whole number from 0 to {INT64}" in (err.details() or "")
    # At the limit, the call is served.
    with server.channel() as channel:
        page = server.stub(channel).ListAuditRecords(
            pb.ListAuditRecordsRequest(transaction_id=tx, after_seq=(1 << 63) - 1)
        )
    assert list(page.records) == []


def test_grpc_malformed_bytes_and_bad_utf8_are_invalid_argument(server: ServerProcess) -> None:
    good = pb.ExecuteStepRequest(transaction_id="abc", step_id=1, tool_name="kv.put")
    bad_text = good.SerializeToString().replace(b"abc", b"a\xffc")
    err = raw_call(server, "ExecuteStep", bad_text)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field transaction_id is not valid UTF-8" in (err.details() or ""), err.details()

    for garbage in (b"\x0a\x05ab", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"\x0f"):
        err = raw_call(server, "GetTransaction", garbage)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        details = err.details() or ""
        assert "not a valid agenttx.v1.GetTransactionRequest" in details, details
        assert "Unexpected" not in details
    # The server is fine after all that.
    with server.channel() as channel:
        assert server.stub(channel).ListTools(pb.ListToolsRequest()).tools


# --------------------------------------------------------------------------- /v1 arguments

POLICY_BREACHES = {
    "lone surrogate": ('{"key": "\\ud800", "value": 1}', "json_utf8"),
    "500-deep nesting": ('{"key": "k", "value": ' + "[" * 500 + "]" * 500 + "}", "json_depth"),
    "100,000-deep nesting": (
        '{"key": "k", "value": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "json_depth",
    ),
    "5,000-digit integer": ('{"key": "k", "value": ' + HUGE + "}", "json_integer_digits"),
}


@pytest.mark.parametrize("name", sorted(POLICY_BREACHES))
def test_v1_arguments_outside_the_json_policy_are_the_failed_step_grpc_gives(
    server: ServerProcess, name: str
) -> None:
    arguments, rule = POLICY_BREACHES[name]
    base = http_base(server)
    tx = begin(server)
    body = f'{{"step_id": 1, "tool_name": "kv.put", "arguments": {arguments}}}'
    reply = request(
        base,
        "POST",
        f"/v1/transactions/{tx}/steps",
        raw=body.encode(),
        headers={"content-type": "application/json"},
    )
    assert reply.status == 200, reply.raw[:300]
    step = reply.json
    assert step["status"] == "ROLLBACK_TRIGGERED", step
    assert rule in step["clean_hint"], step["clean_hint"]
    assert step["next_step_id"] == 1

    # gRPC, sent the same arguments as text, says the same.
    other = begin(server)
    with server.channel() as channel:
        same = server.stub(channel).ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=other, step_id=1, tool_name="kv.put", arguments_json=arguments
            )
        )
    assert same.clean_hint == step["clean_hint"]
    assert same.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED


def test_v1_still_refuses_a_body_that_is_not_json_or_breaks_a_rule_outside_arguments(
    server: ServerProcess,
) -> None:
    base = http_base(server)
    tx = begin(server)
    path = f"/v1/transactions/{tx}/steps"
    for body, says in [
        (b"{not json", "not JSON"),
        (
            b'{"step_id": 1, "tool_name": "kv.put", "arguments": {"a": tru}}',
            "arguments is not JSON",
        ),
        (
            b'{"step_id": 1, "tool_name": "kv.put", "arguments": [1, "\\ud800"]}',
            "must be a JSON object",
        ),
        (
            b'{"step_id": 1, "tool_name": "kv.\\ud800", "arguments": {"a": "\\ud800"}}',
            "lone surrogate",
        ),
        (
            b'{"step_id": 1, "tool_name": "kv.put", "arguments": {"a": "\\ud800"}, '
            b'"arguments_json": "{}"}',
            "not both",
        ),
        (b'{"step_id": 1, "tool_name": "kv.put", "arguments": {"a": "\xff"}}', "not UTF-8"),
    ]:
        reply = request(base, "POST", path, raw=body, headers={"content-type": "application/json"})
        error = assert_error_shape(reply, 400)
        assert says in error["message"], (body[:60], error["message"])
    assert request(base, "GET", f"/v1/transactions/{tx}").json["next_step_id"] == 1
