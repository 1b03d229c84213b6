"""The dashboard's approve screen refuses a receipt, in headless Chromium against a real
``agenttx serve --http-addr``: the reason is required, the refusal shows, the agent's commit
with the receipt is refused naming the refuser and the reason, and the transaction's page
then lists the refusal. Screenshots are saved and checked non-blank."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.client import AgentTxClient
from agenttx.errors import ReceiptRefused
from http_harness import http_base
from test_dashboard_browser import browser, page, screenshot, server

playwright_sync = pytest.importorskip("playwright.sync_api")

__all__ = ["browser", "page", "server"]  # the fixtures of the approve screen's test


def test_the_approve_screen_refuses_a_receipt_with_a_reason(server: Any, page: Any) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="refuser", principal="alice", mode="approval_required")
        tx_id = tx.transaction_id
        client.execute_step(tx_id, 1, "kv.put", {"key": "limit", "value": 5000})
        page.goto(http_base(server) + f"/#/tx/{tx_id}")
        page.locator("#approve").wait_for(timeout=10_000)
        refuse = page.get_by_role("button", name="Refuse this change")
        assert refuse.is_disabled()  # nothing to refuse before a preview
        page.get_by_role("button", name="Preview commit").click()
        page.locator("#approve pre").wait_for(timeout=10_000)
        page.locator("#approver-key").fill("bob")
        refuse.click()  # no reason yet: refused in the page, nothing sent
        assert "reason is required" in page.locator("#approve p.error").inner_text()
        page.locator("#refuse-reason").fill("5000 is over the 1000 limit; ask for 1000")
        refuse.click()
        page.locator("#approve p.refused").wait_for(timeout=10_000)
        said = page.locator("#approve p.refused").inner_text()
        assert "5000 is over the 1000 limit" in said
        receipt = said.split()[2].rstrip(":")
        assert receipt.startswith("rcpt_")
        assert refuse.is_disabled()  # decided once
        screenshot(page, "dashboard-refuse.png")

        with pytest.raises(ReceiptRefused) as refused:
            client.commit(tx_id, receipt_id=receipt)
        assert refused.value.why == "refused"
        assert "'bob'" in refused.value.message
        assert "ask for 1000" in refused.value.message
        assert client.get_transaction(tx_id).status.value == "ACTIVE"

        # The transaction's page, drawn again, lists the refusal.
        page.reload()
        listed = page.locator("#approve ul.refusals li")
        listed.wait_for(timeout=10_000)
        assert receipt in listed.inner_text()
        assert "refused by bob" in listed.inner_text()
