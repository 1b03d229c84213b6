"""``agenttx serve`` as a user runs it: a real process, health, reflection, calls, logs, drain."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from agenttx.cli import main
from agenttx.server import ServeConfig, StartupError, parse_addr, redact, start
from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

SERVICE = "agenttx.v1.AgentTxService"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Policy defaults from environment variables: begun transactions must carry them.
    data_dir = tmp_path_factory.mktemp("serve") / "data"
    proc = start_server(
        data_dir,
        env={"AGENTTX_MAX_LOCAL_DEPTH": "5", "AGENTTX_REPLAY_BUDGET_FACTOR": "3.5"},
    )
    yield proc
    status = proc.terminate()
    assert status == 0, proc.log_text()


def test_health_check_says_serving(server: ServerProcess) -> None:
    with server.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE):
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(server: ServerProcess) -> None:
    with server.channel() as channel:
        services = ProtoReflectionDescriptorDatabase(channel).get_services()
    assert SERVICE in services
    assert "grpc.health.v1.Health" in services


def test_a_transaction_runs_and_commits_over_grpc(server: ServerProcess) -> None:
    with server.channel() as channel:
        stub = server.stub(channel)
        tx = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="it")).transaction_id
        step = stub.ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=tx, step_id=1, tool_name="kv.put", arguments_json='{"key":"a"}'
            )
        )
        assert step.status == pb.STEP_STATUS_SUCCESS
        assert step.next_step_id == 2
        info = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
        # --max-local-depth and --replay-budget-factor came from AGENTTX_* variables.
        assert info.policy.max_local_depth == 5
        assert info.policy.replay_budget_factor == 3.5
        assert info.policy.max_global_resets == 1
        commit = stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
        assert commit.committed
        assert commit.steps_committed == 1
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetTransaction(pb.GetTransactionRequest(transaction_id="tx_nope"))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def test_user_tools_from_the_working_directory_are_served(server: ServerProcess) -> None:
    with server.channel() as channel:
        tools = server.stub(channel).ListTools(pb.ListToolsRequest()).tools
    names = {t.name for t in tools}
    assert {"test.sleep", "test.call_api", "kv.put"} <= names


def test_json_log_lines_carry_transaction_and_step_ids(server: ServerProcess) -> None:
    with server.channel() as channel:
        stub = server.stub(channel)
        tx = stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
        stub.ExecuteStep(
            pb.ExecuteStepRequest(transaction_id=tx, step_id=1, tool_name="kv.get",
                                  arguments_json='{"key":"missing"}')
        )  # fmt: skip
        with pytest.raises(grpc.RpcError):
            stub.ExecuteStep(pb.ExecuteStepRequest(transaction_id=tx, step_id=9, tool_name="x"))
    deadline = time.monotonic() + 30  # the server writes its log lines as it gets to them
    while time.monotonic() < deadline:
        mine = [r for r in server.log_records() if r.get("transaction_id") == tx]
        if len(mine) >= 3:
            break
        time.sleep(0.02)
    begin, step, refused = mine[:3]
    assert begin["rpc"] == "BeginTransaction"
    assert begin["code"] == "OK"
    assert step["rpc"] == "ExecuteStep"
    assert step["step_id"] == 1
    assert step["tool_name"] == "kv.get"
    assert step["status"] in ("ROLLBACK_TRIGGERED", "FAILED")
    assert step["level"] == "info"
    assert step["logger"] == "agenttx.rpc"
    assert step["duration_ms"] >= 0
    assert refused["code"] == "FAILED_PRECONDITION"
    assert refused["level"] == "warning"
    assert "step" in refused["error"]
    startup = next(r for r in server.log_records() if r.get("event") == "serving")
    assert startup["listen_addr"] == server.address
    assert startup["store"].startswith("sqlite:///")
    assert startup["store"].endswith("agenttx.db")


def _slow_step(server: ServerProcess, seconds: float, result: dict[str, Any]) -> threading.Thread:
    """Start ``test.sleep`` in a thread and return once the server runs it; ``result`` gets
    the reply or the error."""
    channel = server.channel()
    stub = server.stub(channel)
    tx = stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
    started = server.log_path.with_suffix(".step-started")

    def run() -> None:
        try:
            result["reply"] = stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=tx,
                    step_id=1,
                    tool_name="test.sleep",
                    arguments_json=json.dumps({"seconds": seconds, "started": str(started)}),
                ),
                timeout=30,
            )
        except grpc.RpcError as exc:
            result["error"] = exc
        finally:
            channel.close()

    thread = threading.Thread(target=run)
    thread.start()
    # Wait for the tool to run (a fixed 0.3 s sleep was too short on a busy machine: SIGTERM
    # then came before the call, which was refused instead of drained).
    deadline = time.monotonic() + 60
    while not started.exists():
        assert thread.is_alive(), result
        assert time.monotonic() < deadline, "the step never started in the server"
        time.sleep(0.02)
    return thread


def test_sigterm_lets_an_in_flight_step_finish_then_exits_zero(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--grace-s", "10")
    try:
        result: dict[str, Any] = {}
        thread = _slow_step(server, 1.0, result)  # the step is running in the server now
        started = time.monotonic()
        status = server.terminate(timeout=10)
        elapsed = time.monotonic() - started
        thread.join(5)
    finally:
        server.kill()
    assert status == 0, server.log_text()
    assert "error" not in result
    assert result["reply"].status == pb.STEP_STATUS_SUCCESS
    assert elapsed < 5  # the drain waited for the step, not for the whole grace period
    messages = [r["msg"] for r in server.log_records()]
    assert "SIGTERM received" in messages
    assert messages[-1] == "stopped"


def test_sigterm_cancels_calls_that_outlast_the_grace_period(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", "--grace-s", "0.3", log_format="text")
    try:
        result: dict[str, Any] = {}
        thread = _slow_step(server, 30.0, result)  # the step is running in the server now
        started = time.monotonic()
        status = server.terminate(timeout=10)
        elapsed = time.monotonic() - started
        thread.join(5)
    finally:
        server.kill()
    assert status == 0, server.log_text()
    assert elapsed < 5
    assert "reply" not in result
    assert isinstance(result["error"], grpc.RpcError)
    text = server.log_text()
    assert "serving gRPC on" in text  # the readable startup line of text mode
    assert "draining" in text


def test_out_of_range_policy_in_a_real_process_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"exited with 2:[\s\S]*'--max-local-depth'"):
        start_server(tmp_path / "data", "--max-local-depth", "17")


def test_serve_and_mcp_refuse_a_bad_policy_file_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[limits]\nmax_steps = -1\n")
    for command, more in (
        ("serve", ["--listen-addr", "127.0.0.1:0", "--metrics-addr", "off"]),
        ("mcp", []),
    ):
        r = CliRunner().invoke(
            main, [command, "--policy", str(bad), "--data-dir", str(tmp_path / command), *more]
        )
        assert r.exit_code == 1, r.output
        assert f"{bad}:2: [limits] max_steps: must be 1..1000000" in r.output


# -- in-process start: errors a caller of agenttx.server sees ---------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50051", ("127.0.0.1", 50051)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:9464", ("localhost", 9464)),
    ],
)
def test_addresses_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_addr(text) == expected


@pytest.mark.parametrize("text", ["50051", ":50051", "host:", "host:70000", "host:port"])
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(StartupError, match="host:port"):
        parse_addr(text, "--listen-addr")


def test_store_passwords_are_redacted_in_logs() -> None:
    assert (
        redact("postgresql://app:s3cret@db:5432/agenttx") == "postgresql://app:***@db:5432/agenttx"
    )
    assert redact("sqlite:///agenttx-data/agenttx.db") == "sqlite:///agenttx-data/agenttx.db"


async def test_metrics_off_serves_grpc_only(tmp_path: Path) -> None:
    running = await start(
        ServeConfig(listen_addr="127.0.0.1:0", data_dir=tmp_path / "d", metrics_addr=None)
    )
    try:
        assert running.endpoint is None
        assert running.metrics is None
        assert running.address.startswith("127.0.0.1:")
        assert (tmp_path / "d" / "agenttx.db").exists()
    finally:
        await running.stop(0)


async def test_a_taken_port_is_a_clear_startup_error(tmp_path: Path) -> None:
    first = await start(
        ServeConfig(listen_addr="127.0.0.1:0", data_dir=tmp_path / "a", metrics_addr=None)
    )
    try:
        with pytest.raises(StartupError, match="cannot listen on"):
            await start(
                ServeConfig(listen_addr=first.address, data_dir=tmp_path / "b", metrics_addr=None)
            )
    finally:
        await first.stop(0)


async def test_a_taken_metrics_port_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError, match="cannot serve metrics on"):
            await start(
                ServeConfig(
                    listen_addr="127.0.0.1:0",
                    data_dir=tmp_path / "d",
                    metrics_addr=f"127.0.0.1:{port}",
                )
            )
