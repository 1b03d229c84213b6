"""The dashboard, in headless Chromium, when a reload of ``--api-keys`` revokes the key it is
using: its live updates (the event stream read through ``fetch``, which can carry the key an
``EventSource`` cannot) end with the server's last error event, the badge says the key was
refused, the page asks for a key, and a key in force
brings the live list back."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.client import AgentTxClient
from http_harness import http_base, start_http_server
from test_dashboard_browser import browser, page, screenshot

__all__ = ["browser", "page"]  # the fixtures, shared with the other dashboard tests


def key_table(secret: str, principal: str) -> str:
    return (
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{principal}"\n'
        'tenant = "acme"\nroles = ["admin"]\n\n'
    )


def test_a_revoked_key_stops_the_live_updates_and_asks_for_a_key(tmp_path: Path, page: Any) -> None:
    old, new = new_secret(), new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_table(old, "ops"))
    server = start_http_server(tmp_path / "data", "--api-keys", str(keys))
    with server.killed_on_error():
        with AgentTxClient(server.address, api_key=old) as client:
            tx = client.begin(agent_id="watched").transaction_id
        page.goto(http_base(server) + "/")
        page.locator("#key-form").wait_for(state="visible", timeout=30_000)
        page.locator("#api-key").fill(old)
        page.get_by_role("button", name="Use key").click()
        page.wait_for_selector(f'tbody tr[data-tx="{tx}"]', timeout=30_000)
        live = page.locator("#live")
        page.wait_for_function(
            "document.getElementById('live').textContent === 'live'", timeout=30_000
        )

        keys.write_text(key_table(new, "ops"))  # rotate: the page's key is revoked
        server.proc.send_signal(signal.SIGHUP)
        page.wait_for_function(
            "document.getElementById('live').textContent === 'key refused'", timeout=30_000
        )
        page.locator("#key-form").wait_for(state="visible", timeout=30_000)
        screenshot(page, "dashboard-key-revoked.png")

        # Stopped: no call goes out with the refused key any more (no reconnect, no poll).
        calls: list[str] = []
        page.on("request", lambda r: calls.append(r.url) if "/v1/" in r.url else None)
        time.sleep(5)
        assert calls == []

        page.locator("#api-key").fill(new)
        page.get_by_role("button", name="Use key").click()
        page.wait_for_function(
            "document.getElementById('live').textContent === 'live'", timeout=30_000
        )
        assert live.inner_text() == "live"
        page.wait_for_selector(f'tbody tr[data-tx="{tx}"]', timeout=30_000)
    assert server.terminate() == 0
