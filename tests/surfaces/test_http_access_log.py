"""Every HTTP request to a real ``agenttx serve --http-addr`` leaves one access line (issue 22
point 2.3), as every gRPC call does: ``/v1`` and ``/mcp``, served or refused (by the route,
the key check or the Host guard), with method, path, status, duration and the key's
principal, each field capped like every other log field."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.logs import MAX_LOG_FIELD_BYTES
from http_harness import http_base, request, start_http_server
from mcp_harness import initialize
from server_process import ServerProcess, start_server

SECRET = new_secret()
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("access")
    keys = root / "keys.toml"
    keys.write_text(
        f'[[key]]\nhash = "{hash_secret(SECRET)}"\nprincipal = "ops-alice"\n'
        'tenant = "acme"\nroles = ["admin"]\n'
    )
    proc = start_http_server(root / "data", "--api-keys", str(keys))
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def _auth() -> dict[str, str]:
    return {"authorization": f"Bearer {SECRET}"}


def access_lines(server: ServerProcess, path: str, count: int = 1) -> list[dict[str, Any]]:
    """The access records of ``path``, once ``count`` of them are written (a line is written
    when its response ends, a moment after the client has it)."""
    deadline = time.monotonic() + 30
    while True:
        lines = [
            r
            for r in server.log_records()
            if r.get("logger") == "agenttx.access" and r.get("path") == path
        ]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_a_v1_call_leaves_one_line_with_its_method_path_status_time_and_principal(
    server: ServerProcess,
) -> None:
    base = http_base(server)
    begun = request(base, "POST", "/v1/transactions", {"agent_id": "logged"}, headers=_auth())
    assert begun.status == 200, begun.raw
    tx = begun.json["transaction_id"]
    read = request(base, "GET", f"/v1/transactions/{tx}", headers=_auth())
    assert read.status == 200
    [line] = access_lines(server, f"/v1/transactions/{tx}")
    assert line["level"] == "info"
    assert line["msg"] == f"GET /v1/transactions/{tx} 200"
    assert (line["method"], line["status"], line["principal"]) == ("GET", 200, "ops-alice")
    assert isinstance(line["duration_ms"], float)
    assert line["duration_ms"] >= 0
    # A refusal by the route: a warning, with the key's principal all the same.
    missing = request(base, "GET", "/v1/transactions/tx_nope", headers=_auth())
    assert missing.status == 404
    [refused] = access_lines(server, "/v1/transactions/tx_nope")
    assert (refused["level"], refused["status"], refused["principal"]) == (
        "warning",
        404,
        "ops-alice",
    )


def test_requests_refused_before_any_route_have_their_line_too(server: ServerProcess) -> None:
    base = http_base(server)
    # No key: refused by the key check, so there is no principal to name.
    assert request(base, "GET", "/v1/tools").status == 401
    # A Host that is not allowed: refused by the guard, before the key check.
    assert request(base, "GET", "/v1/effects", headers={"host": "evil.example"}).status == 421
    [no_key] = access_lines(server, "/v1/tools")
    assert (no_key["status"], no_key["principal"], no_key["level"]) == (401, "", "warning")
    [bad_host] = access_lines(server, "/v1/effects")
    assert bad_host["status"] == 421


def test_an_mcp_request_leaves_one_line_per_request(server: ServerProcess) -> None:
    base = http_base(server)
    before = len(access_lines(server, "/mcp", 0))
    hello = request(
        base, "POST", "/mcp", initialize("2025-06-18"), headers={**MCP_HEADERS, **_auth()}
    )
    assert hello.status == 200, hello.raw
    session = hello.headers["mcp-session-id"]
    done = request(
        base,
        "POST",
        "/mcp",
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={**MCP_HEADERS, **_auth(), "mcp-session-id": session},
    )
    assert done.status == 202
    lines = access_lines(server, "/mcp", before + 2)[before:]
    assert [(r["method"], r["status"], r["principal"]) for r in lines] == [
        ("POST", 200, "ops-alice"),
        ("POST", 202, "ops-alice"),
    ]


def test_a_long_path_is_capped_in_the_line(server: ServerProcess) -> None:
    long_id = "tx_" + "\u00e9" * 2000  # 4 KB of UTF-8
    path = f"/v1/transactions/{long_id}"
    # Sent percent-encoded (24 KB on the wire); the server's path is the decoded text.
    reply = request(http_base(server), "GET", quote(path), headers=_auth())
    assert reply.status in (400, 404), reply.raw
    capped = path[:100]  # the line holds a prefix of the path and its size
    deadline = time.monotonic() + 30
    while True:
        lines = [
            r
            for r in server.log_records()
            if r.get("logger") == "agenttx.access" and r.get("path", "").startswith(capped)
        ]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    [line] = lines
    written = json.dumps(line["path"], ensure_ascii=False).encode()
    assert len(written) <= MAX_LOG_FIELD_BYTES + 2  # the value and its quotes
    assert line["path"].endswith(f"… ({len(path.encode())} bytes)")
    assert len(json.dumps(line["msg"], ensure_ascii=False).encode()) < 2 * MAX_LOG_FIELD_BYTES


def test_text_logs_show_the_access_line_readably(tmp_path: Path) -> None:
    proc = start_server(
        tmp_path / "data", env={"AGENTTX_HTTP_ADDR": "127.0.0.1:0"}, log_format="text"
    )
    with proc.killed_on_error():
        url = next(
            line.split(" MCP HTTP ")[1].split()[0]
            for line in proc.log_text().splitlines()
            if " MCP HTTP " in line
        )
        base = url.removesuffix("/mcp")
        assert request(base, "POST", "/v1/transactions", {}).status == 200
        deadline = time.monotonic() + 30
        while "agenttx.access POST /v1/transactions 200" not in proc.log_text():
            assert time.monotonic() < deadline, proc.log_text()[-2000:]
            time.sleep(0.05)
    assert proc.terminate() == 0
    [line] = [ln for ln in proc.log_text().splitlines() if "agenttx.access" in ln]
    # The message shows method, path and status; the rest follow as key=value. Without API
    # keys there is no principal: the field is empty.
    assert " INFO  agenttx.access POST /v1/transactions 200 duration_ms=" in line
    assert line.endswith(' principal=""')
