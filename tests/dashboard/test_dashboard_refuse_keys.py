"""The dashboard's refusal on a server with API keys, in headless Chromium: the agent's own
key cannot refuse its receipt; the approver's key refuses it as its owner, and the agent's
commit with the receipt is refused naming her (the fixtures of ``test_dashboard_keys``)."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.client import AgentTxClient
from agenttx.errors import ReceiptRefused
from http_harness import http_base
from server_process import ServerProcess
from test_dashboard_browser import browser, page, screenshot
from test_dashboard_keys import AGENT, APPROVER, server

__all__ = ["browser", "page", "server"]  # the fixtures, shared with the keyed dashboard tests


def test_with_keys_the_approver_refuses_as_herself(server: ServerProcess, page: Any) -> None:
    with AgentTxClient(server.address, api_key=AGENT) as client:
        tx = client.begin(agent_id="keyed-refuse", mode="approval_required").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "budget", "value": 70})
        page.goto(http_base(server) + "/")
        page.locator("#key-form").wait_for(state="visible", timeout=10_000)
        page.locator("#api-key").fill(AGENT)
        page.get_by_role("button", name="Use key").click()
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.locator("#approve").wait_for(timeout=10_000)
        page.get_by_role("button", name="Preview commit").click()
        page.locator("#approve pre").wait_for(timeout=10_000)
        page.locator("#refuse-reason").fill("70 is over budget")
        page.locator("#approver-key").fill(AGENT)  # the agent's own key: refused
        page.get_by_role("button", name="Refuse this change").click()
        page.locator("#approve p.error").wait_for(timeout=10_000)
        page.locator("#approver-key").fill(APPROVER)
        page.get_by_role("button", name="Refuse this change").click()
        page.locator("#approve p.refused").wait_for(timeout=10_000)
        receipt = page.locator("#approve p.refused").inner_text().split()[2].rstrip(":")
        assert '"refused_by": "carol"' in page.locator("#approve pre").inner_text()
        screenshot(page, "dashboard-refuse-keys.png")
        with pytest.raises(ReceiptRefused, match="'carol'"):
            client.commit(tx, receipt_id=receipt)
