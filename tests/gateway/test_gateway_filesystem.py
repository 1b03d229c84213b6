"""The gateway over the real ``@modelcontextprotocol/server-filesystem``: ``write_file`` is
staged (it has no undo, so it waits for commit), reads run at the step, a downstream error is
a step failure with a cleaned hint, and a reference to a staged output fails with a hint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus
from gateway_servers import gateway_engine, npm_server, write_gateway


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "srv"
    path.mkdir()
    (path / "notes.txt").write_text("first line\n")
    return path


@pytest.fixture
async def engine(store_url: str, tmp_path: Path, root: Path) -> AsyncIterator[Any]:
    binary = npm_server("mcp-server-filesystem")
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.files]
        command = "{binary}"
        args = ["{root}"]
        include = ["read_text_file", "write_file", "list_directory"]
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


async def test_the_tools_are_listed_as_server_dot_tool_with_schemas(engine: Any) -> None:
    tools = {t["name"]: t for t in engine.list_tools() if t.get("server") == "files"}
    assert set(tools) == {"files.read_text_file", "files.write_file", "files.list_directory"}
    assert tools["files.read_text_file"]["effect"] == "read"
    assert tools["files.write_file"]["effect"] == "staged"
    assert "path" in tools["files.write_file"]["input_schema"]["properties"]
    assert tools["files.read_text_file"]["output_schema"]["type"] == "object"


async def test_a_read_returns_the_content_at_the_step(engine: Any, root: Path) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, "files.read_text_file", {"path": str(root / "notes.txt")}
    )
    assert step.status is StepStatus.SUCCESS
    assert step.output["content"] == "first line\n"


async def test_a_rolled_back_write_leaves_the_directory_untouched(engine: Any, root: Path) -> None:
    before = sorted(p.name for p in root.iterdir())
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, "files.write_file", {"path": str(root / "new.txt"), "content": "hello"}
    )
    assert step.status is StepStatus.SUCCESS
    assert step.output["io.agenttx/staged"] is True
    assert step.output["runs"] == "after commit"
    # Staged: nothing happened downstream yet, so a later read does not see it.
    listing = await engine.execute_step(tx, 2, "files.list_directory", {"path": str(root)})
    assert "new.txt" not in listing.output["content"]
    await engine.rollback(tx)
    assert sorted(p.name for p in root.iterdir()) == before


async def test_a_committed_write_is_made_once(engine: Any, root: Path) -> None:
    target = root / "new.txt"
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "files.write_file", {"path": str(target), "content": "hi"})
    assert not target.exists()
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 1, committed.dispatch_errors
    assert target.read_text() == "hi"
    made = target.stat().st_mtime_ns
    # Another pass of the dispatcher finds nothing to deliver: the file is not written again.
    assert await engine.dispatcher.run_once() == 0
    assert target.stat().st_mtime_ns == made


async def test_a_missing_file_is_a_step_failure_with_a_hint(engine: Any, root: Path) -> None:
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, "files.read_text_file", {"path": str(root / "nope.txt")}
    )
    assert step.status is not StepStatus.SUCCESS
    assert step.clean_hint.startswith("Hint: ")
    assert "nope.txt" in step.clean_hint
    assert "does not exist" in step.clean_hint


async def test_a_reference_to_a_staged_output_fails_with_a_hint(engine: Any, root: Path) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(
        tx, 1, "files.write_file", {"path": str(root / "new.txt"), "content": "hello"}
    )
    step = await engine.execute_step(
        tx, 2, "files.write_file", {"path": str(root / "copy.txt"), "content": "${steps.1.content}"}
    )
    assert step.status is StepStatus.ROLLBACK_TRIGGERED
    assert "only after commit" in step.clean_hint
    assert "files.write_file" in step.clean_hint
    # The agent retries its own step; the staged one is not rewound.
    assert step.next_step_id == 2
