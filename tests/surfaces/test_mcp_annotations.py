"""The MCP tools' hints (read-only, destructive, idempotent, open-world) are the ones
docs/mcp.md's Tools table decides and explains — hosts act on them, some asking a person
before every destructive call — and the behavioural ones hold: a read changes no
transaction, and a call hinted idempotent changes nothing when made a second time."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agenttx.api.mcp.effect_tools import add_effect_tools
from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP
from mcp_harness import structured

pytestmark = pytest.mark.stores("sqlite")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
HINTS = ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")


def documented_hints() -> dict[str, tuple[bool, ...]]:
    """The Tools table of docs/mcp.md: tool → its four hints (yes/no columns)."""
    text = DOCS.read_text()
    header = "| tool | parameters | read-only | destructive | idempotent | open-world |"
    table = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    hints: dict[str, tuple[bool, ...]] = {}
    for row in table:
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[0])
        assert name, row
        assert set(cells[-4:]) <= {"yes", "no"}, row
        assert name[1] not in hints, f"{name[1]} is listed twice"
        hints[name[1]] = tuple(c == "yes" for c in cells[-4:])
    return hints


@asynccontextmanager
async def mcp_client(engine: Any) -> AsyncIterator[Client]:
    mcp = AgentTxMCP(embedded(engine))
    add_effect_tools(mcp)  # every MCP tool AgentTx has
    async with Client(mcp.server) as c:
        yield c


async def test_the_docs_table_is_what_the_server_lists(engine: Any) -> None:
    async with mcp_client(engine) as c:
        tools = (await c.list_tools()).tools
    listed = {
        t.name: tuple(getattr(t.annotations, h) for h in HINTS)
        for t in tools
        if t.annotations is not None
    }
    assert len(listed) == len(tools)  # every tool has its annotations
    assert all(None not in hints for hints in listed.values())  # each hint decided, none left
    assert documented_hints() == listed
    destructive = {name for name, hints in listed.items() if hints[1]}
    # Of an agent's calls only the commit; the rest undo what a commit made final.
    assert destructive == {
        "commit_transaction",
        "compensate_transaction",
        "approve_compensation",
        "refuse_compensation",
    }


class Calls:
    """An MCP client's calls, and a transaction's view to compare before and after."""

    def __init__(self, c: Client) -> None:
        self.c = c

    async def __call__(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        return structured(await self.c.call_tool(tool, arguments))

    async def view(self, tx: str) -> dict[str, Any]:
        """What a repeated call must leave as it was: the whole transaction (its steps,
        status, revision, receipts and decisions) and the state it wrote."""
        got = await self("get_transaction", transaction_id=tx, history=True)
        assert got["ok"], got
        return got

    async def begin_with_steps(self, steps: int, **begin: Any) -> str:
        tx: str = (await self("begin_transaction", **begin))["transaction_id"]
        for step in range(1, steps + 1):
            arguments = {"key": f"{tx}/{step}", "value": step}
            done = await self(
                "run_step", transaction_id=tx, step_id=step, tool="kv.put", arguments=arguments
            )
            assert done["status"] == "SUCCESS", done
        return tx

    async def twice_the_same(self, tx: str, tool: str, /, **arguments: Any) -> dict[str, Any]:
        """Make the call, then the same call again: the second must change nothing."""
        first = await self(tool, transaction_id=tx, **arguments)
        assert first["ok"], (tool, first)
        before = await self.view(tx)
        second = await self(tool, transaction_id=tx, **arguments)
        assert await self.view(tx) == before, (tool, arguments, second)
        return second


async def test_a_call_hinted_idempotent_changes_nothing_the_second_time(engine: Any) -> None:
    async with mcp_client(engine) as c:
        calls = Calls(c)
        hinted = {t.name for t in (await c.list_tools()).tools if t.annotations.idempotent_hint}  # type: ignore[union-attr]
        checked: set[str] = set()

        tx = await calls.begin_with_steps(0)
        arguments = {"key": "once", "value": 1}
        again = await calls.twice_the_same(
            tx, "run_step", step_id=1, tool="kv.put", arguments=arguments
        )
        assert again["error"]["code"] == "WRONG_STEP"  # a step_id runs once
        checked.add("run_step")

        tx = await calls.begin_with_steps(1)
        await calls.twice_the_same(tx, "commit_transaction")
        checked.add("commit_transaction")

        tx = await calls.begin_with_steps(3)
        await calls.twice_the_same(tx, "rollback_transaction", to_step=2)
        assert (await calls.view(tx))["next_step_id"] == 2
        await calls("undo_step", transaction_id=tx)
        await calls.twice_the_same(tx, "redo_step")
        await calls.twice_the_same(tx, "rollback_transaction")
        checked |= {"rollback_transaction", "redo_step"}

        tx = await calls.begin_with_steps(1, principal="bob", mode="approval_required")
        receipt = (await calls("preview_commit", transaction_id=tx))["receipt_id"]
        approver = {"principal": "alice", "roles": ["approver"]}
        await calls.twice_the_same(tx, "approve_commit", receipt_id=receipt, **approver)
        await calls(
            "run_step",
            transaction_id=tx,
            step_id=2,
            tool="kv.put",
            arguments={"key": "k", "value": 2},
        )
        receipt = (await calls("preview_commit", transaction_id=tx))["receipt_id"]
        reason = {"reason": "not like this"}
        await calls.twice_the_same(tx, "refuse_commit", receipt_id=receipt, **approver, **reason)
        checked |= {"approve_commit", "refuse_commit"}

        reads = {t.name for t in (await c.list_tools()).tools if t.annotations.read_only_hint}  # type: ignore[union-attr]
        assert checked <= hinted  # each call shown idempotent here says so to hosts
        assert hinted - checked == reads  # every other idempotent hint is on a read


async def test_a_read_changes_no_transaction(engine: Any) -> None:
    async with mcp_client(engine) as c:
        calls = Calls(c)
        tools = (await c.list_tools()).tools
        reads = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
        assert reads == {
            "get_transaction",
            "list_tools",
            "list_transactions",
            "preview_commit",
            "find_transaction",
            "list_effects",
        }
        tx = await calls.begin_with_steps(2)
        receipt = (await calls("preview_commit", transaction_id=tx))["receipt_id"]
        before = await calls.view(tx)
        arguments = {
            "get_transaction": {"transaction_id": tx},
            "preview_commit": {"transaction_id": tx},
            "find_transaction": {"receipt_id": receipt},
        }
        for name in sorted(reads):
            assert (await calls(name, **arguments.get(name, {})))["ok"], name
        after = await calls.view(tx)
    # A preview hands out a receipt (kept with the transaction, listed by get_transaction);
    # the transaction itself — steps, state, revision, status — is as it was.
    assert {k: v for k, v in after.items() if k != "receipts"} == {
        k: v for k, v in before.items() if k != "receipts"
    }
