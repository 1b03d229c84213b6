"""``agenttx mcp`` on stdio under generated frames (issue 30.15): hypothesis writes lines — text
that is not JSON, JSON that is no JSON-RPC message, requests for unknown methods, and
``tools/call`` of every AgentTx tool with arguments of any shape (numbers as digit strings far
past Python's 4,300-digit ``int()`` limit, lone surrogates, deep nesting, wrong types) — into
one live session. After each batch:

- the server still answers (a ``ping`` gets its reply) and has not exited;
- every line it wrote is one JSON-RPC 2.0 message with ``result`` or ``error``;
- every request of the batch got exactly one reply, and none is an internal error (-32603): a
  tool's refusal is a tool result (``isError``), a bad frame a JSON-RPC error that says why;
- its log has no traceback.

Bounded in CI: ``AGENTTX_MCP_FUZZ_EXAMPLES`` (default 40) batches of up to 8 frames.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_harness import RawStdio, initialize
from test_mcp_stdio import TOOLS as STDIO_TOOLS

EXAMPLES = int(os.environ.get("AGENTTX_MCP_FUZZ_EXAMPLES", "40"))
# Every tool the stdio server lists, in a fixed order (hypothesis samples it).
TOOLS = tuple(sorted(STDIO_TOOLS))
FIELDS = (
    "transaction_id",
    "step_id",
    "tool_name",
    "arguments",
    "to_step",
    "page_size",
    "after_id",
    "expected_revision",
    "receipt_id",
    "reason",
    "history",
    "dry_run",
    "goal",
)
INTERNAL_ERROR = -32603


def _numbers() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(),
        st.integers(min_value=2**62, max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(1, 6000).map(lambda n: "9" * n),  # a digit string of any length
        st.sampled_from(["-1", "0", "1e9", "0x10", " 3 ", "NaN", "1.5"]),
    )


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _numbers(),
    st.text(max_size=40),
    st.sampled_from(["\ud800", "tx_nope", "", "${steps.1.x}", "\x00" * 20]),
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


TOOL_ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=5),
    st.builds(
        lambda d: {"transaction_id": "tx_x", "step_id": 1, "arguments": _deep(d)},
        st.integers(50, 600),
    ),
    JSON_VALUES,  # not even an object
)


@st.composite
def frames(draw: st.DrawFn, ids: Iterator[int]) -> tuple[str, int | None]:
    """One line to send, and the id a reply must carry (None: none is owed, or it is the
    server's to pick: a notification, or a line that is no request)."""
    kind = draw(st.sampled_from(["call", "call", "call", "method", "json", "text"]))
    if kind == "text":
        return draw(st.text(max_size=60).filter(lambda t: "\n" not in t and "\r" not in t)), None
    if kind == "json":
        return json.dumps(draw(JSON_VALUES)), None
    request_id = next(ids)
    if kind == "method":
        method = draw(st.sampled_from(["no/such", "tools/list", "resources/list", "ping", ""]))
        params = draw(st.one_of(st.none(), JSON_VALUES))
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return json.dumps(message), request_id
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": draw(st.sampled_from(TOOLS)), "arguments": draw(TOOL_ARGUMENTS)},
    }
    return json.dumps(message), request_id


class Session:
    """One ``agenttx mcp`` for the whole module, on a loop of its own."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.peer = self.loop.run_until_complete(RawStdio.start(data_dir))
        self.loop.run_until_complete(self._handshake())

    async def _handshake(self) -> None:
        await self.peer.send(initialize("2025-11-25"))
        assert "result" in await self.peer.receive()
        await self.peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def exchange(self, lines: list[str], ping_id: int) -> list[dict[str, Any]]:
        """Send ``lines`` and a ping; every message read until the ping's reply."""

        async def go() -> list[dict[str, Any]]:
            for line in lines:
                await self.peer.send_line(line)
            await self.peer.send({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
            got = []
            while True:
                message = await self.peer.receive()
                got.append(message)
                if message.get("id") == ping_id:
                    return got

        return self.loop.run_until_complete(go())

    def close(self) -> str:
        try:
            return self.loop.run_until_complete(self.peer.close())
        finally:
            self.loop.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    s = Session(tmp_path_factory.mktemp("mcp-fuzz") / "data")
    yield s
    stderr = s.close()
    assert "Traceback" not in stderr, stderr[-4000:]


IDS = itertools.count(1000)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(frames(IDS), min_size=1, max_size=8))
def test_generated_frames_get_well_formed_replies_and_no_internal_error(
    session: Session, batch: list[tuple[str, int | None]]
) -> None:
    ping = next(IDS)
    replies = session.exchange([line for line, _ in batch], ping)
    assert session.peer.proc.returncode is None, "agenttx mcp exited"
    for reply in replies:
        assert reply.get("jsonrpc") == "2.0", reply
        assert ("result" in reply) != ("error" in reply), reply
        if "error" in reply:
            assert isinstance(reply["error"].get("code"), int), reply
            assert reply["error"]["code"] != INTERNAL_ERROR, reply
            assert reply["error"].get("message"), reply
    owed = [request_id for _, request_id in batch if request_id is not None]
    answered = [reply.get("id") for reply in replies]
    for request_id in owed:
        assert answered.count(request_id) == 1, (request_id, batch, replies)
