"""The dashboard in headless Chromium against a real ``agenttx serve --http-addr``: it shows a
transaction a gRPC client runs, live; a transaction's page shows the failing step's root
cause in the graph; the preview-and-approve screen approves the receipt of an
approval_required transaction, which then commits with it; the page is keyboard-usable.
Screenshots are saved and checked non-blank."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.client import AgentTxClient
from browser_harness import CHROMIUM_ARGS, chromium, distinct_colours, save_screenshot
from http_harness import http_base, start_http_server
from server_process import ServerProcess

playwright_sync = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_http_server(tmp_path_factory.mktemp("dash") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    binary = chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with playwright_sync.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(binary),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1366, "height": 860},  # a laptop screen
            # Playwright's 30 s default is too short for Chromium's first start on a busy
            # 2-core machine (the suite's setup errored there once); a healthy start takes ~1 s.
            timeout=180_000,
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert errors == [], errors


def screenshot(page: Any, name: str) -> Path:
    png = page.screenshot(full_page=True)
    path = save_screenshot(png, name)
    assert distinct_colours(png) >= 8, f"{path} looks blank"
    return path


def test_the_list_shows_a_transaction_a_client_runs_live(server: ServerProcess, page: Any) -> None:
    page.goto(http_base(server) + "/")
    page.wait_for_selector("#live.on")  # the event stream is open
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="live-agent")
        row = page.locator(f'tr[data-tx="{tx.transaction_id}"]')
        row.wait_for(timeout=30_000)  # appeared without a reload
        assert "ACTIVE" in row.inner_text()
        assert "live-agent" in row.inner_text()
        client.execute_step(tx.transaction_id, 1, "kv.put", {"key": "dash", "value": 1})
        client.commit(tx.transaction_id)
    page.locator(f'tr[data-tx="{tx.transaction_id}"] .s-committed').wait_for(timeout=30_000)
    # Newest first: the row just made is the first.
    assert page.locator("tbody tr").first.get_attribute("data-tx") == tx.transaction_id
    screenshot(page, "dashboard-list.png")


def test_a_transaction_page_shows_the_root_cause_of_a_failure(
    server: ServerProcess, page: Any
) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="failing").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
        client.execute_step(tx, 2, "kv.put", {"key": "note", "value": "x"})
        failed = client.execute_step(
            tx, 3, "record.get", {"table": "users", "id": "${steps.1.value.id}"}
        )
        assert failed.rollback_to_step == 1
        page.goto(http_base(server) + f"/#/tx/{tx}")
        root = page.locator("#graph .node.root-cause")
        root.wait_for(timeout=30_000)
        assert root.get_attribute("data-step") == "1"
        assert "root cause: id" in (root.text_content() or "")
        assert page.locator("#graph path.edge.root").count() == 1
        assert page.locator("#timeline path.arc").count() == 1  # the rewind, 3 → 1
        failure = page.locator("#failures li.failure").inner_text()
        assert "Step 3" in failure
        assert "DEPENDENCY_JUMP" in failure
        assert "root cause: step 1" in failure
        assert "intact" in page.locator("#audit").inner_text()
        attempts = page.locator("#timeline g.attempt").count()
        # Live: the page redraws when the client runs the next step.
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
        page.wait_for_function(
            f"document.querySelectorAll('#timeline g.attempt').length > {attempts}",
            timeout=30_000,
        )
    screenshot(page, "dashboard-transaction.png")


def test_the_approve_screen_approves_a_receipt_and_the_page_explains_itself(
    server: ServerProcess, page: Any
) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(
            agent_id="approver", principal="alice", mode="approval_required"
        ).transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "limit", "value": 500})
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.locator("#approve").wait_for(timeout=30_000)
        page.get_by_role("button", name="Preview commit").click()
        page.locator("#approve pre").wait_for(timeout=30_000)
        assert "limit" in page.locator("#approve pre").inner_text()  # the exact change
        page.locator("#approver-key").fill("bob")  # another principal than alice
        page.get_by_role("button", name="Approve this change").click()
        page.locator("#approve p.ok").wait_for(timeout=30_000)
        receipt = page.locator("#approve p.ok").inner_text().split()[-1].rstrip(".")
        screenshot(page, "dashboard-approve.png")
        # The approved receipt is what the commit needs, once.
        committed = client.commit(tx, receipt_id=receipt)
        assert committed.committed
    page.goto(http_base(server) + f"/#/tx/{tx}")
    page.locator("#timeline").wait_for(timeout=30_000)
    page.locator(".about summary").click()
    assert "transactional" in page.locator(".about").inner_text()
    # Keyboard: Backspace goes back to the list, "/" focuses a filter, Tab reaches the rows.
    page.locator("body").click()
    page.keyboard.press("Backspace")
    page.locator("#f-agent").wait_for()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "f-agent"
    page.keyboard.type("approver")
    page.wait_for_function("document.querySelectorAll('tbody tr').length === 1", timeout=30_000)
    for _ in range(6):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.tagName") == "A" and tx in page.evaluate(
            "document.activeElement.href"
        ):
            break
    else:
        pytest.fail("Tab never reached the transaction's link")
    page.keyboard.press("Enter")
    page.locator("#timeline").wait_for(timeout=30_000)
    assert tx in page.url


def test_the_list_filters_by_tenant(server: ServerProcess, page: Any) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="tenant-filter").transaction_id
    page.goto(http_base(server) + "/")
    page.locator("#f-tenant").wait_for(timeout=30_000)
    page.locator("#f-agent").fill("tenant-filter")
    page.locator("#f-tenant").fill("default")  # a keyless server's transactions are default's
    page.wait_for_function(
        f"document.querySelector('tbody tr[data-tx=\"{tx}\"]') !== null", timeout=30_000
    )
    assert "default" in page.locator(f'tbody tr[data-tx="{tx}"]').inner_text()
    page.locator("#f-tenant").fill("no-such-tenant")
    page.wait_for_function("document.querySelectorAll('tbody tr').length === 0", timeout=30_000)


def _stream_opens(page: Any, tx: str) -> list[str]:
    """The URLs of the requests the page makes for ``tx``'s event stream, as they happen."""
    opened: list[str] = []
    page.on("request", lambda r: opened.append(r.url) if f"{tx}/events" in r.url else None)
    return opened


# Longer than a browser's wait before it reconnects a closed event stream (Chromium: 3 s).
RECONNECT_WINDOW_MS = 7_000


def test_an_ended_transactions_page_shows_its_end_and_stops_listening(
    server: ServerProcess, page: Any
) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="ending").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "end", "value": 1})
        opened = _stream_opens(page, tx)
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.wait_for_selector("#live.on")  # live while the transaction runs
        client.commit(tx)
    # The last event redraws the final state, and the page stops listening.
    page.locator(".facts .s-committed").wait_for(timeout=30_000)
    page.wait_for_function(
        "document.getElementById('live').textContent === 'ended'", timeout=30_000
    )
    streams = len(opened)
    page.wait_for_timeout(RECONNECT_WINDOW_MS)
    assert page.locator("#live").inner_text() == "ended"
    assert len(opened) == streams, opened  # no reconnection
    assert page.locator("text=Abort this transaction").count() == 0

    # Opened after the end: the final state, and no stream at all.
    page.goto(http_base(server) + "/")
    page.wait_for_selector("#live.on")
    page.goto(http_base(server) + f"/#/tx/{tx}")
    page.locator(".facts .s-committed").wait_for(timeout=30_000)
    page.wait_for_function(
        "document.getElementById('live').textContent === 'ended'", timeout=30_000
    )
    before = len(opened)
    page.wait_for_timeout(RECONNECT_WINDOW_MS)
    assert len(opened) == before, opened
    assert page.locator("#live").inner_text() == "ended"


def test_a_plain_event_source_stops_once_an_ended_transaction_was_seen(
    server: ServerProcess, page: Any
) -> None:
    """Not only the dashboard: any page's EventSource on an ended transaction gets its last
    state once, then the server's 204 on the reconnection closes it for good."""
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="plain-es").transaction_id
        client.rollback(tx)
    page.goto(http_base(server) + "/openapi.json")  # any page of the server's origin
    seen = page.evaluate(
        """(path) => new Promise((resolve) => {
            const statuses = [];
            const source = new EventSource(path);
            source.addEventListener("transaction", (m) => statuses.push(JSON.parse(m.data).status));
            source.onerror = () => {
                if (source.readyState === EventSource.CLOSED) resolve({ statuses, closed: true });
            };
            setTimeout(() => { source.close(); resolve({ statuses, closed: false }); }, 15000);
        })""",
        f"/v1/transactions/{tx}/events",
    )
    assert seen == {"statuses": ["ROLLED_BACK"], "closed": True}


def test_each_try_has_its_own_box_and_the_root_cause_keeps_its_tool(
    server: ServerProcess, page: Any
) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="tries").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
        client.execute_step(tx, 2, "kv.put", {"key": "note", "value": "x"})
        client.execute_step(tx, 3, "record.get", {"table": "users", "id": "${steps.1.value.id}"})
        # After the rewind to step 1: steps 1 and 2 again.
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
        client.execute_step(tx, 2, "kv.put", {"key": "note", "value": "y"})
    page.goto(http_base(server) + f"/#/tx/{tx}")
    page.wait_for_function(
        "document.querySelectorAll('#timeline g.attempt').length === 5", timeout=30_000
    )
    boxes = page.eval_on_selector_all(
        "#timeline g.attempt", "gs => gs.map(g => g.querySelector('text.label').textContent)"
    )
    assert [b.split()[0] for b in boxes] == ["#1.1", "#2.1", "#3.1", "#1.2", "#2.2"]
    root = page.locator("#graph .node.root-cause")
    assert root.get_attribute("data-step") == "1"
    texts = root.locator("text").all_text_contents()
    assert texts == ["step 1", "kv.put", "root cause: id"]
    # Every line of every node lies inside its box: nothing is cut off at the edge.
    outside = page.eval_on_selector_all(
        "#graph g.node",
        """gs => gs.flatMap(g => {
            const box = g.querySelector('rect').getBBox();
            return [...g.querySelectorAll('text')].filter(t => {
                const b = t.getBBox();
                return b.x + b.width > box.x + box.width || b.y + b.height > box.y + box.height;
            }).map(t => t.textContent);
        })""",
    )
    assert outside == []
    screenshot(page, "dashboard-tries.png")


def test_the_approve_screen_shows_only_where_a_commit_needs_approval(
    server: ServerProcess, page: Any, tmp_path: Path
) -> None:
    with AgentTxClient(server.address) as client:
        plain = client.begin(agent_id="no-approval").transaction_id
        trusted = client.begin(agent_id="trusted", mode="autonomous_trusted").transaction_id
        asked = client.begin(agent_id="asked", principal="alice", mode="approval_required")
    for tx in (plain, trusted):
        page.goto(http_base(server) + f"/#/tx/{tx}")
        page.locator("#timeline").wait_for(timeout=30_000)
        assert page.locator("#approve").count() == 0, tx
    page.goto(http_base(server) + f"/#/tx/{asked.transaction_id}")
    page.locator("#approve").wait_for(timeout=30_000)
    assert "mode approval_required" in page.locator("#approve").inner_text()

    # The policy file's rule: the screen appears, live, once a step makes it ask.
    policy = tmp_path / "policy.toml"
    policy.write_text('[approval]\ntools = ["kv.delete"]\n')
    strict = start_http_server(tmp_path / "data", "--policy", str(policy))
    with strict.killed_on_error(), AgentTxClient(strict.address) as client:
        tx = client.begin(agent_id="policy").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
        page.goto(http_base(strict) + f"/#/tx/{tx}")
        page.wait_for_selector("#live.on")
        page.locator("#timeline").wait_for(timeout=30_000)
        assert page.locator("#approve").count() == 0
        client.execute_step(tx, 2, "kv.delete", {"key": "k"})
        page.locator("#approve").wait_for(timeout=30_000)
        assert "policy: tool 'kv.delete' needs approval" in page.locator("#approve").inner_text()
        screenshot(page, "dashboard-approve-policy.png")
    assert strict.terminate() == 0
