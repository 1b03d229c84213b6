"""MCP over streamable HTTP: a key revoked by a reload of the key file ends the standalone
event stream (``GET /mcp``) it opened, within about a second of the SIGHUP, in a real
``agenttx serve --api-keys`` process; the key is refused (401) from then on. The stream of a
key the reload left alone goes on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2

from http_harness import http_base
from keyed_server import ENDED_WITHIN_S, Keyed, keyed_fixture  # noqa: F401 - the fixture
from server_process import start_server

PROTOCOL = "2025-06-18"  # an era whose client opens the standalone stream with GET /mcp


def _headers(auth: dict[str, str], session: str | None = None) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": PROTOCOL,
        **auth,
    }
    if session is not None:
        headers["mcp-session-id"] = session
    return headers


async def mcp_session(http: httpx2.AsyncClient, auth: dict[str, str]) -> str:
    """A new MCP session (initialize, then initialized) with the ``auth`` headers; its id."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "revocation-test", "version": "0"},
        },
    }
    reply = await http.post("/mcp", json=hello, headers=_headers(auth))
    assert reply.status_code == 200, reply.text
    session = reply.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    reply = await http.post("/mcp", json=done, headers=_headers(auth, session))
    assert reply.status_code == 202, reply.text
    return session


@asynccontextmanager
async def event_stream(
    http: httpx2.AsyncClient, auth: dict[str, str], session: str
) -> AsyncIterator[Any]:
    """The session's standalone event stream, open once this yields: its byte iterator."""
    headers = {**_headers(auth, session), "accept": "text/event-stream"}
    async with http.stream("GET", "/mcp", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        yield response.aiter_bytes()


async def ended(chunks: Any) -> None:
    """Read the stream until the server ends it."""
    async for _ in chunks:
        pass


async def test_a_revoked_key_ends_its_mcp_event_stream(keyed: Keyed) -> None:
    ann, ops = keyed.auth("ann"), keyed.auth("ops")
    anns = await mcp_session(keyed.http, ann)
    opss = await mcp_session(keyed.http, ops)
    async with (
        event_stream(keyed.http, ann, anns) as ann_chunks,
        event_stream(keyed.http, ops, opss) as ops_chunks,
    ):
        ann_ended = asyncio.create_task(ended(ann_chunks))
        ops_ended = asyncio.create_task(ended(ops_chunks))
        await asyncio.sleep(0.3)  # both streams open and waiting
        assert not ann_ended.done()
        people = {
            "ops": (keyed.secrets["ops"], "acme", "admin"),
            "vic": (keyed.secrets["vic"], "acme", "approver"),
        }
        sent = await asyncio.to_thread(keyed.reload, people)  # ann's key is gone
        await asyncio.wait_for(ann_ended, 30)
        assert time.monotonic() - sent < ENDED_WITHIN_S
        await asyncio.sleep(0.5)
        assert not ops_ended.done()  # a key the reload left alone keeps its stream
        ops_ended.cancel()
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    refused = await keyed.http.post("/mcp", json=listing, headers=_headers(ann, anns))
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "UNAUTHENTICATED"
    listed = await keyed.http.post("/mcp", json=listing, headers=_headers(ops, opss))
    assert listed.status_code == 200, listed.text


async def test_without_keys_the_event_stream_is_served_as_before(tmp_path: Path) -> None:
    """No key file: nothing can revoke, and ``GET /mcp`` opens its stream as it always did."""
    server = start_server(tmp_path / "data", env={"AGENTTX_HTTP_ADDR": "127.0.0.1:0"})
    with server.killed_on_error():
        async with httpx2.AsyncClient(base_url=http_base(server), timeout=30) as http:
            session = await mcp_session(http, {})
            async with event_stream(http, {}, session):
                pass
    assert server.terminate() == 0
