"""The operator's MCP tools over a real ``agenttx mcp`` subprocess and the SDK client: a
webhook dead-lettered by a real HTTP receiver's 400 is listed by ``list_effects`` with its
last error and delivered by ``retry_effect`` once the receiver accepts. Without
``--mcp-effect-tools`` the agent's tool list does not offer them."""

from __future__ import annotations

from pathlib import Path

from http_receiver import http_receiver
from mcp_harness import stdio_client, structured


async def test_list_and_retry_a_dead_letter_over_mcp(tmp_path: Path) -> None:
    with http_receiver() as hooks:
        hooks.script["/bad"] = [400]
        flags = ("--mcp-effect-tools", "--webhook-allow", hooks.allow)
        async with stdio_client(tmp_path / "data", "auto", *flags) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"list_effects", "retry_effect"} <= names
            tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
            step = await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": 1,
                    "tool": "webhook.post",
                    "arguments": {"url": hooks.url("/bad"), "json": {"n": 1}},
                },
            )
            assert structured(step)["status"] == "SUCCESS"
            await c.call_tool("commit_transaction", {"transaction_id": tx})

            listed = structured(await c.call_tool("list_effects", {"status": ["dead"]}))
            (dead,) = listed["effects"]
            assert dead["transaction_id"] == tx
            assert dead["last_error"].startswith("HTTP 400 from")
            assert dead["payload"]["json"] == {"n": 1}

            hooks.script["/bad"] = [200]
            retried = await c.call_tool("retry_effect", {"effect_id": dead["effect_id"]})
            assert structured(retried)["effect"]["status"] == "delivered"
            refused = await c.call_tool("retry_effect", {"effect_id": dead["effect_id"]})
            assert refused.is_error
            assert "not dead" in structured(refused)["error"]["message"]
        assert len(hooks.requests("/bad")) == 2


async def test_without_the_flag_the_tools_are_not_offered(tmp_path: Path) -> None:
    async with stdio_client(tmp_path / "data", "auto") as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert not names & {"list_effects", "retry_effect"}
