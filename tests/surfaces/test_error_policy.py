"""One public error policy (``api/public_errors.py``, docs/errors.md "One error policy"): the
faults of ``error_cases.ERRORS`` on every surface of the conformance suite; then what needs
API keys or a broken store, through the same drivers in front of one in-process engine behind
the real listeners (``server.listen``, ``server.listen_http``) with two keys, alice's and
bob's: a missing or unknown key, another principal's transaction, and an internal error (a
real SQLite store whose listing breaks for two agent ids the way a broken backend would — a
bare ``RuntimeError``, or a ``StepFailure`` escaped where no step runs — each quoting the
credential). No reply holds the credential, a traceback or the exception's own words."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import agenttx
import leaky_tools
from agenttx.api.mcp import AgentTxMCP, served
from agenttx.api.public_errors import INTERNAL_MESSAGE, public_error
from agenttx.auth.keys import hash_secret, new_secret
from agenttx.errors import SandboxError
from agenttx.server import ServeConfig, listen, listen_http, load_keys
from agenttx.store.sqlite import SqliteStore
from agenttx.types import Caller
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from http_harness import request
from surfaces.conftest import held
from surfaces.drivers import CliDriver, Driver, GrpcDriver, HttpDriver, McpDriver, Outcome
from surfaces.drivers import ServiceDriver as _ServiceDriver
from surfaces.error_cases import ERRORS
from surfaces.runner import conformance_test

pytestmark = pytest.mark.asyncio(loop_scope="module")

test_each_surface_gives_the_engines_outcome = conformance_test(ERRORS)

SECRET = leaky_tools.SECRET
NEVER = (SECRET, "Traceback", "RuntimeError", "SandboxError", "driver lost")
PEOPLE = {name: Caller(name, "acme", frozenset({agenttx.Role.AGENT})) for name in ("alice", "bob")}


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


class EmbeddedDriver(_ServiceDriver):
    """The engine called in this process as a principal: a refusal is the exception raised,
    in its public form (what any surface says of it, and logs)."""

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        try:
            reply = await getattr(self.service, operation)(**inputs, caller=self.caller)
        except Exception as exc:
            e = public_error(exc, logging.getLogger("test"), "embedded")
            return Outcome(False, e.reason, text=f"{e.message} {dict(e.fields)}")
        return Outcome(True, reply=reply, text=repr(reply))


class McpAtTheDoor:
    """MCP over streamable HTTP with a key the server refuses: no session starts, so the
    refusal is the HTTP error body of the first request."""

    name = "mcp-http"
    store_url = ""

    def __init__(self, base: str, key: str | None) -> None:
        self.base = base
        self.headers = {} if key is None else {"authorization": f"Bearer {key}"}

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        r = await asyncio.to_thread(request, self.base, "POST", "/mcp", {}, headers=self.headers)
        return Outcome(False, r.json["error"]["reason"], text=r.raw.decode())

    async def offers(self, operation: str) -> bool:
        return True


Surfaces = Callable[[str | None], Awaitable[dict[str, Driver]]]
# The keyed engine is each test's own, on the test's own loop (the table's surfaces share the
# module's).
own_loop = pytest.mark.asyncio(loop_scope="function")


@pytest.fixture
async def keyed(open_engine: Any, tmp_path: Path) -> AsyncIterator[Surfaces]:
    """The surfaces as ``who`` calls them: alice's or bob's key (and, in this process, that
    principal), no key (None), or a key the server does not know (any other name)."""
    secrets = {name: new_secret() for name in PEOPLE}
    key_file = tmp_path / "keys.toml"
    key_file.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{name}"\n'
            'tenant = "acme"\nroles = ["agent"]\n\n'
            for name, secret in secrets.items()
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
    engine = await open_engine(store=FaultyStore(tmp_path / "faulty.db"), background=False)
    server, target = await listen(engine, config.listen_addr, keys=ring)
    http = await listen_http(engine, config, "test", ring)
    base = f"http://{http.address}"
    async with contextlib.AsyncExitStack() as stack:
        channel = grpc.aio.insecure_channel(target)
        stack.push_async_callback(channel.close)
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]

        async def surfaces(who: str | None) -> dict[str, Driver]:
            key = secrets.get(who, who) if who is not None else None
            drivers: dict[str, Driver] = {
                "grpc": GrpcDriver(stub, key=key),
                "http": HttpDriver(base, key=key),
                "cli": CliDriver(target, key=key),
            }
            if who not in PEOPLE:
                drivers["mcp-http"] = McpAtTheDoor(base, key)
                return drivers  # in this process there are no keys to leave out or get wrong
            caller = PEOPLE[who]
            drivers["embedded"] = EmbeddedDriver("embedded", engine, caller=caller)
            in_memory = Client(AgentTxMCP(served.embedded(engine, caller)).server)
            drivers["mcp"] = McpDriver("mcp", await stack.enter_async_context(held(in_memory)))
            headers = {"authorization": f"Bearer {key}"}
            over_http = streamable_http_client(
                f"{base}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)
            )
            session = Client(over_http, read_timeout_seconds=60)
            drivers["mcp-http"] = McpDriver(
                "mcp-http", await stack.enter_async_context(held(session))
            )
            return drivers

        try:
            yield surfaces
        finally:
            await stack.aclose()
            await http.stop()
            await server.stop(None)


async def everywhere(
    drivers: dict[str, Driver], operation: str, **inputs: Any
) -> dict[str, Outcome]:
    """``operation`` on each surface, each reply checked for what must never leave."""
    outcomes = {}
    for name, driver in drivers.items():
        outcome = await driver.call(operation, **inputs)
        for word in NEVER:
            assert word not in outcome.text, (name, word, outcome.text)
        outcomes[name] = outcome
    return outcomes


def reasons(outcomes: dict[str, Outcome]) -> dict[str, str]:
    return {name: o.reason for name, o in outcomes.items()}


async def test_digits_past_a_step_ids_range_are_invalid_where_text_is_read_as_a_number(
    drivers: dict[str, Driver],
) -> None:
    # MCP reads a number sent as text leniently, and /v1's JSON body may carry one: past the
    # range it is INVALID_ARGUMENT with the range, never INTERNAL (an earlier bug, MCP's alone).
    for name in ("mcp-stdio", "mcp-http", "mcp-remote", "http"):
        begun = await drivers[name].call("begin")
        tx = begun.view(("transaction_id",))["fields"]["transaction_id"]
        digits = "99999999999999999999999"
        outcome = await drivers[name].call(
            "execute_step", transaction_id=tx, step_id=digits, tool_name="kv.put", arguments={}
        )
        assert outcome.reason == "INVALID_ARGUMENT", (name, outcome.text)
        assert "4294967295" in outcome.text, (name, outcome.text)


@own_loop
async def test_a_missing_or_unknown_key_is_unauthenticated_everywhere(keyed: Surfaces) -> None:
    tx = (await (await keyed("alice"))["embedded"].call("begin")).reply.transaction_id
    for who in (None, "mallory"):
        outcomes = await everywhere(await keyed(who), "get_transaction", transaction_id=tx)
        assert set(outcomes) == {"grpc", "http", "cli", "mcp-http"}
        assert reasons(outcomes) == dict.fromkeys(outcomes, "UNAUTHENTICATED")


@own_loop
async def test_another_principals_transaction_is_permission_denied_everywhere(
    keyed: Surfaces,
) -> None:
    tx = (await (await keyed("alice"))["embedded"].call("begin")).reply.transaction_id
    outcomes = await everywhere(await keyed("bob"), "get_transaction", transaction_id=tx)
    assert len(outcomes) == 6
    assert reasons(outcomes) == dict.fromkeys(outcomes, "PERMISSION_DENIED")


@own_loop
@pytest.mark.parametrize("agent", ["fault-step", "fault-runtime"])
async def test_an_internal_error_is_internal_everywhere_and_says_nothing_more(
    keyed: Surfaces, agent: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    outcomes = await everywhere(await keyed("alice"), "list_transactions", agent_id=agent)
    assert len(outcomes) == 6
    assert reasons(outcomes) == dict.fromkeys(outcomes, "INTERNAL")
    for name, outcome in outcomes.items():
        assert INTERNAL_MESSAGE in outcome.text, (name, outcome.text)
    # Each server-side surface logged the error once, with its traceback, under the id it
    # sent; the embedded caller got the exception itself (its public form logged it, too).
    logged = [r for r in caplog.records if getattr(r, "correlation_id", "")]
    assert len(logged) == 6
    for record in logged:
        assert record.exc_info is not None
        sent = [n for n, o in outcomes.items() if record.correlation_id in o.text]  # type: ignore[attr-defined]
        assert len(sent) == 1, (record.correlation_id, outcomes)  # type: ignore[attr-defined]
