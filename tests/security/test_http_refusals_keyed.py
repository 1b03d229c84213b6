"""With API keys, every refusal over HTTP is in the one documented error shape (``code``,
``reason``, ``message``, ``details``, ``continuation``), the 401 of a missing or unknown key
included, and its continuation says what to do: get a valid key, use a key allowed to act,
pick a new ``request_id`` — never the catch-all "AgentTx failed to handle the call"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.server import RunningServer, ServeConfig, start
from http_harness import Reply, assert_error_shape, request

pytestmark = pytest.mark.stores("sqlite")

CATCH_ALL = "failed to handle the call"


@dataclass
class Keyed:
    running: RunningServer
    alice: str  # tenant acme, agent
    carol: str  # tenant acme, agent: another principal

    @property
    def base(self) -> str:
        assert self.running.http is not None
        return f"http://{self.running.http.address}"

    async def call(self, method: str, path: str, key: str | None, body: Any = None) -> Reply:
        headers = {} if key is None else {"authorization": f"Bearer {key}"}
        return await asyncio.to_thread(request, self.base, method, path, body, headers=headers)


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[Keyed]:
    alice, carol = new_secret(), new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{name}"\n'
            f'tenant = "acme"\nroles = ["agent"]\n\n'
            for name, secret in (("alice", alice), ("carol", carol))
        )
    )
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            http_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys,
        )
    )
    try:
        yield Keyed(running, alice, carol)
    finally:
        await running.stop(0)


@pytest.mark.parametrize("path", ["/v1/transactions", "/v1/tools", "/mcp"])
async def test_a_missing_or_unknown_key_gets_the_documented_shape(keyed: Keyed, path: str) -> None:
    for key in (None, new_secret()):
        reply = await keyed.call("GET", path, key)
        error = assert_error_shape(reply, 401, "UNAUTHENTICATED")
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert error["code"] == "UNAUTHENTICATED"
        assert error["continuation"]["kind"] == "ResolveExternally"
        assert "API key" in error["continuation"]["instruction"]
        assert CATCH_ALL not in error["continuation"]["instruction"]
        if key is not None:
            assert key not in reply.raw.decode()


async def test_another_principals_transaction_says_which_key_may_act(keyed: Keyed) -> None:
    begun = await keyed.call("POST", "/v1/transactions", keyed.alice, {"agent_id": "a"})
    assert begun.status == 200, begun.raw
    tx = begun.json["transaction_id"]
    step = {"step_id": 1, "tool_name": "kv.put", "arguments": {"key": "k", "value": 1}}
    for method, path, body in (
        ("GET", f"/v1/transactions/{tx}", None),
        ("POST", f"/v1/transactions/{tx}/steps", step),
    ):
        error = assert_error_shape(
            await keyed.call(method, path, keyed.carol, body), 403, "PERMISSION_DENIED"
        )
        assert error["continuation"]["kind"] == "ResolveExternally"
        instruction = error["continuation"]["instruction"]
        assert "admin" in instruction
        assert "do not retry with the same key" in instruction
        assert CATCH_ALL not in instruction
    # Alice's own key still acts on it: the refusal changed nothing.
    done = await keyed.call("POST", f"/v1/transactions/{tx}/steps", keyed.alice, step)
    assert done.status == 200
    assert done.json["status"] == "SUCCESS"


async def test_a_request_id_reused_for_another_request_says_to_pick_a_new_one(
    keyed: Keyed,
) -> None:
    tx = (await keyed.call("POST", "/v1/transactions", keyed.alice, {})).json["transaction_id"]
    first = {
        "step_id": 1,
        "tool_name": "kv.put",
        "arguments": {"key": "k", "value": 1},
        "request_id": "r-1",
    }
    done = await keyed.call("POST", f"/v1/transactions/{tx}/steps", keyed.alice, first)
    assert done.status == 200
    assert done.json["status"] == "SUCCESS"
    other = dict(first, arguments={"key": "k", "value": 2})
    reply = await keyed.call("POST", f"/v1/transactions/{tx}/steps", keyed.alice, other)
    error = assert_error_shape(reply, 409, "ALREADY_EXISTS")
    assert error["continuation"]["kind"] == "ReviseRequest"
    assert "new request_id" in error["continuation"]["instruction"]
