"""A key revoked by a reload of the key file ends the streams it opened, in a real
``agenttx serve --api-keys`` process: gRPC ``WatchTransaction`` fails UNAUTHENTICATED, each
HTTP event stream (``/v1/transactions/{id}/events``, ``/v1/events``) sends one last
``event: error`` in the ``/v1`` error shape and closes, within about a second of the SIGHUP.
Streams of keys the reload left alone go on; a key moved to another tenant, or stripped of the
role that let it read, ends the per-transaction streams with what a new one would get
(NOT_FOUND, PERMISSION_DENIED) while ``/v1/events`` goes on with what the key may read now.
A reload that fails, or leaves a key as it was, does not reach that key's grant."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from agenttx.auth.keys import KeyRing, new_secret
from agenttx.errors import Unauthenticated
from keyed_server import ENDED_WITHIN_S, Keyed, key_file, keyed_fixture  # noqa: F401


class Sse:
    """One open event stream, read as ``(event, data)`` pairs."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines

    async def next(self) -> tuple[str, Any] | None:
        """The next event, or None once the server closed the stream."""
        event, data = "message", ""
        async for line in self._lines:
            if line.startswith(":"):
                continue  # a comment: connected, keepalive
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                data += line.removeprefix("data:").strip()
            elif not line and data:
                return event, json.loads(data)
        return None


@asynccontextmanager
async def sse(keyed: Keyed, name: str, path: str) -> AsyncIterator[Sse]:
    """``path``'s event stream with ``name``'s key; open (and subscribed) once this yields."""
    headers = {"accept": "text/event-stream", **keyed.auth(name)}
    async with keyed.http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Sse(response.aiter_lines())


async def transaction_event(stream: Sse) -> dict[str, Any]:
    """The stream's next event, which must be a transaction's (within 30 s)."""
    got = await asyncio.wait_for(stream.next(), 30)
    assert got is not None, "the stream closed"
    assert got[0] == "transaction", got
    return dict(got[1])


async def grpc_refusal(call: Any) -> grpc.StatusCode:
    """How a gRPC watch ends after its first event (the current state): its status code."""
    first = await call.read()
    assert first is not grpc.aio.EOF
    try:
        while (event := await call.read()) is not grpc.aio.EOF:
            raise AssertionError(f"an event after the reload: {event}")
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def sse_refusal(stream: Sse) -> dict[str, Any]:
    """The ``error`` event a stream ended with (its events before it skipped); the stream
    must close right after it."""
    while (got := await stream.next()) is not None:
        event, data = got
        if event == "error":
            assert await stream.next() is None, "the stream went on after its error event"
            return dict(data)
    raise AssertionError("the stream closed without an error event")


def assert_error(body: dict[str, Any], code: str) -> None:
    error = body["error"]
    assert set(error) == {"code", "reason", "message", "details", "continuation"}
    assert error["code"] == code
    assert error["message"]
    assert error["continuation"]["kind"]


def ended_in_time(sent: float) -> None:
    assert time.monotonic() - sent < ENDED_WITHIN_S


async def test_a_revoked_key_ends_its_streams_and_only_its_own(keyed: Keyed) -> None:
    tx = (await keyed.post("ann", "/v1/transactions"))["transaction_id"]
    anns_watch, ops_watch = keyed.watch("ann", tx), keyed.watch("ops", tx)
    async with (
        sse(keyed, "ann", f"/v1/transactions/{tx}/events") as anns_tx,
        sse(keyed, "ann", "/v1/events") as anns_all,
        sse(keyed, "ops", f"/v1/transactions/{tx}/events") as ops_tx,
        sse(keyed, "ops", "/v1/events") as ops_all,
    ):
        for stream in (anns_tx, ops_tx):
            await transaction_event(stream)
        assert (await ops_watch.read()).transaction_id == tx

        grpc_ended = asyncio.create_task(grpc_refusal(anns_watch))
        tx_ended = asyncio.create_task(sse_refusal(anns_tx))
        all_ended = asyncio.create_task(sse_refusal(anns_all))
        await asyncio.sleep(0.3)  # every stream is past its first event and waiting
        sent = await asyncio.to_thread(
            keyed.reload,
            {  # ann's key is gone; ops and vic stay as they were
                "ops": (keyed.secrets["ops"], "acme", "admin"),
                "vic": (keyed.secrets["vic"], "acme", "approver"),
            },
        )
        assert await asyncio.wait_for(grpc_ended, ENDED_WITHIN_S) is (
            grpc.StatusCode.UNAUTHENTICATED
        )
        for ended in (tx_ended, all_ended):
            body = await asyncio.wait_for(ended, ENDED_WITHIN_S)
            assert_error(body, "UNAUTHENTICATED")
            assert "revoked" in body["error"]["message"]
        ended_in_time(sent)

        # The key cannot open a new stream either.
        refused = await keyed.http.get(f"/v1/transactions/{tx}/events", headers=keyed.auth("ann"))
        assert refused.status_code == 401

        # ops' streams were untouched by the reload: they see the commit, then end as usual.
        await keyed.post("ops", f"/v1/transactions/{tx}/commit")
        assert (await transaction_event(ops_tx))["status"] == "COMMITTED"
        assert await ops_tx.next() is None
        kinds = []
        while not kinds or kinds[-1] != "commit":
            kinds.append((await transaction_event(ops_all))["kind"])
        statuses = []
        while (e := await asyncio.wait_for(ops_watch.read(), 30)) is not grpc.aio.EOF:
            statuses.append(e.status)
        assert statuses[-1] == "COMMITTED"
        assert await ops_watch.code() is grpc.StatusCode.OK


async def test_a_key_that_may_no_longer_read_ends_the_transactions_streams(
    keyed: Keyed,
) -> None:
    tx = (await keyed.post("ann", "/v1/transactions"))["transaction_id"]
    anns_watch, vics_watch = keyed.watch("ann", tx), keyed.watch("vic", tx)
    async with (
        sse(keyed, "ann", f"/v1/transactions/{tx}/events") as anns_tx,
        sse(keyed, "vic", f"/v1/transactions/{tx}/events") as vics_tx,
        sse(keyed, "ann", "/v1/events") as anns_all,
    ):
        for stream in (anns_tx, vics_tx):
            await transaction_event(stream)
        ann_grpc = asyncio.create_task(grpc_refusal(anns_watch))
        vic_grpc = asyncio.create_task(grpc_refusal(vics_watch))
        ann_sse = asyncio.create_task(sse_refusal(anns_tx))
        vic_sse = asyncio.create_task(sse_refusal(vics_tx))
        await asyncio.sleep(0.3)
        sent = await asyncio.to_thread(
            keyed.reload,
            {  # the same secrets: ann moved to another tenant, vic is an approver no more
                "ann": (keyed.secrets["ann"], "globex", "agent"),
                "ops": (keyed.secrets["ops"], "acme", "admin"),
                "vic": (keyed.secrets["vic"], "acme", "agent"),
            },
        )
        # What a new stream of that key would be told: another tenant's transaction does not
        # exist; another principal's needs a role the key lost.
        assert await asyncio.wait_for(ann_grpc, ENDED_WITHIN_S) is grpc.StatusCode.NOT_FOUND
        assert await asyncio.wait_for(vic_grpc, ENDED_WITHIN_S) is (
            grpc.StatusCode.PERMISSION_DENIED
        )
        assert_error(await asyncio.wait_for(ann_sse, ENDED_WITHIN_S), "NOT_FOUND")
        assert_error(await asyncio.wait_for(vic_sse, ENDED_WITHIN_S), "PERMISSION_DENIED")
        ended_in_time(sent)

        # ann's /v1/events goes on, showing what ann may read now: not the acme commit (its
        # old transaction), but its first globex transaction.
        await keyed.post("ops", f"/v1/transactions/{tx}/commit")
        mine = (await keyed.post("ann", "/v1/transactions"))["transaction_id"]
        data = await transaction_event(anns_all)
        assert (data["transaction_id"], data["kind"]) == (mine, "begin")


async def test_only_a_reload_that_changes_the_key_reaches_its_grant(tmp_path: Path) -> None:
    secret, other = new_secret(), new_secret()
    file = tmp_path / "keys.toml"
    file.write_text(key_file({"ann": (secret, "acme", "agent")}))
    ring = KeyRing.from_file(file)
    grant = ring.grant(secret)
    waiting = asyncio.create_task(grant.revoked())

    file.write_text("[[key]]\nhash = 'nope'\n")  # refused whole: the keys in force stay
    assert not ring.reload()
    file.write_text(key_file({"ann": (secret, "acme", "agent"), "bo": (other, "acme", "agent")}))
    assert ring.reload()  # another key came; ann's is as it was
    await asyncio.sleep(0.05)
    assert not waiting.done()

    file.write_text(key_file({"ann": (secret, "acme", "admin")}))
    assert ring.reload()
    now = (await asyncio.wait_for(waiting, 5)).caller
    assert (now.principal, now.tenant, sorted(now.roles)) == ("ann", "acme", ["admin"])

    # A reload between the grant and its first wait is not missed: a stream's watcher starts
    # a moment after its key was resolved.
    late = ring.grant(secret)
    file.write_text(key_file({"bo": (other, "acme", "agent")}))
    assert ring.reload()
    with pytest.raises(Unauthenticated, match="revoked"):
        await asyncio.wait_for(late.revoked(), 5)
    assert secret not in repr(late)
    assert late.digest.hex() not in repr(late)
