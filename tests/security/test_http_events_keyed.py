"""``GET /v1/events`` with API keys: each key's stream shows what a listing shows it — its
tenant's transactions, and an agent's own only; an admin sees its whole tenant, another
tenant nothing (before, the stream was refused outright with keys). A missing key is 401."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.server import RunningServer, ServeConfig, start
from http_harness import assert_error_shape, request, sse_events

pytestmark = pytest.mark.stores("sqlite")

PEOPLE = {  # name -> (tenant, role)
    "alice": ("acme", "agent"),
    "carol": ("acme", "agent"),
    "ops": ("acme", "admin"),
    "bob": ("globex", "agent"),
}


@dataclass
class Keyed:
    running: RunningServer
    keys: dict[str, str]  # name -> secret

    @property
    def base(self) -> str:
        assert self.running.http is not None
        return f"http://{self.running.http.address}"

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[name]}"}

    async def post(self, name: str, path: str, body: Any = None) -> Any:
        reply = await asyncio.to_thread(
            request, self.base, "POST", path, {} if body is None else body, headers=self.auth(name)
        )
        assert reply.status == 200, reply.raw
        return reply.json

    async def stream(self, name: str) -> Iterator[dict[str, Any]]:
        return await asyncio.to_thread(sse_events, self.base, "/v1/events", headers=self.auth(name))


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[Keyed]:
    keys = {name: new_secret() for name in PEOPLE}
    file = tmp_path / "keys.toml"
    file.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(keys[name])}"\nprincipal = "{name}"\n'
            f'tenant = "{tenant}"\nroles = ["{role}"]\n\n'
            for name, (tenant, role) in PEOPLE.items()
        )
    )
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            http_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=file,
        )
    )
    try:
        yield Keyed(running, keys)
    finally:
        await running.stop(0)


def _until(events: Iterator[dict[str, Any]], tx: str, kind: str) -> list[tuple[str, str]]:
    """The (transaction, kind) of each event up to and including ``tx``'s ``kind`` event."""
    seen: list[tuple[str, str]] = []
    for e in events:
        seen.append((e["transaction_id"], e["kind"]))
        if (e["transaction_id"], e["kind"]) == (tx, kind):
            return seen
    raise AssertionError(f"the stream ended before {tx} {kind}: {seen}")


async def test_each_key_streams_what_it_may_read(keyed: Keyed) -> None:
    streams = {name: await keyed.stream(name) for name in ("alice", "ops", "bob")}
    bobs = (await keyed.post("bob", "/v1/transactions"))["transaction_id"]
    carols = (await keyed.post("carol", "/v1/transactions"))["transaction_id"]
    alices = (await keyed.post("alice", "/v1/transactions"))["transaction_id"]
    await keyed.post("alice", f"/v1/transactions/{alices}/commit")
    last = (await keyed.post("bob", "/v1/transactions"))["transaction_id"]
    await keyed.post("bob", f"/v1/transactions/{last}/commit")

    alice, ops, bob = await asyncio.gather(
        asyncio.to_thread(_until, streams["alice"], alices, "commit"),
        asyncio.to_thread(_until, streams["ops"], alices, "commit"),
        asyncio.to_thread(_until, streams["bob"], last, "commit"),
    )
    # An agent: its own transaction only, though carol's (same tenant) and bob's came first.
    assert {tx for tx, _ in alice} == {alices}
    assert alice[0] == (alices, "begin")
    assert alice[-1] == (alices, "commit")
    # An admin: its whole tenant, nothing of globex.
    assert {tx for tx, _ in ops} == {carols, alices}
    # Another tenant: its own, none of acme's.
    assert {tx for tx, _ in bob} == {bobs, last}
    for events in streams.values():
        events.close()  # type: ignore[attr-defined]


async def test_without_a_key_the_stream_is_refused(keyed: Keyed) -> None:
    reply = await asyncio.to_thread(request, keyed.base, "GET", "/v1/events")
    assert_error_shape(reply, 401, "UNAUTHENTICATED")
