"""The dashboard on a server with API keys, in headless Chromium, is as live as without: the
event stream is read through ``fetch`` with the key (an ``EventSource`` cannot carry it), so a
transaction another client begins and commits appears and changes on the list without a reload
and without polling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.client import AgentTxClient
from http_harness import http_base, start_http_server
from test_dashboard_browser import browser, page, screenshot

__all__ = ["browser", "page"]  # the fixtures, shared with the other dashboard tests


def test_a_keyed_dashboard_streams_a_transaction_a_client_runs(tmp_path: Path, page: Any) -> None:
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "ops"\n'
        'tenant = "acme"\nroles = ["admin"]\n'
    )
    server = start_http_server(tmp_path / "data", "--api-keys", str(keys))
    with server.killed_on_error():
        page.goto(http_base(server) + "/")
        page.locator("#key-form").wait_for(state="visible", timeout=30_000)
        page.locator("#api-key").fill(secret)
        page.get_by_role("button", name="Use key").click()
        page.wait_for_selector("#live.on", timeout=30_000)  # the stream is open
        listings: list[str] = []
        page.on(
            "request",
            lambda r: listings.append(r.url) if "/v1/transactions?" in r.url else None,
        )
        with AgentTxClient(server.address, api_key=secret) as client:
            tx = client.begin(agent_id="streamed").transaction_id
            row = page.locator(f'tr[data-tx="{tx}"]')
            row.wait_for(timeout=30_000)  # appeared without a reload
            assert "streamed" in row.inner_text()
            client.execute_step(tx, 1, "kv.put", {"key": "dash", "value": 1})
            client.commit(tx)
        page.locator(f'tr[data-tx="{tx}"] .s-committed').wait_for(timeout=30_000)
        assert listings  # the list was read again because events came
        # Idle, nothing is asked: updates come from the stream, not from polling.
        listings.clear()
        time.sleep(5)
        assert listings == []
        screenshot(page, "dashboard-keyed-live.png")
    assert server.terminate() == 0


def test_a_keyed_transaction_page_stops_listening_when_it_ends(tmp_path: Path, page: Any) -> None:
    """With a key the stream is read through ``fetch``, which reconnected 2 s after every
    close: the transaction's last event ends the live updates there too."""
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "ops"\n'
        'tenant = "acme"\nroles = ["admin"]\n'
    )
    server = start_http_server(tmp_path / "data", "--api-keys", str(keys))
    with server.killed_on_error(), AgentTxClient(server.address, api_key=secret) as client:
        tx = client.begin(agent_id="keyed-end").transaction_id
        opened: list[str] = []
        page.on("request", lambda r: opened.append(r.url) if f"{tx}/events" in r.url else None)
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.locator("#key-form").wait_for(state="visible", timeout=30_000)
        page.locator("#api-key").fill(secret)
        page.get_by_role("button", name="Use key").click()
        page.wait_for_selector("#live.on", timeout=30_000)
        client.rollback(tx)
        page.locator(".facts .s-rolled_back").wait_for(timeout=30_000)
        page.wait_for_function(
            "document.getElementById('live').textContent === 'ended'", timeout=30_000
        )
        streams = len(opened)
        time.sleep(5)  # longer than the 2 s the fetch stream waits before reconnecting
        assert len(opened) == streams, opened
        assert page.locator("#live").inner_text() == "ended"
    assert server.terminate() == 0
