"""Staged downstream calls after commit, on the real memory and filesystem servers: a call the
tool answers with ``isError`` is retried and then dead-lettered with its reason; a call whose
delivery was interrupted mid-call (its journal says ``started``) is never made blindly again:
a non-idempotent tool's effect is dead with "outcome unknown", an idempotent one is made."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway_servers import gateway_engine, npm_server, write_gateway


@pytest.fixture
async def engine(store_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    root = tmp_path / "srv"
    root.mkdir()
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.memory]
        command = "{npm_server("mcp-server-memory")}"
        env = {{ MEMORY_FILE_PATH = "{tmp_path / "memory.jsonl"}" }}

        [servers.files]
        command = "{npm_server("mcp-server-filesystem")}"
        args = ["{root}"]
        include = ["write_file"]
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    engine.dispatcher.max_attempts = 2
    engine.dispatcher.backoff_base_s = 0.0
    yield engine
    await engine.close()


async def graph_relations(engine: Any) -> list[tuple[str, str]]:
    tx = (await engine.begin()).transaction_id
    graph = await engine.execute_step(tx, 1, "memory.read_graph", {})
    await engine.rollback(tx)
    return [(r["from"], r["to"]) for r in graph.output["relations"]]


def mark_started(data_dir: Path, key: str) -> None:
    """What the journal holds after a crash in the middle of the call for ``key``."""
    with (data_dir / "gateway-deliveries.jsonl").open("a") as f:
        f.write(json.dumps({"key": key, "state": "started"}) + "\n")


async def test_an_is_error_answer_is_retried_then_dead_lettered(engine: Any) -> None:
    tx = (await engine.begin()).transaction_id
    # Observations for an entity that does not exist: the tool answers isError.
    step = await engine.execute_step(
        tx,
        1,
        "memory.add_observations",
        {"observations": [{"entityName": "ghost", "contents": ["boo"]}]},
    )
    assert step.output["io.agenttx/staged"] is True
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 0
    assert "ghost" in committed.dispatch_errors[0]
    dead_rows: list[Any] = []
    for _ in range(200):  # the second and last attempt (ours, or the background loop's)
        await engine.dispatcher.run_once()
        dead_rows = await engine.store.list_outbox(statuses=["dead"])
        if dead_rows:
            break
        await asyncio.sleep(0.05)
    (dead,) = dead_rows
    assert dead.attempts == 2
    assert "ghost" in dead.last_error


async def test_an_interrupted_non_idempotent_call_is_dead_as_outcome_unknown(
    engine: Any, tmp_path: Path
) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx,
        1,
        "memory.create_relations",
        {"relations": [{"from": "a", "to": "b", "relationType": "knows"}]},
    )
    mark_started(tmp_path / "data", step.output["idempotency_key"])
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 0
    (dead,) = await engine.store.list_outbox(statuses=["dead"])
    assert "outcome unknown" in dead.last_error
    assert dead.attempts == 1  # dead at once: never a blind retry
    assert await graph_relations(engine) == []
    # The operator checked downstream (it did not happen) and requeues it: now it is made.
    assert await engine.store.requeue_outbox(dead.id, now=engine.clock())
    for _ in range(200):
        await engine.dispatcher.run_once()
        if await graph_relations(engine):
            break
        await asyncio.sleep(0.05)
    assert await graph_relations(engine) == [("a", "b")]


async def test_an_interrupted_idempotent_call_is_made_again(engine: Any, tmp_path: Path) -> None:
    target = tmp_path / "srv" / "out.txt"
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, "files.write_file", {"path": str(target), "content": "same"}
    )  # write_file declares idempotentHint
    mark_started(tmp_path / "data", step.output["idempotency_key"])
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 1, committed.dispatch_errors
    assert target.read_text() == "same"
