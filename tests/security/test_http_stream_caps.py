"""Every HTTP event stream is counted, per API key and in all, in a real ``agenttx serve``:
one key cannot hold thousands of ``GET /v1/transactions/{id}/events`` open (each one a watch
and a socket), and past the server's total a new stream of any key waits. A refused stream is
503 ``TOO_MANY_SUBSCRIBERS`` with ``Retry-After``; a closed stream gives its slot back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agenttx.auth.keys import new_secret
from http_harness import http_base
from keyed_server import key_file
from server_process import start_server

PER_KEY, TOTAL = 3, 5


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes  # the first frame of a stream, the whole body of a refusal
    writer: asyncio.StreamWriter

    def json(self) -> Any:
        return json.loads(self.body)

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, str]]]:
    secrets = {name: new_secret() for name in ("ann", "bob")}
    keys = tmp_path / "keys.toml"
    keys.write_text(key_file({n: (s, "acme", "agent") for n, s in secrets.items()}))
    server = start_server(
        tmp_path / "data",
        "--api-keys",
        str(keys),
        env={
            "AGENTTX_HTTP_ADDR": "127.0.0.1:0",
            # The settings' first names, kept as aliases of --max-streams[-per-key].
            "AGENTTX_HTTP_MAX_STREAMS": str(TOTAL),
            "AGENTTX_HTTP_MAX_STREAMS_PER_KEY": str(PER_KEY),
        },
    )
    with server.killed_on_error():
        yield http_base(server), secrets
        text = server.log_text()
        assert not any(secret in text for secret in secrets.values())
    assert server.terminate() == 0


async def _open(stack: contextlib.AsyncExitStack, base: str, path: str, secret: str) -> Reply:
    """A stream on a connection of its own, held open until ``stack`` closes (one socket per
    stream, as browsers and SSE clients do); its status, headers and first bytes."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    reply = Reply(0, {}, b"", writer)
    stack.push_async_callback(reply.aclose)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {secret}\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    status_line, *lines = head.decode().split("\r\n")
    reply.status = int(status_line.split()[1])
    reply.headers = {
        k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)
    }
    if "content-length" in reply.headers:
        reply.body = await reader.readexactly(int(reply.headers["content-length"]))
    else:  # chunked: the first chunk is the stream's ": connected"
        await reader.readline()
        reply.body = await asyncio.wait_for(reader.readline(), 30)
    return reply


def _refused(reply: Reply, says: str) -> None:
    assert reply.status == 503, reply.body
    assert reply.headers["retry-after"] == "5"
    error = reply.json()["error"]
    assert (error["code"], error["reason"]) == ("RESOURCE_EXHAUSTED", "TOO_MANY_SUBSCRIBERS")
    assert says in error["message"]


async def test_streams_are_capped_per_key_and_in_all(served: tuple[str, dict[str, str]]) -> None:
    base, secrets = served
    ann, bob = secrets["ann"], secrets["bob"]
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        begun = await http.post(
            "/v1/transactions", json={}, headers={"authorization": f"Bearer {ann}"}
        )
    assert begun.status_code == 200, begun.text
    one = f"/v1/transactions/{begun.json()['transaction_id']}/events"

    async with contextlib.AsyncExitStack() as stack:
        held = [await _open(stack, base, one, ann) for _ in range(PER_KEY)]
        assert [r.status for r in held] == [200] * PER_KEY
        assert held[0].body.startswith(b": connected")
        # The key's limit holds for both kinds of stream.
        _refused(await _open(stack, base, one, ann), f"has {PER_KEY} event streams open")
        _refused(await _open(stack, base, "/v1/events", ann), "its limit")
        # Another key has its own share, until the server's total is reached.
        for _ in range(TOTAL - PER_KEY):
            assert (await _open(stack, base, "/v1/events", bob)).status == 200
        _refused(
            await _open(stack, base, "/v1/events", bob),
            f"{TOTAL} event streams are open, the server's limit",
        )

        # A stream that closes gives its slot back (the server sees the socket close a moment
        # later): the key may open one again.
        await held[0].aclose()
        deadline = time.monotonic() + 10
        while True:
            async with contextlib.AsyncExitStack() as again:
                if (await _open(again, base, one, ann)).status == 200:
                    break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)

    # Every stream closed: the whole allowance is back.
    deadline = time.monotonic() + 10
    while True:
        async with contextlib.AsyncExitStack() as stack:
            replies = [await _open(stack, base, "/v1/events", ann) for _ in range(PER_KEY)]
            if all(r.status == 200 for r in replies):
                break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
