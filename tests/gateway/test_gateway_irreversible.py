"""A downstream tool made ``irreversible`` by override (issue 14 point 3) over the real
``@modelcontextprotocol/server-filesystem``: it runs at the step, cannot be undone (undo is
refused, a rollback leaves its effect), is listed in the commit preview, and a policy that
forbids irreversible tools refuses it before anything reaches the server."""

from __future__ import annotations

from pathlib import Path

import pytest

import agenttx
from agenttx.types import StepStatus
from gateway_servers import gateway_engine, npm_server, write_gateway


def gateway_file(tmp_path: Path, root: Path) -> Path:
    return write_gateway(
        tmp_path / "gateway.toml",
        f"""
        [servers.files]
        command = "{npm_server("mcp-server-filesystem")}"
        args = ["{root}"]
        include = ["create_directory", "list_directory"]

        [servers.files.tools.create_directory]
        effect = "irreversible"
        """,
    )


async def test_it_runs_at_the_step_is_previewed_and_cannot_be_undone(
    store_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    engine = await gateway_engine(store_url, tmp_path / "data", gateway_file(tmp_path, root))
    try:
        listed = {t["name"]: t["effect"] for t in engine.list_tools()}
        assert listed["files.create_directory"] == "irreversible"
        tx = (await engine.begin()).transaction_id
        made = root / "made"
        step = await engine.execute_step(tx, 1, "files.create_directory", {"path": str(made)})
        assert step.status is StepStatus.SUCCESS, step.clean_hint
        assert made.is_dir()  # at the step, not at commit
        p = await engine.preview_commit(tx)
        assert [(i.step_id, i.tool) for i in p.changes.irreversible] == [
            (1, "files.create_directory")
        ]
        with pytest.raises(agenttx.UndoRefused, match="irreversible"):
            await engine.undo_step(tx)
        await engine.rollback(tx)
        assert made.is_dir()  # nothing undoes it
    finally:
        await engine.close()


async def test_a_policy_forbidding_irreversible_tools_refuses_it_first(
    store_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text("[forbid]\nirreversible = true\n")
    engine = await gateway_engine(
        store_url, tmp_path / "data", gateway_file(tmp_path, root), safety_policy=policy
    )
    try:
        tx = (await engine.begin()).transaction_id
        with pytest.raises(agenttx.PolicyViolation, match=r"files\.create_directory"):
            await engine.execute_step(tx, 1, "files.create_directory", {"path": str(root / "x")})
        assert not (root / "x").exists()
        assert (await engine.get_transaction(tx)).next_step_id == 1
    finally:
        await engine.close()
