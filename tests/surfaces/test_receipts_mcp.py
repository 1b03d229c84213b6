"""Preview, snapshot echo and approval over MCP: ``agenttx mcp`` as a subprocess on stdio,
driven by the official SDK's client, on every store (``--store``). Approval is an explicit
``approve_commit`` call by an approver; every refusal names the next call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcp_harness import stdio_client, structured, text
from server_process import start_server


def cont(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    c: dict[str, Any] = structured(result)["continuation"]
    return c


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_an_approval_required_task_over_mcp(era: str, store_url: str, tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "data", era, "--store", store_url) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["preview_commit"].annotations.read_only_hint is True
        assert "approver" in (tools["approve_commit"].description or "")
        begun = structured(
            await c.call_tool(
                "begin_transaction",
                {"goal": "pay", "principal": "bob", "mode": "approval_required"},
            )
        )
        tx = begun["transaction_id"]
        assert begun["snapshot"] == {"transaction_id": tx, "revision": 1}
        assert begun["mode"] == "approval_required"
        step = structured(
            await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": 1,
                    "tool": "kv.put",
                    "arguments": {"key": "m/k", "value": 7},
                },
            )
        )
        assert step["snapshot"] == {"transaction_id": tx, "revision": 2}

        need = await c.call_tool("commit_transaction", {"transaction_id": tx})
        assert structured(need)["error"]["code"] == "APPROVAL_REQUIRED"
        assert (cont(need)["kind"], cont(need)["tool"]) == ("CallTool", "preview_commit")

        shown = await c.call_tool("preview_commit", {"transaction_id": tx})
        assert not shown.is_error
        p = structured(shown)
        assert p["revision"] == 2
        assert p["approval_required"] is True
        [change] = p["changes"]["state"]
        assert (change["key"], change["after"]) == ("kv/m/k", 7)
        assert f"receipt_id {p['receipt_id']}" in text(shown)
        assert "approve_commit" in text(shown)

        waiting = await c.call_tool(
            "commit_transaction", {"transaction_id": tx, "receipt_id": p["receipt_id"]}
        )
        assert cont(waiting)["kind"] == "ResolveExternally"
        assert "approve_commit" in cont(waiting)["instruction"]

        own = await c.call_tool(
            "approve_commit",
            {
                "transaction_id": tx,
                "receipt_id": p["receipt_id"],
                "principal": "bob",
                "roles": ["approver"],
            },
        )
        assert structured(own)["error"]["code"] == "APPROVAL_REFUSED"
        assert cont(own)["kind"] == "ResolveExternally"

        approved = await c.call_tool(
            "approve_commit",
            {
                "transaction_id": tx,
                "receipt_id": p["receipt_id"],
                "principal": "alice",
                "roles": ["approver"],
            },
        )
        assert not approved.is_error, text(approved)
        assert structured(approved)["approved_by"] == "alice"

        again = await c.call_tool(
            "approve_commit",
            {
                "transaction_id": tx,
                "receipt_id": p["receipt_id"],
                "principal": "carol",
                "roles": ["approver"],
            },
        )
        assert (cont(again)["kind"], cont(again)["tool"]) == ("CallTool", "commit_transaction")

        stale = await c.call_tool(
            "commit_transaction",
            {"transaction_id": tx, "receipt_id": p["receipt_id"], "expected_revision": "1"},
        )
        assert structured(stale)["error"]["code"] == "SNAPSHOT_MISMATCH"
        assert (cont(stale)["kind"], cont(stale)["tool"]) == ("CallTool", "preview_commit")

        done = await c.call_tool(
            "commit_transaction",
            {"transaction_id": tx, "receipt_id": p["receipt_id"], "expected_revision": 2},
        )
        assert not done.is_error, text(done)
        assert structured(done)["committed"] is True


async def test_a_step_voids_an_approval_and_the_policy_caps_steps_over_mcp(
    store_url: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[limits]\nmax_steps = 2\n")
    async with stdio_client(
        tmp_path / "data", "legacy", "--store", store_url, "--policy", str(policy)
    ) as c:
        tx = structured(
            await c.call_tool(
                "begin_transaction", {"principal": "bob", "mode": "approval_required"}
            )
        )["transaction_id"]

        async def step(n: int) -> Any:
            return await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": n,
                    "tool": "kv.put",
                    "arguments": {"key": f"s/{n}", "value": n},
                },
            )

        await step(1)
        p = structured(await c.call_tool("preview_commit", {"transaction_id": tx}))
        await c.call_tool(
            "approve_commit",
            {
                "transaction_id": tx,
                "receipt_id": p["receipt_id"],
                "principal": "alice",
                "roles": ["approver"],
            },
        )
        await step(2)
        void = await c.call_tool(
            "commit_transaction", {"transaction_id": tx, "receipt_id": p["receipt_id"]}
        )
        assert structured(void)["error"]["code"] == "SNAPSHOT_MISMATCH"
        assert cont(void)["tool"] == "preview_commit"

        capped = await step(3)
        assert structured(capped)["error"]["code"] == "POLICY_VIOLATION"
        assert cont(capped)["kind"] == "ChooseTool"
        assert cont(capped)["tools"] == ["commit_transaction", "rollback_transaction"]


async def test_preview_and_approval_through_mcp_over_a_running_server(tmp_path: Path) -> None:
    # `agenttx serve --policy` holds the rule; `agenttx mcp --server` reaches it over gRPC.
    policy = tmp_path / "policy.toml"
    policy.write_text("[approval]\ntools = ['kv.put']\n")
    server = start_server(tmp_path / "server", "--policy", str(policy))
    try:
        async with stdio_client(tmp_path / "unused", "legacy", "--server", server.address) as c:
            tx = structured(await c.call_tool("begin_transaction", {"principal": "bob"}))[
                "transaction_id"
            ]
            await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": 1,
                    "tool": "kv.put",
                    "arguments": {"key": "r/k", "value": 1},
                },
            )
            need = await c.call_tool("commit_transaction", {"transaction_id": tx})
            assert structured(need)["error"]["code"] == "APPROVAL_REQUIRED"
            assert "tool 'kv.put'" in structured(need)["error"]["message"]
            p = structured(await c.call_tool("preview_commit", {"transaction_id": tx}))
            assert p["approval_reasons"] == ["policy: tool 'kv.put' needs approval"]
            approved = await c.call_tool(
                "approve_commit",
                {
                    "transaction_id": tx,
                    "receipt_id": p["receipt_id"],
                    "principal": "alice",
                    "roles": ["approver"],
                },
            )
            assert not approved.is_error, text(approved)
            done = await c.call_tool(
                "commit_transaction",
                {
                    "transaction_id": tx,
                    "receipt_id": p["receipt_id"],
                    "expected_revision": p["revision"],
                },
            )
            assert structured(done)["committed"] is True, text(done)
    finally:
        assert server.terminate() == 0
