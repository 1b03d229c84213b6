"""A real ``agenttx serve --api-keys`` whose key file a test rewrites and reloads (SIGHUP):
the ``keyed`` fixture, for the tests of what a reload does to open streams."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import http_base
from server_process import ServerProcess, start_server

# "About a second": measured ~20 ms from the SIGHUP here; the bound leaves a busy 2-core
# machine room and still fails a stream that only notices on a timer of seconds.
ENDED_WITHIN_S = 2.0


def key_file(people: dict[str, tuple[str, str, str]]) -> str:
    """``name -> (secret, tenant, role)`` as a key file."""
    return "".join(
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{name}"\n'
        f'tenant = "{tenant}"\nroles = ["{role}"]\n\n'
        for name, (secret, tenant, role) in people.items()
    )


@dataclass
class Keyed:
    server: ServerProcess
    file: Path
    secrets: dict[str, str]  # name -> secret
    http: httpx2.AsyncClient
    channel: grpc.aio.Channel

    def auth(self, name: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.secrets[name]}"}

    async def post(self, name: str, path: str) -> Any:
        reply = await self.http.post(path, json={}, headers=self.auth(name))
        assert reply.status_code == 200, reply.text
        return reply.json()

    def watch(self, name: str, tx: str) -> Any:
        stub = pb_grpc.AgentTxServiceStub(self.channel)  # type: ignore[no-untyped-call]
        metadata = (("authorization", f"Bearer {self.secrets[name]}"),)
        return stub.WatchTransaction(
            pb.WatchTransactionRequest(transaction_id=tx), metadata=metadata
        )

    def reload(self, people: dict[str, tuple[str, str, str]]) -> float:
        """Rewrite the key file, SIGHUP the server, wait for its log line; the SIGHUP's time."""
        before = self._reloads()
        self.file.write_text(key_file(people))
        sent = time.monotonic()
        self.server.proc.send_signal(signal.SIGHUP)
        while self._reloads() == before:
            assert time.monotonic() < sent + 30, self.server.log_text()
            time.sleep(0.02)
        return sent

    def _reloads(self) -> int:
        return sum(r.get("msg", "").startswith("keys reloaded") for r in self.server.log_records())


@pytest.fixture(name="keyed")
async def keyed_fixture(tmp_path: Path) -> AsyncIterator[Keyed]:
    """A real ``agenttx serve --api-keys`` (gRPC and HTTP) with three keys of tenant acme:
    ann (agent), ops (admin), vic (approver); an HTTP client and a gRPC channel to it."""
    secrets = {name: new_secret() for name in ("ann", "ops", "vic")}
    people = {
        "ann": (secrets["ann"], "acme", "agent"),
        "ops": (secrets["ops"], "acme", "admin"),
        "vic": (secrets["vic"], "acme", "approver"),
    }
    file = tmp_path / "keys.toml"
    file.write_text(key_file(people))
    server = start_server(
        tmp_path / "data", "--api-keys", str(file), env={"AGENTTX_HTTP_ADDR": "127.0.0.1:0"}
    )
    with server.killed_on_error():
        async with (
            httpx2.AsyncClient(base_url=http_base(server), timeout=30) as http,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            yield Keyed(server, file, secrets, http, channel)
        text = server.log_text()
        assert not any(secret in text for secret in secrets.values())  # never logged
    assert server.terminate() == 0
