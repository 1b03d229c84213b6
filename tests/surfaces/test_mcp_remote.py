"""``agenttx mcp --server HOST:PORT``: no engine of its own; every tool call goes to a running
``agenttx serve`` over gRPC through our client, and its refusals (rebuilt by the client from
the error's reason and fields) carry the same continuations as the embedded engine's."""

from __future__ import annotations

from pathlib import Path

from agenttx.client import AgentTxClient
from mcp_harness import stdio_client, structured, text
from server_process import start_server


async def test_mcp_drives_a_running_server_over_grpc(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server")
    try:
        # Its own --data-dir stays empty: nothing is opened there.
        async with stdio_client(tmp_path / "unused", "legacy", "--server", server.address) as c:
            tools = structured(await c.call_tool("list_tools", {}))["tools"]
            assert "kv.put" in {t["name"] for t in tools}
            tx = structured(await c.call_tool("begin_transaction", {"goal": "remote"}))[
                "transaction_id"
            ]
            r = await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": "1",
                    "tool": "kv.put",
                    "arguments": '{"key": "k", "value": 1}',
                },
            )
            assert structured(r)["status"] == "SUCCESS", text(r)
            wrong = structured(
                await c.call_tool(
                    "run_step",
                    {"transaction_id": tx, "step_id": 5, "tool": "kv.get", "arguments": {}},
                )
            )
            assert wrong["error"]["code"] == "WRONG_STEP"
            assert wrong["continuation"]["kind"] == "RetryRequest"
            assert "step_id 2" in wrong["continuation"]["instruction"]
            missing = structured(await c.call_tool("get_transaction", {"transaction_id": "tx_x"}))
            assert missing["continuation"]["tool"] == "begin_transaction"
            assert structured(await c.call_tool("commit_transaction", {"transaction_id": tx}))[
                "committed"
            ]
        with AgentTxClient(server.address) as client:
            info = client.get_transaction(tx)
        assert info.metadata == {"goal": "remote"}
        assert info.status.value == "COMMITTED"
        assert not (tmp_path / "unused").exists()
    finally:
        assert server.terminate() == 0
