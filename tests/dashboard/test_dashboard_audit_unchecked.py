"""The dashboard's audit line for a keyed chain the server has no key for, in headless
Chromium against a real ``agenttx serve --http-addr``: it says the chain was not checked and
which key to give (issue 30.6), not that it is broken, and not that it is intact."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.audit import AuditKey, AuditKeys
from http_harness import http_base, start_http_server
from test_dashboard_browser import browser, page, screenshot

playwright_sync = pytest.importorskip("playwright.sync_api")

__all__ = ["browser", "page"]  # the fixtures this module's test uses


async def keyed_transaction(data: Path) -> str:
    """A committed transaction whose chain a keyed engine wrote, on the server's store."""
    data.mkdir(parents=True)
    keys = AuditKeys.of(AuditKey("2026-12", bytes(range(32))))
    async with await agenttx.Engine.open(
        f"sqlite:///{data / 'agenttx.db'}", fs_root=data / "files", audit_keys=keys
    ) as engine:
        tx = (await engine.begin(agent_id="keyed")).transaction_id
        await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
        await engine.commit(tx)
        return tx


def test_a_keyed_chain_without_the_key_reads_not_checked(tmp_path: Path, page: Any) -> None:
    # On a thread of its own: Playwright's sync API holds an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        tx = pool.submit(asyncio.run, keyed_transaction(tmp_path / "data")).result()
    server = start_http_server(tmp_path / "data")  # no --audit-key
    try:
        page.goto(http_base(server) + f"/#/tx/{tx}")
        line = page.locator("#audit p.warn")
        line.wait_for(timeout=30_000)
        text = line.inner_text()
        assert text.startswith("not checked: 3 of its 3 records"), text
        assert "give it the audit key file with '2026-12'" in text
        screenshot(page, "dashboard-audit-unchecked.png")
    finally:
        assert server.terminate() == 0
