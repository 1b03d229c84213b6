"""Every long-lived event stream is counted in one count, per API key and in all, in a real
``agenttx serve``: gRPC ``WatchTransaction``, the HTTP event streams and MCP's standalone
``GET /mcp`` stream draw on the same allowance. Past a limit gRPC answers RESOURCE_EXHAUSTED
``TOO_MANY_SUBSCRIBERS`` with the retry hint in its trailing metadata, HTTP and MCP 503 with
``Retry-After``; a stream gives its slot back however it ends (the client cancels or leaves,
the server ends it, it fails)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest

from agenttx.auth.keys import new_secret
from agenttx.client import AsyncAgentTxClient
from agenttx.error_details import from_metadata
from agenttx.errors import TooManySubscribers
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import http_base
from keyed_server import Keyed, key_file
from server_process import start_server
from test_mcp_stream_revocation import _headers, mcp_session

PER_KEY, TOTAL = 3, 5


@dataclass
class Served:
    http: httpx2.AsyncClient
    stub: Any  # an async AgentTxService stub
    secrets: dict[str, str]  # name -> secret
    keyed: Keyed  # the same server, for reloads of its key file

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.secrets[name]}"}

    async def begin(self, name: str) -> str:
        reply = await self.http.post("/v1/transactions", json={}, headers=self.auth(name))
        assert reply.status_code == 200, reply.text
        return str(reply.json()["transaction_id"])


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    secrets = {name: new_secret() for name in ("ann", "bob", "cy")}
    keys = tmp_path / "keys.toml"
    keys.write_text(key_file({n: (s, "acme", "agent") for n, s in secrets.items()}))
    server = start_server(
        tmp_path / "data",
        "--api-keys",
        str(keys),
        env={
            "AGENTTX_HTTP_ADDR": "127.0.0.1:0",
            "AGENTTX_MAX_STREAMS": str(TOTAL),
            "AGENTTX_MAX_STREAMS_PER_KEY": str(PER_KEY),
        },
    )
    with server.killed_on_error():
        async with (
            httpx2.AsyncClient(base_url=http_base(server), timeout=30) as http,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
            yield Served(http, stub, secrets, Keyed(server, keys, secrets, http, channel))
    assert server.terminate() == 0


# ---------------------------------------------------------------------------- each surface


@dataclass
class Watch:
    """A gRPC ``WatchTransaction`` opened and read up to its first event, or its refusal."""

    call: Any
    error: grpc.aio.AioRpcError | None  # None: the stream is open

    async def refusal(self) -> tuple[grpc.StatusCode, str, str, dict[str, Any]]:
        assert self.error is not None, "the watch was admitted"
        reason, fields = from_metadata(self.error.trailing_metadata())
        return self.error.code(), self.error.details() or "", reason, fields


async def watch(s: Served, name: str, tx: str) -> Watch:
    call = s.stub.WatchTransaction(
        pb.WatchTransactionRequest(transaction_id=tx),
        metadata=(("authorization", f"Bearer {s.secrets[name]}"),),
    )
    try:
        first = await asyncio.wait_for(call.read(), 30)
    except grpc.aio.AioRpcError as exc:
        return Watch(call, exc)
    assert first.transaction_id == tx  # the current state comes first
    return Watch(call, None)


@dataclass
class Get:
    """MCP's ``GET /mcp`` on a session of its own: the stream, held open until closed."""

    status: int
    headers: dict[str, str]
    body: bytes  # a refusal's body; empty for an open stream
    close: Callable[[], Awaitable[None]]
    session: str = ""  # the MCP session the stream belongs to


async def mcp_get(s: Served, stack: contextlib.AsyncExitStack, name: str) -> Get:
    auth = s.auth(name)
    session = await mcp_session(s.http, auth)
    headers = {**_headers(auth, session), "accept": "text/event-stream"}
    inner = contextlib.AsyncExitStack()
    stack.push_async_callback(inner.aclose)
    response = await inner.enter_async_context(s.http.stream("GET", "/mcp", headers=headers))
    body = b"" if response.status_code == 200 else await response.aread()
    return Get(response.status_code, dict(response.headers), body, inner.aclose, session)


async def v1_events(s: Served, stack: contextlib.AsyncExitStack, name: str) -> Get:
    inner = contextlib.AsyncExitStack()
    stack.push_async_callback(inner.aclose)
    response = await inner.enter_async_context(
        s.http.stream("GET", "/v1/events", headers=s.auth(name))
    )
    body = b"" if response.status_code == 200 else await response.aread()
    return Get(response.status_code, dict(response.headers), body, inner.aclose)


def http_refused(reply: Get, says: str) -> None:
    assert reply.status == 503, reply.body
    assert reply.headers["retry-after"] == "5"
    error = json.loads(reply.body)["error"]
    assert (error["code"], error["reason"]) == ("RESOURCE_EXHAUSTED", "TOO_MANY_SUBSCRIBERS")
    assert says in error["message"]
    assert error["continuation"]["kind"] == "RetryRequest"


async def grpc_refused(w: Watch, says: str, per_key: bool, limit: int) -> None:
    code, message, reason, fields = await w.refusal()
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason == "TOO_MANY_SUBSCRIBERS"
    assert fields == {"limit": limit, "per_key": per_key, "retry_after_ms": 5000}
    assert says in message
    assert "try again in 5 s" in message


async def eventually(opened: Callable[[], Awaitable[bool]]) -> None:
    """``opened()`` is true within 10 s: a closed stream's slot is given back as soon as the
    server sees it end, a moment after the client."""
    deadline = time.monotonic() + 10
    while not await opened():
        assert time.monotonic() < deadline, "the slot was not given back"
        await asyncio.sleep(0.1)


KEY_FULL = f"this API key has {PER_KEY} event streams open, its limit"
SERVER_FULL = f"{TOTAL} event streams are open, the server's limit"


# ---------------------------------------------------------------------------- the tests


async def test_grpc_watches_are_capped_per_key_and_give_their_slot_back(served: Served) -> None:
    s = served
    tx = await s.begin("ann")
    held = [await watch(s, "ann", tx) for _ in range(PER_KEY)]
    assert [w.error for w in held] == [None] * PER_KEY
    await grpc_refused(await watch(s, "ann", tx), KEY_FULL, True, PER_KEY)
    # The Python client raises the typed error at once (RESOURCE_EXHAUSTED is not retried).
    async with AsyncAgentTxClient(s.keyed.server.address, api_key=s.secrets["ann"]) as client:
        with pytest.raises(TooManySubscribers) as refused:
            await anext(aiter(client.watch(tx)))
    assert (refused.value.limit, refused.value.per_key, refused.value.retry_after_ms) == (
        PER_KEY,
        True,
        5000,
    )

    # The client cancels one: its slot is free again.
    held.pop().call.cancel()

    async def admitted() -> bool:
        w = await watch(s, "ann", tx)
        if w.error is None:
            held.append(w)
        return w.error is None

    await eventually(admitted)
    # The server ends them (the transaction commits): every slot comes back.
    done = await s.http.post(f"/v1/transactions/{tx}/commit", json={}, headers=s.auth("ann"))
    assert done.status_code == 200, done.text
    for w in held:  # each reads to its end
        while await asyncio.wait_for(w.call.read(), 30) is not grpc.aio.EOF:
            pass
    other = await s.begin("ann")
    await eventually(lambda: _opens_all(s, "ann", other, PER_KEY))

    # A watch that fails (no such transaction) gives its slot back too: more of them than
    # the key's share are each refused NOT_FOUND, not TOO_MANY_SUBSCRIBERS.
    failed, deadline = 0, time.monotonic() + 10
    while failed <= PER_KEY:
        w = await watch(s, "ann", "tx_nope")
        assert w.error is not None
        if w.error.code() == grpc.StatusCode.NOT_FOUND:
            failed += 1
        else:  # the cancels above not seen yet
            assert w.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "a failed watch kept its slot"
            await asyncio.sleep(0.1)
    await eventually(lambda: _opens_all(s, "ann", other, PER_KEY))


async def _opens_all(s: Served, name: str, tx: str, n: int) -> bool:
    """``n`` watches of ``name`` open at once (then cancelled)."""
    opened = [await watch(s, name, tx) for _ in range(n)]
    for w in opened:
        w.call.cancel()
    ok = all(w.error is None for w in opened)
    if ok:  # let the server see the cancels before the next check
        await asyncio.sleep(0.2)
    return ok


async def test_mcp_get_streams_are_capped_per_key_and_give_their_slot_back(
    served: Served,
) -> None:
    s = served
    async with contextlib.AsyncExitStack() as stack:
        held = [await mcp_get(s, stack, "ann") for _ in range(PER_KEY)]
        assert [g.status for g in held] == [200] * PER_KEY
        assert held[0].headers["content-type"].startswith("text/event-stream")
        http_refused(await mcp_get(s, stack, "ann"), KEY_FULL)
        # A POST to /mcp is a request and its reply, not a stream: never counted.
        await mcp_session(s.http, s.auth("ann"))

        await held[0].close()  # the client leaves

        async def admitted() -> bool:
            return (await mcp_get(s, stack, "ann")).status == 200

        await eventually(admitted)
        # The server ends one: the client deletes its session, which ends its stream.
        deleted = await s.http.delete("/mcp", headers=_headers(s.auth("ann"), held[1].session))
        assert deleted.status_code == 200, deleted.text
        await eventually(admitted)


async def test_every_surface_counts_in_one_allowance(served: Served) -> None:
    s = served
    tx = await s.begin("ann")
    async with contextlib.AsyncExitStack() as stack:
        # ann: two gRPC watches and an MCP stream fill the key's share...
        watches = [await watch(s, "ann", tx) for _ in range(2)]
        assert [w.error for w in watches] == [None, None]
        assert (await mcp_get(s, stack, "ann")).status == 200
        # ...so no surface admits one more of hers.
        await grpc_refused(await watch(s, "ann", tx), KEY_FULL, True, PER_KEY)
        http_refused(await mcp_get(s, stack, "ann"), KEY_FULL)
        http_refused(await v1_events(s, stack, "ann"), KEY_FULL)

        # bob has a share of his own until the server's total is reached, by any surface.
        bob_tx = await s.begin("bob")
        assert (await v1_events(s, stack, "bob")).status == 200
        bobs_mcp = await mcp_get(s, stack, "bob")
        assert bobs_mcp.status == 200
        await grpc_refused(await watch(s, "bob", bob_tx), SERVER_FULL, False, TOTAL)
        http_refused(await mcp_get(s, stack, "bob"), SERVER_FULL)
        http_refused(await v1_events(s, stack, "bob"), SERVER_FULL)

        # An MCP stream that closes frees a slot a gRPC watch can take, and a cancelled
        # gRPC watch one an MCP stream can.
        await bobs_mcp.close()
        bob_watch: list[Watch] = []

        async def watch_admitted() -> bool:
            w = await watch(s, "bob", bob_tx)
            bob_watch.append(w)
            return w.error is None

        await eventually(watch_admitted)
        watches[0].call.cancel()

        async def mcp_admitted() -> bool:
            return (await mcp_get(s, stack, "ann")).status == 200

        await eventually(mcp_admitted)
        for w in (*watches, *bob_watch):
            w.call.cancel()


async def test_streams_ended_by_a_revoked_key_give_their_slots_back(served: Served) -> None:
    s = served
    tx, bob_tx = await s.begin("ann"), await s.begin("bob")
    async with contextlib.AsyncExitStack() as stack:
        # ann holds her share on two surfaces, bob the rest of the server's total.
        anns = [await watch(s, "ann", tx) for _ in range(PER_KEY - 1)]
        assert [w.error for w in anns] == [None] * (PER_KEY - 1)
        assert (await mcp_get(s, stack, "ann")).status == 200
        bobs = [await watch(s, "bob", bob_tx) for _ in range(TOTAL - PER_KEY)]
        assert [w.error for w in bobs] == [None] * (TOTAL - PER_KEY)
        await grpc_refused(await watch(s, "bob", bob_tx), SERVER_FULL, False, TOTAL)

        # A reload removes ann's key: her streams end, and their slots are free for others:
        # all three of them (bob's last share and two of cy's), then the total holds again.
        people = {name: (s.secrets[name], "acme", "agent") for name in ("bob", "cy")}
        await asyncio.to_thread(s.keyed.reload, people)
        for w in anns:
            assert await read_to_end(w) == grpc.StatusCode.UNAUTHENTICATED
        cy_tx = await s.begin("cy")
        more: list[Watch] = []

        async def admitted(name: str, tx: str) -> bool:
            more.append(await watch(s, name, tx))
            return more[-1].error is None

        await eventually(lambda: admitted("bob", bob_tx))
        await eventually(lambda: admitted("cy", cy_tx))
        await eventually(lambda: admitted("cy", cy_tx))
        await grpc_refused(await watch(s, "cy", cy_tx), SERVER_FULL, False, TOTAL)
        for w in (*bobs, *more):
            w.call.cancel()


async def read_to_end(w: Watch) -> grpc.StatusCode:
    """Read ``w`` until it ends; the status it ended with."""
    try:
        while await asyncio.wait_for(w.call.read(), 30) is not grpc.aio.EOF:
            pass
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK
