"""The agent-facing MCP hop's cheap common case: ``get_transaction`` shows the newest step
attempts unless asked for the whole history, over the embedded engine and over ``--server``;
the output schemas are one object the SDK client validates cheaply, and every result (a
refusal too) conforms to its tool's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client

import agenttx
from agenttx.api.mcp import results
from agenttx.api.mcp.served import embedded, remote
from agenttx.api.mcp.server import AgentTxMCP
from agenttx.client import AsyncAgentTxClient
from agenttx.errors import InvalidArgument
from mcp_harness import structured, text
from server_process import start_server

STEPS = results.RECENT_STEPS + 3  # more attempts than a bounded reply shows


async def call(c: Client, mcp_tool: str, **arguments: Any) -> dict[str, Any]:
    return structured(await c.call_tool(mcp_tool, arguments))


async def _long_history(c: Client) -> str:
    """A transaction of STEPS successful kv.put steps with one failed attempt (no key) at
    step 3, so the history has STEPS + 1 attempts and one rollback decision."""
    tx = (await call(c, "begin_transaction"))["transaction_id"]
    for step in (1, 2):
        assert (await _put(c, tx, step, {"key": f"k{step}", "value": step}))["status"] == "SUCCESS"
    failed = await _put(c, tx, 3, {})
    assert (failed["status"], failed["next_step_id"]) == ("ROLLBACK_TRIGGERED", 3), failed
    for step in range(3, STEPS + 1):
        put = await _put(c, tx, step, {"key": f"k{step}", "value": step})
        assert put["status"] == "SUCCESS", put
    return tx


async def _put(c: Client, tx: str, step: int, arguments: dict[str, Any]) -> dict[str, Any]:
    return await call(
        c, "run_step", transaction_id=tx, step_id=step, tool="kv.put", arguments=arguments
    )


async def test_get_transaction_shows_the_newest_attempts_unless_asked_for_all(
    engine: agenttx.Engine,
) -> None:
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        tx = await _long_history(c)
        full_view = await engine.get_transaction(tx)
        assert len(full_view.steps) == STEPS + 1

        short = await c.call_tool("get_transaction", {"transaction_id": tx})
        got = structured(short)
        assert len(got["steps"]) == results.RECENT_STEPS
        assert got["earlier_steps_omitted"] == STEPS + 1 - results.RECENT_STEPS
        assert got["history_trimmed"] is True
        assert "edges" not in got  # not read
        assert "edge_kinds" not in got
        # The newest attempts, exactly as the whole history has them.
        newest = full_view.steps[-results.RECENT_STEPS :]
        assert [(s["step_id"], s["attempt"]) for s in got["steps"]] == [
            (s.step_id, s.attempt) for s in newest
        ]
        assert got["steps"][-1]["output"] == newest[-1].output
        # The reference's fields are whole: every live step's context entry, the counters.
        assert [e["step_id"] for e in got["context"]] == list(range(1, STEPS + 1))
        assert (got["status"], got["next_step_id"]) == ("ACTIVE", STEPS + 1)
        assert got["revision_count"] == STEPS
        assert "history true" in text(short)

        whole = await call(c, "get_transaction", transaction_id=tx, history=True)
        assert len(whole["steps"]) == STEPS + 1
        assert whole["history_trimmed"] is False
        assert "earlier_steps_omitted" not in whole
        assert "edges" in whole
        assert "edge_kinds" in whole
        # The one failed attempt's decision points at the same attempt in both replies.
        (decision,) = whole["decisions"]
        failed = whole["steps"][decision["history_index"]]
        assert (failed["step_id"], failed["status"]) == (3, "FAILED")
        # Leniently read, like every flag: the text "true" is true.
        assert (
            len((await call(c, "get_transaction", transaction_id=tx, history="true"))["steps"])
            == STEPS + 1
        )


async def test_a_short_history_is_shown_whole_by_default(engine: agenttx.Engine) -> None:
    async with Client(AgentTxMCP(embedded(engine)).server) as c:
        tx = (await call(c, "begin_transaction"))["transaction_id"]
        await call(c, "run_step", transaction_id=tx, step_id=1, tool="kv.put",
                   arguments={"key": "a", "value": 1})  # fmt: skip
        got = await c.call_tool("get_transaction", {"transaction_id": tx})
        fields = structured(got)
        assert [s["step_id"] for s in fields["steps"]] == [1]
        assert fields["earlier_steps_omitted"] == 0
        assert fields["history_trimmed"] is False
        assert "history true" not in text(got)


async def test_the_engine_reads_a_bounded_view(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    for i in range(1, 6):
        await engine.execute_step(tx, i, "kv.put", {"key": f"k{i}", "value": i})
    full = await engine.get_transaction(tx)
    bounded = await engine.get_transaction(tx, recent=2)
    assert bounded.steps == full.steps[-2:]
    assert bounded.earlier_steps_omitted == 3
    assert (bounded.edges, bounded.edge_kinds) == ([], [])
    assert bounded.context == full.context
    assert (bounded.revision_count, bounded.can_undo) == (full.revision_count, full.can_undo)
    assert (await engine.get_transaction(tx, recent=0)).steps == []
    assert (await engine.get_transaction(tx, recent=50)).steps == full.steps
    with pytest.raises(InvalidArgument, match="recent must be 0 or more"):
        await engine.get_transaction(tx, recent=-1)


@pytest.mark.stores("sqlite")
async def test_over_a_running_server_the_reply_is_bounded_alike(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server")
    with server.killed_on_error():
        client = AsyncAgentTxClient(server.address, timeout=30)
        try:
            async with Client(AgentTxMCP(remote(client)).server) as c:
                tx = await _long_history(c)
                got = await call(c, "get_transaction", transaction_id=tx)
                whole = await call(c, "get_transaction", transaction_id=tx, history=True)
        finally:
            await client.close()
    assert server.terminate() == 0  # it outlived the test before (a stray serve process)
    assert len(whole["steps"]) == STEPS + 1
    assert got["steps"] == whole["steps"][-results.RECENT_STEPS :]
    assert got["earlier_steps_omitted"] == STEPS + 1 - results.RECENT_STEPS
    assert "edges" not in got


async def test_every_result_conforms_to_its_tools_output_schema(engine: agenttx.Engine) -> None:
    """The SDK client checks successful results only; a refusal (isError) must conform too,
    or the schema would not describe the tool's results truthfully."""
    mcp = AgentTxMCP(embedded(engine))
    async with Client(mcp.server) as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        tx = await _long_history(c)
        calls: list[tuple[str, dict[str, Any]]] = [
            ("get_transaction", {"transaction_id": tx}),
            ("get_transaction", {"transaction_id": tx, "history": True}),
            ("get_transaction", {"transaction_id": "tx_missing"}),
            ("run_step", {"transaction_id": tx, "step_id": 99, "tool": "kv.get"}),
            (
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": STEPS + 1,
                    "tool": "kv.get",
                    "arguments": {"key": "k1"},
                },
            ),
            ("list_tools", {}),
            ("preview_commit", {"transaction_id": tx}),
            ("commit_transaction", {"transaction_id": tx}),
            ("commit_transaction", {"transaction_id": tx}),
            ("rollback_transaction", {"transaction_id": tx}),
        ]
        refused = 0
        for name, arguments in calls:
            r = await c.call_tool(name, arguments)
            schema = schemas[name]
            assert schema is not None, name
            assert "oneOf" not in schema, name
            validator = validator_for(schema)(schema)
            errors = [e.message for e in validator.iter_errors(r.structured_content)]
            assert errors == [], (name, arguments, errors)
            refused += bool(r.is_error)
        assert refused >= 3  # the missing transaction, the wrong step, the second commit
