"""The gateway over the real ``@modelcontextprotocol/server-memory``: ``create_entities`` with
``delete_entities`` as its configured undo is compensatable — it runs at the step, and a
rollback or a failing later step removes what it created, leaving the graph as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus
from gateway_servers import gateway_engine, npm_server, write_gateway

ALICE = {"name": "alice", "entityType": "person", "observations": ["likes tea"]}
BOB = {"name": "bob", "entityType": "person", "observations": []}


@pytest.fixture
async def engine(store_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    binary = npm_server("mcp-server-memory")
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.memory]
        command = "{binary}"
        env = {{ MEMORY_FILE_PATH = "{tmp_path / "memory.jsonl"}" }}

        [servers.memory.tools.create_entities.undo]
        tool = "delete_entities"
        arguments = {{ entityNames = "${{args.entities.*.name}}" }}
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


async def names(engine: Any) -> list[str]:
    tx = (await engine.begin()).transaction_id
    graph = await engine.execute_step(tx, 1, "memory.read_graph", {})
    await engine.rollback(tx)
    return sorted(e["name"] for e in graph.output["entities"])


async def test_create_entities_is_compensatable_by_its_configured_undo(engine: Any) -> None:
    tools = {t["name"]: t for t in engine.list_tools()}
    assert tools["memory.create_entities"]["effect"] == "compensatable"
    assert tools["memory.read_graph"]["effect"] == "read"
    assert tools["memory.add_observations"]["effect"] == "staged"  # no undo: the default


async def test_a_rollback_leaves_the_graph_as_it_was(engine: Any) -> None:
    seed = (await engine.begin()).transaction_id
    await engine.execute_step(seed, 1, "memory.create_entities", {"entities": [BOB]})
    await engine.commit(seed)
    assert await names(engine) == ["bob"]

    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(tx, 1, "memory.create_entities", {"entities": [ALICE]})
    assert step.status is StepStatus.SUCCESS
    assert await names(engine) == ["alice", "bob"]  # it ran at the step
    rolled = await engine.rollback(tx)
    assert rolled.compensation_errors == []
    assert await names(engine) == ["bob"]


async def test_a_failing_later_step_triggers_the_compensation(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "memory.create_entities", {"entities": [ALICE]})
    assert await names(engine) == ["alice"]
    # Step 2 uses a key step 1 never returned: the controller traces it to step 1 and
    # rewinds there, which runs step 1's undo downstream.
    failed = await engine.execute_step(
        tx,
        2,
        "memory.add_observations",
        {"observations": [{"entityName": "${steps.1.entity_name}", "contents": ["x"]}]},
    )
    assert failed.status is StepStatus.ROLLBACK_TRIGGERED, failed
    assert failed.rollback_to_step == 1
    assert failed.next_step_id == 1
    assert failed.compensation_errors == []
    assert await names(engine) == []
