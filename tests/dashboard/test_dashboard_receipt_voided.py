"""The dashboard's approve screen and a voided receipt, in headless Chromium against the real
HTTP listener: a step made elsewhere after the screen's preview redraws the page, which lists
the receipt as voided (why, and to preview again) with Approve and Refuse disabled; and where
the redraw has not come (the event stream blocked here), a decision the server refuses as
stale (SNAPSHOT_MISMATCH) disables both decisions and says to preview again, as an expiry
does. A screenshot is saved and checked non-blank."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_dashboard_browser import browser, page, screenshot
from test_dashboard_receipt_expired import DashboardThread

playwright_sync = pytest.importorskip("playwright.sync_api")

__all__ = ["browser", "page"]  # the fixtures this module's test uses

TTL = 900.0  # long enough that nothing here expires


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[DashboardThread]:
    # The engine's clock is the real one, the browser's: the screen's expiry check waits the
    # whole TTL, so nothing but the step and the click below tells it the receipt is voided.
    server = DashboardThread(tmp_path, receipt_ttl_s=TTL)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_approve_screen_shows_a_voided_receipt_and_refuses_to_decide_it(
    dashboard: DashboardThread, page: Any
) -> None:
    engine = dashboard.engine

    def approval_tx(key: str) -> str:
        begun = dashboard.run(engine.begin(principal="bob", mode="approval_required"))
        dashboard.run(
            engine.execute_step(begun.transaction_id, 1, "kv.put", {"key": key, "value": 1})
        )
        return begun.transaction_id

    # A step made elsewhere: the page redraws at the new revision and lists the receipt voided.
    tx = approval_tx("limit")
    page.goto(dashboard.base + f"/#/tx/{tx}")
    page.locator("#approve").wait_for(timeout=10_000)
    page.get_by_role("button", name="Preview commit").click()
    page.locator("#approve p.expires").wait_for(timeout=10_000)
    assert page.get_by_role("button", name="Approve this change").is_enabled()
    dashboard.run(engine.execute_step(tx, 2, "kv.put", {"key": "limit2", "value": 2}))
    listed = page.locator("#approve ul.receipts li.r-voided")
    listed.wait_for(timeout=10_000)
    line = listed.inner_text()
    assert "voided: revision 2 moved to 3" in line
    assert "preview again for a new receipt" in line
    assert page.get_by_role("button", name="Approve this change").is_disabled()
    assert page.get_by_role("button", name="Refuse this change").is_disabled()
    screenshot(page, "dashboard-receipt-voided.png")

    # No redraw (its event stream blocked): approving the receipt a step voided meanwhile is
    # refused by the server, and the screen says so and disables both decisions.
    other = approval_tx("cap")
    page.route(f"**/v1/transactions/{other}/events", lambda route: route.abort())
    page.goto(dashboard.base + f"/#/tx/{other}")
    page.locator("#approve").wait_for(timeout=10_000)
    page.get_by_role("button", name="Preview commit").click()
    page.locator("#approve p.expires").wait_for(timeout=10_000)
    dashboard.run(engine.execute_step(other, 2, "kv.put", {"key": "cap2", "value": 2}))
    page.locator("#approver-key").fill("al")
    page.get_by_role("button", name="Approve this change").click()
    said = page.locator("#approve p.voided")
    said.wait_for(timeout=10_000)
    assert "was voided by a later change" in said.inner_text()
    assert "Preview commit again for a new receipt" in page.locator("#approve").inner_text()
    assert page.get_by_role("button", name="Approve this change").is_disabled()
    assert page.get_by_role("button", name="Refuse this change").is_disabled()
    assert page.locator("#approve p.error").count() == 0  # voided, not a failure
    assert dashboard.run(engine.get_transaction(other)).status.value == "ACTIVE"
