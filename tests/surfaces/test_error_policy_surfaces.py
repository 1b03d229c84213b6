"""One public error policy (``api/public_errors.py``, docs/errors.md "One error policy"): each
fault gets the same reason on every surface — the embedded engine, gRPC, MCP in memory, MCP
over HTTP, ``/v1`` and the CLI — and no reply holds a secret, a traceback or a tool's raw
exception text.

One engine behind the real listeners (``server.listen``, ``server.listen_http``) with API
keys; the CLI is ``agenttx`` run in-process against the gRPC port. Two faults need an engine
call that breaks inside: the store is a real SQLite store whose listing fails for two agent
ids the way a broken backend would — a bare ``RuntimeError``, or a ``StepFailure`` (a sandbox
error) that escaped where no step runs — each with the secret in its text. The tools that
raise are real registered tools.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import agenttx
from agenttx.api.mcp import AgentTxMCP, served
from agenttx.api.public_errors import INTERNAL_MESSAGE, public_error
from agenttx.auth.keys import hash_secret, new_secret
from agenttx.cli import main
from agenttx.error_details import from_metadata
from agenttx.errors import SandboxError
from agenttx.server import ServeConfig, listen, listen_http, load_keys
from agenttx.store.sqlite import SqliteStore
from agenttx.types import Caller
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import request
from mcp_harness import structured

pytestmark = pytest.mark.stores("sqlite")

# A live-key shape agenttx.redaction masks; no reply may hold it, nor these words of the
# exceptions that carried it.
SECRET = "sk-live_Zq8vN3xP0aL7mK2bR5tW9yC4"
NEVER = (SECRET, "Traceback", "RuntimeError", "SandboxError", "driver lost")

ALICE = Caller("alice", "acme", frozenset({agenttx.Role.AGENT}))
BOB = Caller("bob", "acme", frozenset({agenttx.Role.AGENT}))  # not alice's transactions


class FaultyStore(SqliteStore):
    """A real SQLite store whose listing breaks for two agent ids, as a broken backend
    would: a bare exception, or a step failure raised where no step runs."""

    async def list_transactions(self, **kwargs: Any) -> Any:
        agent = kwargs.get("agent_id")
        if agent == "fault-runtime":
            raise RuntimeError(f"driver lost its socket; password={SECRET}")
        if agent == "fault-step":
            raise SandboxError(f"fs.read: path {SECRET}/x leaves the sandbox root")
        return await super().list_transactions(**kwargs)


@agenttx.tool(name="leaky.call")
async def leaky_call(ctx: agenttx.ToolContext) -> dict[str, Any]:
    """An outside call that fails quoting its credentials."""
    raise RuntimeError(f"upstream refused: Authorization: Bearer {SECRET}")


@agenttx.tool(name="leaky.write", effect="compensatable")
async def leaky_write(ctx: agenttx.ToolContext) -> dict[str, Any]:
    """An outside write whose undo fails quoting its credentials."""
    await ctx.register_undo({})
    return {}


@leaky_write.undo
def _leaky_undo(ctx: Any) -> None:
    raise RuntimeError(f"provider said password={SECRET}")


@dataclass
class Reply:
    """What one surface answered: ``reason`` (a refusal's), or ``status`` and ``category``
    (a step's outcome); ``text`` is all of it, as the caller received it."""

    reason: str = ""
    status: str = ""
    category: str = ""
    text: str = ""


@dataclass
class Surfaces:
    engine: agenttx.Engine
    grpc_target: str
    http_base: str
    keys: dict[str, str]  # principal -> API key

    def key(self, who: str | None) -> str | None:
        return None if who is None else self.keys.get(who, who)  # an unknown name: a bad key


@pytest.fixture
async def surfaces(open_engine: Any, tmp_path: Path) -> AsyncIterator[Surfaces]:
    keys = {"alice": new_secret(), "bob": new_secret()}
    key_file = tmp_path / "keys.toml"
    key_file.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{name}"\n'
            'tenant = "acme"\nroles = ["agent"]\n\n'
            for name, secret in keys.items()
        )
    )
    config = ServeConfig(
        listen_addr="127.0.0.1:0",
        http_addr="127.0.0.1:0",
        data_dir=tmp_path / "data",
        metrics_addr=None,
        api_keys=key_file,
    )
    ring = load_keys(config)
    engine = await open_engine(
        store=FaultyStore(tmp_path / "faulty.db"),
        tools=[leaky_call, leaky_write],
        background=False,
    )
    server, target = await listen(engine, config.listen_addr, keys=ring)
    http = await listen_http(engine, config, "test", ring)
    try:
        yield Surfaces(engine, target, f"http://{http.address}", keys)
    finally:
        await http.stop()
        await server.stop(None)


# ---------------------------------------------------------------------------- the calls

# Each fault is one call: its name and arguments, the same on every surface, and who makes
# it (a principal's key; None: no key; another name: a key the server does not know).


@dataclass(frozen=True)
class Call:
    op: str  # get | step | list | rollback
    args: dict[str, Any]
    who: str | None = "alice"


async def embedded(s: Surfaces, c: Call) -> Reply:
    caller = {"alice": ALICE, "bob": BOB}[c.who or "alice"]
    a = c.args
    try:
        if c.op == "get":
            await s.engine.get_transaction(a["transaction_id"], caller=caller)
            return Reply(status="OK")
        if c.op == "list":
            await s.engine.list_transactions(agent_id=a["agent_id"], caller=caller)
            return Reply(status="OK")
        if c.op == "rollback":
            b = await s.engine.rollback(a["transaction_id"], caller=caller)
            return Reply(status="OK", text=json.dumps(b.compensation_errors))
        r = await s.engine.execute_step(
            a["transaction_id"], a["step_id"], a["tool"], a.get("arguments"), caller=caller
        )
        return Reply(status=r.status.value, category=r.error_category, text=r.clean_hint)
    except Exception as exc:  # the caller's own exception; its public form is what leaves
        e = public_error(exc, logging.getLogger("test"), "embedded")
        return Reply(reason=e.reason, text=f"{e.message} {json.dumps(dict(e.fields))}")


async def over_grpc(s: Surfaces, c: Call) -> Reply:
    a = c.args
    key = s.key(c.who)
    metadata = () if key is None else (("authorization", f"Bearer {key}"),)
    async with grpc.aio.insecure_channel(s.grpc_target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            if c.op == "get":
                reply: Any = await stub.GetTransaction(
                    pb.GetTransactionRequest(transaction_id=a["transaction_id"]),
                    metadata=metadata,
                )
                return Reply(status="OK", text=str(reply))
            if c.op == "list":
                reply = await stub.ListTransactions(
                    pb.ListTransactionsRequest(agent_id=a["agent_id"]), metadata=metadata
                )
                return Reply(status="OK", text=str(reply))
            if c.op == "rollback":
                reply = await stub.RollbackTransaction(
                    pb.RollbackTransactionRequest(transaction_id=a["transaction_id"]),
                    metadata=metadata,
                )
                return Reply(status="OK", text=str(reply))
            reply = await stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=a["transaction_id"],
                    step_id=a["step_id"],
                    tool_name=a["tool"],
                    arguments_json=json.dumps(a.get("arguments") or {}),
                ),
                metadata=metadata,
            )
            status = pb.StepStatus.Name(reply.status).removeprefix("STEP_STATUS_")
            return Reply(status=status, category=reply.error_category, text=str(reply))
        except grpc.aio.AioRpcError as exc:
            trailers = exc.trailing_metadata()
            reason, _ = from_metadata(trailers)
            return Reply(reason=reason, text=f"{exc.details()} {trailers}")


async def over_mcp(client: Client, c: Call) -> Reply:
    a = c.args
    if c.op == "step":
        tool, arguments = "run_step", {**a, "arguments": a.get("arguments") or {}}
    else:
        tool = {"get": "get_transaction", "list": "list_transactions"}.get(c.op, c.op)
        tool = "rollback_transaction" if c.op == "rollback" else tool
        arguments = dict(a)
    result = await client.call_tool(tool, arguments)
    got = structured(result)
    text = json.dumps(got) + " ".join(getattr(b, "text", "") for b in result.content)
    if result.is_error:
        return Reply(reason=got["error"]["code"], text=text)
    return Reply(status=got.get("status", "OK"), category=got.get("error_category", ""), text=text)


async def mcp_in_memory(s: Surfaces, c: Call) -> Reply | None:
    if c.who not in ("alice", "bob"):
        return None  # in memory there are no keys to leave out or get wrong
    backend = served.embedded(s.engine, ALICE if c.who == "alice" else BOB)
    async with Client(AgentTxMCP(backend).server) as client:
        return await over_mcp(client, c)


async def mcp_over_http(s: Surfaces, c: Call) -> Reply:
    key = s.key(c.who)
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    if c.who not in ("alice", "bob"):  # refused before MCP: the HTTP error body
        reply = await asyncio.to_thread(request, s.http_base, "POST", "/mcp", {}, headers=headers)
        return Reply(reason=reply.json["error"]["reason"], text=reply.raw.decode())
    http_client = httpx2.AsyncClient(headers=headers, timeout=60)
    transport = streamable_http_client(f"{s.http_base}/mcp", http_client=http_client)
    async with Client(transport, read_timeout_seconds=60) as client:
        return await over_mcp(client, c)


async def over_http(s: Surfaces, c: Call) -> Reply:
    a = c.args
    key = s.key(c.who)
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    tx = a.get("transaction_id", "")
    if c.op == "get":
        method, path, body = "GET", f"/v1/transactions/{tx}", None
    elif c.op == "list":
        method, path, body = "GET", f"/v1/transactions?agent_id={a['agent_id']}", None
    elif c.op == "rollback":
        method, path, body = "POST", f"/v1/transactions/{tx}/rollback", {}
    else:
        method, path = "POST", f"/v1/transactions/{tx}/steps"
        body = {
            "step_id": a["step_id"],
            "tool_name": a["tool"],
            "arguments": a.get("arguments") or {},
        }
    reply = await asyncio.to_thread(request, s.http_base, method, path, body, headers=headers)
    text = reply.raw.decode()
    if reply.status != 200:
        return Reply(reason=reply.json["error"]["reason"], text=text)
    got = reply.json
    return Reply(status=got.get("status", "OK"), category=got.get("error_category", ""), text=text)


async def over_cli(s: Surfaces, c: Call) -> Reply:
    a = c.args
    if c.op == "get":
        args = ["tx", "show", a["transaction_id"]]
    elif c.op == "list":
        args = ["tx", "list", "--agent", a["agent_id"]]
    elif c.op == "rollback":
        args = ["tx", "rollback", a["transaction_id"]]
    else:
        arguments = json.dumps(a.get("arguments") or {})
        args = ["tx", "step", a["transaction_id"], str(a["step_id"]), a["tool"], arguments]
    key = s.key(c.who)
    env = {"AGENTTX_API_KEY": key} if key is not None else {"AGENTTX_API_KEY": ""}
    out = await asyncio.to_thread(
        CliRunner().invoke, main, [*args, "--server", s.grpc_target, "--json"], env=env
    )
    text = out.output
    if out.exit_code == 2:  # refused by the CLI before sending: a usage error
        return Reply(reason="INVALID_ARGUMENT", text=text)
    if out.exit_code != 0 and text.startswith("Error: "):
        head = text.removeprefix("Error: ").split(":", 1)[0]
        return Reply(reason=head.split()[-1], text=text)
    if c.op == "step":
        got = json.loads(text)
        status = str(got["status"]).removeprefix("STEP_STATUS_")
        return Reply(status=status, category=got.get("error_category", ""), text=text)
    return Reply(status="OK", text=text)


SURFACES: dict[str, Callable[[Surfaces, Call], Awaitable[Reply | None]]] = {
    "embedded": embedded,
    "grpc": over_grpc,
    "mcp": mcp_in_memory,
    "mcp-http": mcp_over_http,
    "http": over_http,
    "cli": over_cli,
}


async def every_surface(s: Surfaces, c: Call) -> dict[str, Reply]:
    """The call on every surface that has it (the embedded engine and MCP in memory take no
    keys), each reply checked for what must never leave."""
    replies: dict[str, Reply] = {}
    for name, run in SURFACES.items():
        if name == "embedded" and c.who not in ("alice", "bob"):
            continue
        reply = await run(s, c)
        if reply is None:
            continue
        for word in NEVER:
            assert word not in reply.text, (name, word, reply.text)
        replies[name] = reply
    return replies


def reasons(replies: dict[str, Reply]) -> dict[str, str]:
    return {name: r.reason for name, r in replies.items()}


def everywhere(replies: dict[str, Reply], reason: str) -> dict[str, str]:
    return dict.fromkeys(replies, reason)


async def alice_tx(s: Surfaces) -> str:
    return (await s.engine.begin(caller=ALICE)).transaction_id


# ---------------------------------------------------------------------------- the faults


@pytest.mark.parametrize("tx", ["tx_nope", "12345"])
async def test_an_unknown_transaction_is_not_found_everywhere(surfaces: Surfaces, tx: str) -> None:
    replies = await every_surface(surfaces, Call("get", {"transaction_id": tx}))
    assert reasons(replies) == everywhere(replies, "NOT_FOUND")
    assert len(replies) == 6


async def test_a_wrong_step_is_wrong_step_everywhere(surfaces: Surfaces) -> None:
    tx = await alice_tx(surfaces)
    step = {"transaction_id": tx, "step_id": 5, "tool": "kv.put", "arguments": {"key": "k"}}
    replies = await every_surface(surfaces, Call("step", step))
    assert reasons(replies) == everywhere(replies, "WRONG_STEP")


async def test_an_invalid_argument_is_invalid_argument_everywhere(surfaces: Surfaces) -> None:
    tx = await alice_tx(surfaces)
    # A step id out of its range (0: none is sent over gRPC; the CLI refuses it itself).
    step = {"transaction_id": tx, "step_id": 0, "tool": "kv.put", "arguments": {}}
    replies = await every_surface(surfaces, Call("step", step))
    assert reasons(replies) == everywhere(replies, "INVALID_ARGUMENT")
    # Digits past the range, as text, where a surface reads text as a number (MCP leniently,
    # HTTP's JSON body) — never INTERNAL (an earlier bug, MCP's alone).
    digits = dict(step, step_id="99999999999999999999999")
    for run in (mcp_in_memory, mcp_over_http, over_http):
        reply = await run(surfaces, Call("step", digits))
        assert reply is not None
        assert reply.reason == "INVALID_ARGUMENT", reply.text
        assert "4294967295" in reply.text, reply.text
    # An id over its size limit.
    replies = await every_surface(surfaces, Call("get", {"transaction_id": "x" * 5000}))
    assert reasons(replies) == everywhere(replies, "INVALID_ARGUMENT")


async def test_a_payload_too_large_is_invalid_argument_everywhere(surfaces: Surfaces) -> None:
    tx = await alice_tx(surfaces)
    big = {"key": "k", "value": "x" * (1 << 20)}
    step = {"transaction_id": tx, "step_id": 1, "tool": "kv.put", "arguments": big}
    replies = await every_surface(surfaces, Call("step", step))
    assert reasons(replies) == everywhere(replies, "INVALID_ARGUMENT")
    assert "1048576" in replies["grpc"].text


async def test_an_unknown_tool_is_named_so_everywhere(surfaces: Surfaces) -> None:
    tx = await alice_tx(surfaces)
    step = {"transaction_id": tx, "step_id": 1, "tool": "no.such.tool", "arguments": {}}
    replies = await every_surface(surfaces, Call("step", step))
    # MCP checks the name before a step runs (UNKNOWN_TOOL, the closest names to choose
    # from); elsewhere the step fails with the category unknown_tool and is undone.
    for name in ("mcp", "mcp-http"):
        assert replies.pop(name).reason == "UNKNOWN_TOOL"
    assert {n: (r.status, r.category) for n, r in replies.items()} == dict.fromkeys(
        replies, ("ROLLBACK_TRIGGERED", "unknown_tool")
    )


async def test_a_tool_whose_error_holds_a_secret_fails_its_step_masked(
    surfaces: Surfaces,
) -> None:
    for name, run in SURFACES.items():
        tx = await alice_tx(surfaces)
        step = {"transaction_id": tx, "step_id": 1, "tool": "leaky.call", "arguments": {}}
        reply = await run(surfaces, Call("step", step))
        assert reply is not None
        assert reply.status == "ROLLBACK_TRIGGERED", (name, reply)
        assert SECRET not in reply.text, (name, reply.text)
        assert "***" in reply.text, (name, reply.text)  # masked, the rest of the words kept


async def test_an_undo_whose_error_holds_a_secret_is_reported_masked(surfaces: Surfaces) -> None:
    for name, run in SURFACES.items():
        tx = await alice_tx(surfaces)
        r = await surfaces.engine.execute_step(tx, 1, "leaky.write", {}, caller=ALICE)
        assert r.status is agenttx.StepStatus.SUCCESS
        reply = await run(surfaces, Call("rollback", {"transaction_id": tx}))
        assert reply is not None
        assert reply.status == "OK", (name, reply)
        assert SECRET not in reply.text, (name, reply.text)
        assert "provider said password=***" in reply.text, (name, reply.text)


@pytest.mark.parametrize("agent", ["fault-step", "fault-runtime"])
async def test_an_internal_error_is_internal_everywhere_and_says_nothing_more(
    surfaces: Surfaces, agent: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    replies = await every_surface(surfaces, Call("list", {"agent_id": agent}))
    assert reasons(replies) == everywhere(replies, "INTERNAL")
    assert len(replies) == 6
    for name, reply in replies.items():
        assert INTERNAL_MESSAGE in reply.text, (name, reply.text)
    # Each server-side surface logged the error once, with its traceback, under the id it
    # sent; the embedded caller got the exception itself (its public form logged it, too).
    logged = [r for r in caplog.records if getattr(r, "correlation_id", "")]
    assert len(logged) == 6
    for record in logged:
        assert record.exc_info is not None
        sent = [n for n, r in replies.items() if record.correlation_id in r.text]  # type: ignore[attr-defined]
        assert len(sent) == 1, (record.correlation_id, replies)  # type: ignore[attr-defined]


async def test_a_missing_or_unknown_key_is_unauthenticated_everywhere(surfaces: Surfaces) -> None:
    tx = await alice_tx(surfaces)
    for who in (None, "mallory"):
        replies = await every_surface(surfaces, Call("get", {"transaction_id": tx}, who))
        assert set(replies) == {"grpc", "mcp-http", "http", "cli"}
        assert reasons(replies) == everywhere(replies, "UNAUTHENTICATED")
        for reply in replies.values():
            assert surfaces.keys["alice"] not in reply.text


async def test_another_principals_transaction_is_permission_denied_everywhere(
    surfaces: Surfaces,
) -> None:
    tx = await alice_tx(surfaces)
    replies = await every_surface(surfaces, Call("get", {"transaction_id": tx}, "bob"))
    assert reasons(replies) == everywhere(replies, "PERMISSION_DENIED")
    assert len(replies) == 6
