"""The dashboard's effects section before and after commit, in headless Chromium against a
real ``agenttx serve --http-addr``: an open transaction's staged email is listed as staged
(the outbox holds nothing of it yet), the commit moves it to the outbox's list live, and a
rolled-back transaction says nothing was sent. The status filter offers every status."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agenttx.client import AgentTxClient
from browser_harness import CHROMIUM_ARGS, chromium, distinct_colours, save_screenshot
from http_harness import http_base, start_http_server
from server_process import ServerProcess

playwright_sync = pytest.importorskip("playwright.sync_api")

MAIL = {"to": "ops@example.com", "subject": "Refund issued", "body": "Order 1042."}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("dash-staged") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.fixture
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with playwright_sync.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(chromium()),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1366, "height": 860},
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page
        finally:
            context.close()
        assert errors == [], errors


def test_a_staged_mail_shows_before_commit_and_moves_to_the_outbox(
    server: ServerProcess, page: Any
) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="mailer").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "order", "value": 1042})
        staged = client.execute_step(tx, 2, "email.send", MAIL)
        key = staged.output["idempotency_key"]
        page.goto(http_base(server) + f"/#/tx/{tx}")
        row = page.locator('#effects tr[data-staged-step="2"]')
        row.wait_for(timeout=10_000)
        text = row.inner_text()
        assert "email.send" in text
        assert "staged" in text
        assert key in text
        assert "after a durable commit" in text
        png = page.screenshot(full_page=True)
        assert distinct_colours(png) >= 8
        save_screenshot(png, "dashboard-staged-effect.png")
        # The commit releases it to the outbox: the page redraws live and lists it there.
        client.commit(tx)
        page.locator("#effects tr[data-effect]").wait_for(timeout=10_000)
        assert "email.send" in page.locator("#effects tr[data-effect]").inner_text()
        assert page.locator("#effects tr[data-staged-step]").count() == 0


def test_a_rolled_back_transaction_says_nothing_was_sent(server: ServerProcess, page: Any) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="mailer").transaction_id
        client.execute_step(tx, 1, "email.send", MAIL)
        client.rollback(tx)
    page.goto(http_base(server) + f"/#/tx/{tx}")
    page.locator("#effects").get_by_text("Nothing was sent").wait_for(timeout=10_000)
    assert page.get_by_role("button", name="Abort this transaction").count() == 0


def test_the_status_filter_offers_every_status(server: ServerProcess, page: Any) -> None:
    page.goto(http_base(server) + "/")
    options = page.locator("#f-status option").all_inner_texts()
    for status in ("ACTIVE", "COMMITTED", "ROLLED_BACK", "FAILED", "COMPENSATING", "COMPENSATED"):
        assert status in options
