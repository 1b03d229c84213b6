"""The same refusal names its next call in the caller's own surface (issue 22.5): over HTTP
the route, over MCP the tool, in the CLI the command, over gRPC the RPC — and never another
surface's. One real ``agenttx serve --http-addr`` (gRPC, ``/v1`` and ``/mcp`` on one engine);
the CLI is the installed ``agenttx`` in a subprocess; gRPC a raw stub."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from mcp import Client

from agenttx.error_details import from_metadata, next_from_metadata
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import http_base, request, start_http_server
from mcp_harness import structured
from server_process import ServerProcess, agenttx_command, server_env

# Each surface's name for "run the step" and for "redo"; a text names only its own.
STEP_NAMES = {
    "mcp": "run_step",
    "http": "POST /v1/transactions/",
    "cli": "agenttx tx step",
    "grpc": "ExecuteStep",
}
# What another surface's words look like in a text: every surface's names, and the engine's.
FOREIGN = {
    "mcp": ("run_step", "redo_step", "begin_transaction"),
    "http": ("POST /v1", "GET /v1"),
    "cli": ("agenttx tx",),
    "grpc": ("ExecuteStep", "RedoStep", "BeginTransaction"),
    "python": ("execute_step",),
}


def only_its_own(surface: str, text: str) -> None:
    assert STEP_NAMES[surface] in text, text
    for other, words in FOREIGN.items():
        if other != surface:
            for word in words:
                assert word not in text, (surface, word, text)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("next-calls") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def begin(server: ServerProcess) -> str:
    r = request(http_base(server), "POST", "/v1/transactions", {})
    assert r.status == 200, r.raw
    return str(r.json["transaction_id"])


def put_step(server: ServerProcess, tx: str, step_id: int) -> Any:
    body = {"step_id": step_id, "tool_name": "kv.put", "arguments": {"key": "k", "value": 1}}
    return request(http_base(server), "POST", f"/v1/transactions/{tx}/steps", body)


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agenttx_command(*args, "--server", server.address),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def grpc_refusal(server: ServerProcess, call: str, request_message: Any) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as err:
            getattr(stub, call)(request_message, timeout=30)
    return err.value


def test_a_wrong_step_names_each_surfaces_own_call(server: ServerProcess) -> None:
    tx = begin(server)
    # HTTP: the route, in the instruction and as the operation.
    wrong = put_step(server, tx, 5)
    assert wrong.status == 409, wrong.raw
    cont = wrong.json["error"]["continuation"]
    assert cont["kind"] == "RetryRequest"
    only_its_own("http", cont["instruction"])
    assert f"POST /v1/transactions/{tx}/steps" in cont["instruction"]

    # gRPC: the RPC, in the agenttx-next trailing metadata; the message names no call.
    refused = grpc_refusal(
        server,
        "ExecuteStep",
        pb.ExecuteStepRequest(
            transaction_id=tx, step_id=5, tool_name="kv.put", arguments_json='{"key":"k"}'
        ),
    )
    metadata = refused.trailing_metadata()  # type: ignore[attr-defined]
    assert from_metadata(metadata)[0] == "WRONG_STEP"
    then = next_from_metadata(metadata)
    assert then["kind"] == "RetryRequest"
    only_its_own("grpc", then["instruction"])
    for words in FOREIGN.values():
        assert not any(w in refused.details() for w in words), refused.details()  # type: ignore[attr-defined]

    # CLI: the command, on the next: line.
    out = cli(server, "tx", "step", tx, "5", "kv.put", '{"key": "k", "value": 1}')
    assert out.returncode == 1, out
    [next_line] = [line for line in out.stderr.splitlines() if line.startswith("next: ")]
    only_its_own("cli", next_line)
    assert f"agenttx tx step {tx}" in next_line
    assert "step_id 1" in next_line


async def test_a_wrong_step_over_mcp_names_the_tool(server: ServerProcess) -> None:
    tx = begin(server)
    url = http_base(server) + "/mcp"
    async with Client(url, read_timeout_seconds=30) as c:
        wrong = await c.call_tool(
            "run_step",
            {"transaction_id": tx, "step_id": 4, "tool": "kv.put", "arguments": {"key": "k"}},
        )
    cont = structured(wrong)["continuation"]
    assert cont["kind"] == "RetryRequest"
    only_its_own("mcp", cont["instruction"])


async def test_a_refused_redo_names_each_surfaces_own_call(server: ServerProcess) -> None:
    tx = begin(server)
    assert put_step(server, tx, 1).json["status"] == "SUCCESS"

    # CLI: `agenttx tx redo` with nothing undone says to send step 2 with `agenttx tx step`.
    out = cli(server, "tx", "redo", tx)
    assert out.returncode == 1, out
    assert "send step 2 again" in out.stderr
    [next_line] = [line for line in out.stderr.splitlines() if line.startswith("next: ")]
    only_its_own("cli", next_line)
    assert "execute_step" not in out.stderr  # the message too names no other surface's call

    # HTTP: the route.
    redo = request(http_base(server), "POST", f"/v1/transactions/{tx}/redo", {})
    assert redo.status == 409, redo.raw
    error = redo.json["error"]
    assert error["reason"] == "REDO_REFUSED"
    assert error["continuation"]["operation"] == f"POST /v1/transactions/{tx}/steps"
    only_its_own("http", error["continuation"]["instruction"])

    # gRPC: the RPC.
    refused = grpc_refusal(server, "RedoStep", pb.RedoStepRequest(transaction_id=tx))
    then = next_from_metadata(refused.trailing_metadata())  # type: ignore[attr-defined]
    assert (then["kind"], then["rpc"]) == ("CallTool", "ExecuteStep")
    only_its_own("grpc", then["instruction"])

    # MCP: the tool.
    async with Client(http_base(server) + "/mcp", read_timeout_seconds=30) as c:
        redone = structured(await c.call_tool("redo_step", {"transaction_id": tx}))
    assert (redone["continuation"]["kind"], redone["continuation"]["tool"]) == (
        "CallTool",
        "run_step",
    )
    only_its_own("mcp", redone["continuation"]["instruction"])
