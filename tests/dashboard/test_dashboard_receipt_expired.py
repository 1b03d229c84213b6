"""The dashboard's approve screen and an expired receipt, in headless Chromium against the real
HTTP listener of an engine whose clock is a fake one (the receipts' expiry is the engine's):
the screen says when the receipt expires; a decision the server refuses as expired disables
both decisions and says to preview again; at the expiry the screen asks the server and, once
the server says ``expired``, does the same without a click; the transaction's receipts are
listed with their status. Screenshots are saved and checked non-blank."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
from agenttx.api.http.v1 import ApiSettings
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.api.http.web import web_exception_handlers, web_routes
from agenttx.api.mcp import AgentTxMCP, embedded
from conftest import FakeClock
from server_process import ServerThread
from test_dashboard_browser import browser, page, screenshot

playwright_sync = pytest.importorskip("playwright.sync_api")

__all__ = ["browser", "page"]  # the fixtures this module's test uses

TTL = 60.0


class DashboardThread(ServerThread):
    """``ServerThread``'s engine with the HTTP listener (``/v1``, the dashboard) beside gRPC."""

    async def _start(self) -> None:
        await super()._start()
        app = build_http_app(
            AgentTxMCP(embedded(self.engine), version="test"),
            HttpSettings(
                routes=web_routes(
                    self.engine, "test", ApiSettings(extra_operations=SAFETY_OPERATIONS)
                ),
                exception_handlers=web_exception_handlers(),
            ),
        )
        self.listener = HttpListener(app, bind("127.0.0.1", 0))
        await self.listener.start()

    async def _stop(self) -> None:
        await self.listener.stop()
        await super()._stop()

    @property
    def base(self) -> str:
        return f"http://{self.listener.address}"


@pytest.fixture
def clock() -> FakeClock:
    """The engine's clock, an hour behind the browser's to begin with."""
    return FakeClock(start=time.time() - 3600)


@pytest.fixture
def dashboard(tmp_path: Path, clock: FakeClock) -> Iterator[DashboardThread]:
    server = DashboardThread(tmp_path, clock=clock, receipt_ttl_s=TTL)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_approve_screen_shows_when_a_receipt_expires_and_that_it_did(
    dashboard: DashboardThread, clock: FakeClock, page: Any
) -> None:
    engine = dashboard.engine
    tx = dashboard.run(engine.begin(principal="bob", mode="approval_required")).transaction_id
    dashboard.run(engine.execute_step(tx, 1, "kv.put", {"key": "limit", "value": 5000}))
    page.goto(dashboard.base + f"/#/tx/{tx}")
    page.locator("#approve").wait_for(timeout=10_000)
    approve = page.get_by_role("button", name="Approve this change")
    refuse = page.get_by_role("button", name="Refuse this change")
    preview = page.get_by_role("button", name="Preview commit")

    # Without a click: at the expiry (here at once: the engine's clock starts an hour behind
    # the browser's) the screen asks the server, whose clock decides — the receipt is issued
    # until the engine's clock reaches its expires_at.
    preview.click()
    page.locator("#approve p.expires").wait_for(timeout=10_000)
    assert "It expires at" in page.locator("#approve p.expires").inner_text()
    assert approve.is_enabled()
    page.wait_for_timeout(2500)  # the screen asked at least once, and was told issued
    assert page.locator("#approve p.expired").count() == 0
    assert approve.is_enabled()
    clock.advance(TTL)
    said = page.locator("#approve p.expired")
    said.wait_for(timeout=15_000)
    assert "expired at" in said.inner_text()
    assert "before it was decided" in said.inner_text()
    assert "Preview commit again for a new receipt" in page.locator("#approve").inner_text()
    assert approve.is_disabled()
    assert refuse.is_disabled()
    screenshot(page, "dashboard-receipt-expired.png")

    # A decision the server refuses as expired (the browser's clock says there is a minute
    # left): the screen says so, with the server's words, and what to do.
    clock.now = time.time()
    preview.click()
    page.locator("#approve p.expires").wait_for(timeout=10_000)
    # The new receipt's screen replaces the expired one's: wait for it to be drawn, not for a
    # fixed time (under load the reply and the redraw come later).
    playwright_sync.expect(approve).to_be_enabled(timeout=10_000)
    page.locator("#approver-key").fill("al")
    clock.advance(TTL + 1)
    approve.click()
    said = page.locator("#approve p.expired")
    said.wait_for(timeout=10_000)
    assert "it expired at" in said.inner_text()
    assert "preview the transaction again" in said.inner_text()
    assert approve.is_disabled()
    assert refuse.is_disabled()
    assert page.locator("#approve p.error").count() == 0  # an expiry, not a failure

    # The transaction's page, drawn again, lists both receipts as expired.
    page.reload()
    listed = page.locator("#approve ul.receipts li.r-expired")
    listed.first.wait_for(timeout=10_000)
    assert listed.count() == 2
    assert "preview again for a new receipt" in listed.first.inner_text()
    assert dashboard.run(engine.get_transaction(tx)).status.value == "ACTIVE"
