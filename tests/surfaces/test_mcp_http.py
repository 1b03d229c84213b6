"""``agenttx serve --http-addr``: MCP over streamable HTTP at ``/mcp``, in the server's process
and on its engine (a transaction begun over MCP is the one gRPC reads), in both protocol eras,
behind the Host/Origin guard."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agenttx.client import AgentTxClient
from mcp_harness import ERAS, MODERN, structured, text
from server_process import ServerProcess, start_server


def mcp_url(server: ServerProcess) -> str:
    [record] = [r for r in server.log_records() if r.get("event") == "serving"]
    url = record["mcp_http"]
    assert isinstance(url, str)
    assert url.startswith("http://127.0.0.1:")
    return url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("http") / "data"
    proc = start_server(data, "--tools", "mcp_tools", env={"AGENTTX_HTTP_ADDR": "127.0.0.1:0"})
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.mark.parametrize("era", ERAS)
async def test_a_task_over_streamable_http_shares_the_engine_with_grpc(
    era: str, server: ServerProcess
) -> None:
    seen: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(done)

    async with Client(mcp_url(server), mode=era, read_timeout_seconds=30) as c:
        assert c.protocol_version == (MODERN if era == "auto" else "2025-11-25")
        tools = {t.name for t in (await c.list_tools()).tools}
        assert "run_step" in tools
        tx = structured(await c.call_tool("begin_transaction", {"agent_id": "http"}))[
            "transaction_id"
        ]
        ok = await c.call_tool(
            "run_step",
            {"transaction_id": tx, "step_id": 1, "tool": "kv.put", "arguments": "{not json"},
        )
        # Arguments that are not JSON: the step's own call is wrong, so the same step again.
        failed = structured(ok)
        assert failed["status"] == "ROLLBACK_TRIGGERED"
        assert failed["next_step_id"] == 1
        assert "Resume with run_step step_id 1" in text(ok)
        wrong = await c.call_tool(
            "run_step",
            {"transaction_id": tx, "step_id": 2, "tool": "kv.put", "arguments": {"key": "k"}},
        )
        assert structured(wrong)["continuation"]["kind"] == "RetryRequest"
        # The correlation id finds the server's log line of that refusal.
        correlation = structured(wrong)["error"]["correlationId"]
        [line] = [r for r in server.log_records() if r.get("correlation_id") == correlation]
        assert (line["level"], line["code"], line["transaction_id"]) == (
            "warning",
            "WRONG_STEP",
            tx,
        )
        good = await c.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 1,
                "tool": "test.progress",
                "arguments": {"steps": 2},
            },
            progress_callback=on_progress,
        )
        assert structured(good)["status"] == "SUCCESS"
        assert seen == [1, 2]
        # The same engine: gRPC sees the step MCP ran.
        with AgentTxClient(server.address) as grpc_client:
            info = grpc_client.get_transaction(tx)
        assert (info.agent_id, info.next_step_id) == ("http", 2)
        committed = await c.call_tool("commit_transaction", {"transaction_id": tx})
        assert structured(committed)["committed"] is True


def _post(url: str, headers: dict[str, str]) -> tuple[int, str]:
    host_port = url.removeprefix("http://").split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "guard-test", "version": "0"},
            },
        }
    )
    try:
        conn.putrequest("POST", "/mcp", skip_host="Host" in headers)
        all_headers: dict[str, Any] = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
            **headers,
        }
        for k, v in all_headers.items():
            conn.putheader(k, v)
        conn.endheaders(body.encode())
        reply = conn.getresponse()
        return reply.status, reply.read().decode(errors="replace")
    finally:
        conn.close()


def test_the_host_and_origin_guard_admits_loopback_only(server: ServerProcess) -> None:
    url = mcp_url(server)
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert _post(url, {})[0] == 200
    assert _post(url, {"Origin": f"http://localhost:{port}"})[0] == 200
    assert _post(url, {"Host": "evil.example:80"}) == (421, "Invalid Host header")
    assert _post(url, {"Origin": "http://evil.example"}) == (403, "Invalid Origin header")


def test_allowed_hosts_and_origins_are_configurable(tmp_path: Path) -> None:
    proc = start_server(
        tmp_path / "data",
        "--http-addr",
        "127.0.0.1:0",
        "--http-allowed-hosts",
        "agenttx.internal:*",
        "--http-allowed-origins",
        "*",
    )
    try:
        url = mcp_url(proc)
        assert _post(url, {})[0] == 421  # loopback is no longer on the list
        status, _ = _post(url, {"Host": "agenttx.internal:8080", "Origin": "http://any.where"})
        assert status == 200
    finally:
        assert proc.terminate() == 0


def test_a_taken_http_port_stops_the_start(tmp_path: Path) -> None:
    import socket
    import subprocess

    from server_process import agenttx_command, server_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            agenttx_command(
                "serve",
                "--data-dir",
                str(tmp_path / "data"),
                "--listen-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "off",
                "--http-addr",
                f"127.0.0.1:{port}",
            ),
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert "cannot listen on --http-addr" in done.stderr
