"""An effect's payload is its transaction's data: over a real keyed server, an ``agent`` key
lists only the effects of its own transactions — ``GET /v1/effects``,
``/v1/transactions/{id}/effects``, gRPC ``ListEffects`` and MCP ``list_effects`` — and is
refused another principal's transaction's effects as ``GetTransaction`` refuses it; an admin
or an approver of the tenant sees them (``core.access.read_owner``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.server import RunningServer, ServeConfig, start
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import Reply, request
from mcp_harness import structured

pytestmark = pytest.mark.stores("sqlite")

PEOPLE = {"ann": "agent", "bea": "agent", "ops": "admin", "vic": "approver"}
MAIL = {"to": "board@example.com", "subject": "merger terms", "body": "the secret price"}


@dataclass
class Server:
    running: RunningServer
    secrets: dict[str, str]

    @property
    def base(self) -> str:
        assert self.running.http is not None
        return f"http://{self.running.http.address}"

    async def call(self, name: str, method: str, path: str, body: Any = None) -> Reply:
        headers = {"authorization": f"Bearer {self.secrets[name]}"}
        return await asyncio.to_thread(request, self.base, method, path, body, headers=headers)

    async def grpc_effects(self, name: str, transaction_id: str = "") -> Any:
        async with grpc.aio.insecure_channel(self.running.address) as channel:
            stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
            metadata = (("authorization", f"Bearer {self.secrets[name]}"),)
            return await stub.ListEffects(
                pb.ListEffectsRequest(transaction_id=transaction_id), metadata=metadata
            )

    async def mcp_effects(self, name: str, args: dict[str, Any]) -> Any:
        headers = {"authorization": f"Bearer {self.secrets[name]}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{self.base}/mcp", http_client=http)
            async with Client(transport, read_timeout_seconds=30) as c:
                return await c.call_tool("list_effects", args)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    secrets = {name: new_secret() for name in PEOPLE}
    keys = tmp_path / "keys.toml"
    keys.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(secrets[name])}"\nprincipal = "{name}"\n'
            f'tenant = "acme"\nroles = ["{role}"]\n\n'
            for name, role in PEOPLE.items()
        )
    )
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            http_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys,
            mcp_effect_tools=True,
        )
    )
    try:
        yield Server(running, secrets)
    finally:
        await running.stop(0)


async def mailed(s: Server, name: str) -> str:
    """A committed transaction of ``name``'s with one mail in the outbox."""
    tx = (await s.call(name, "POST", "/v1/transactions", {})).json["transaction_id"]
    step = {"step_id": 1, "tool_name": "email.send", "arguments": MAIL}
    done = await s.call(name, "POST", f"/v1/transactions/{tx}/steps", step)
    assert done.json["status"] == "SUCCESS", done.raw
    assert (await s.call(name, "POST", f"/v1/transactions/{tx}/commit", {})).status == 200
    return tx


def listed(reply: Reply) -> list[str]:
    assert reply.status == 200, reply.raw
    return [e["transaction_id"] for e in reply.json["effects"]]


async def test_an_agent_reads_only_its_own_transactions_effects(server: Server) -> None:
    anns = await mailed(server, "ann")
    beas = await mailed(server, "bea")
    # GetTransaction refuses bea ann's transaction: so does every listing of its effects.
    got = await server.call("bea", "GET", f"/v1/transactions/{anns}")
    assert got.status == 403, got.raw
    assert listed(await server.call("bea", "GET", "/v1/effects")) == [beas]
    one = await server.call("bea", "GET", f"/v1/transactions/{anns}/effects")
    assert one.status == 403, one.raw
    assert one.json["error"]["code"] == "PERMISSION_DENIED"
    assert MAIL["body"].encode() not in one.raw
    assert [e.transaction_id for e in (await server.grpc_effects("bea")).effects] == [beas]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await server.grpc_effects("bea", anns)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    over_mcp = structured(await server.mcp_effects("bea", {}))
    assert [e["transaction_id"] for e in over_mcp["effects"]] == [beas]
    refused_mcp = await server.mcp_effects("bea", {"transaction_id": anns})
    assert refused_mcp.is_error
    assert MAIL["body"] not in str(structured(refused_mcp))

    # Its own, and the roles that read others' (admin, approver), see what they saw before.
    assert listed(await server.call("ann", "GET", f"/v1/transactions/{anns}/effects")) == [anns]
    for reader in ("ops", "vic"):
        assert listed(await server.call(reader, "GET", "/v1/effects")) == [anns, beas]
        assert [e.transaction_id for e in (await server.grpc_effects(reader, anns)).effects] == [
            anns
        ]
        mcp_page = structured(await server.mcp_effects(reader, {}))
        assert [e["transaction_id"] for e in mcp_page["effects"]] == [anns, beas]
        assert mcp_page["effects"][0]["payload"]["body"] == MAIL["body"]
