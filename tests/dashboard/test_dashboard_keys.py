"""The dashboard on a server with API keys, in headless Chromium: the page and its files load
without a key, the first refused call asks for one, the list then shows the key's own
transactions (live: the event stream read through ``fetch``, which carries the key), and the
approve screen approves a receipt with the approver's own key — the agent's key could not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.client import AgentTxClient
from http_harness import http_base, request, start_http_server
from server_process import ServerProcess
from test_dashboard_browser import browser, page, screenshot

__all__ = ["browser", "page"]  # the fixtures, shared with the keyless dashboard tests

AGENT, APPROVER = new_secret(), new_secret()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("dash-keys")
    keys = d / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(AGENT)}"\nprincipal = "alice"\ntenant = "acme"\n'
        'roles = ["agent"]\n\n'
        f'[[key]]\nhash = "{hash_secret(APPROVER)}"\nprincipal = "carol"\ntenant = "acme"\n'
        'roles = ["approver"]\n'
    )
    proc = start_http_server(d / "data", "--api-keys", str(keys))
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def test_the_files_load_without_a_key_and_the_api_needs_one(server: ServerProcess) -> None:
    base = http_base(server)
    assert request(base, "GET", "/").status == 200
    assert request(base, "GET", "/openapi.json").status == 200
    assert request(base, "GET", "/static/app.js").status == 200
    assert request(base, "GET", "/v1/transactions").status == 401


def test_with_a_key_the_list_and_the_approve_screen_work(
    server: ServerProcess, page: Any, tmp_path: Path
) -> None:
    with AgentTxClient(server.address, api_key=AGENT) as client:
        tx = client.begin(agent_id="keyed", mode="approval_required").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "budget", "value": 7})
        page.goto(http_base(server) + "/")
        page.locator("#key-form").wait_for(state="visible", timeout=30_000)
        page.locator("#api-key").fill(AGENT)
        page.get_by_role("button", name="Use key").click()
        page.wait_for_selector(f'tbody tr[data-tx="{tx}"]', timeout=30_000)
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.locator("#approve").wait_for(timeout=30_000)
        page.get_by_role("button", name="Preview commit").click()
        page.locator("#approve pre").wait_for(timeout=30_000)
        page.locator("#approver-key").fill(AGENT)  # the agent's own key: refused
        page.get_by_role("button", name="Approve this change").click()
        page.locator("#approve p.error").wait_for(timeout=30_000)
        page.locator("#approver-key").fill(APPROVER)
        page.get_by_role("button", name="Approve this change").click()
        page.locator("#approve p.ok").wait_for(timeout=30_000)
        receipt = page.locator("#approve p.ok").inner_text().split()[-1].rstrip(".")
        screenshot(page, "dashboard-approve-keys.png")
        assert client.commit(tx, receipt_id=receipt).committed
