"""The gateway over ``mcp-server-git`` from PyPI (a Python server, 2026-07-28 era) on a
temporary repository: its read tools run at the step, its write tools are staged until
commit."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenttx.types import StepStatus
from gateway_servers import gateway_engine, git_server, write_gateway


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "Test")
    (path / "a.txt").write_text("one\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    (path / "b.txt").write_text("two\n")
    return path


@pytest.fixture
async def engine(store_url: str, tmp_path: Path, repo: Path) -> AsyncIterator[Any]:
    binary = git_server()
    gateway = write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.git]
        command = "{binary}"
        args = ["--repository", "{repo}"]
        """,
    )
    engine = await gateway_engine(store_url, tmp_path / "data", gateway)
    yield engine
    await engine.close()


async def test_read_tools_run_at_the_step(engine: Any, repo: Path) -> None:
    tx = (await engine.begin()).transaction_id
    status = await engine.execute_step(tx, 1, "git.git_status", {"repo_path": str(repo)})
    assert status.status is StepStatus.SUCCESS, status
    assert "b.txt" in status.output["text"]
    log = await engine.execute_step(tx, 2, "git.git_log", {"repo_path": str(repo)})
    assert "first" in log.output["text"]


async def test_a_write_tool_is_staged_until_commit(engine: Any, repo: Path) -> None:
    effects = {t["name"]: t["effect"] for t in engine.list_tools() if t.get("server") == "git"}
    assert effects["git.git_add"] == "staged"
    assert effects["git.git_status"] == "read"
    tx = (await engine.begin()).transaction_id
    step = await engine.execute_step(
        tx, 1, "git.git_add", {"repo_path": str(repo), "files": ["b.txt"]}
    )
    assert step.status is StepStatus.SUCCESS
    assert step.output["io.agenttx/staged"] is True
    assert git(repo, "diff", "--cached", "--name-only") == ""  # nothing staged in git yet
    committed = await engine.commit(tx)
    assert committed.effects_dispatched == 1, committed.dispatch_errors
    assert git(repo, "diff", "--cached", "--name-only").split() == ["b.txt"]


async def test_a_rolled_back_write_tool_never_runs(engine: Any, repo: Path) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "git.git_add", {"repo_path": str(repo), "files": ["b.txt"]})
    await engine.rollback(tx)
    assert git(repo, "diff", "--cached", "--name-only") == ""
