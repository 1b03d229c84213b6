"""A transaction's read says whether its commit would need an approval, and why (issue 22
point 2.13): ``approval_reasons``, the reasons a preview gives, from the mode and the policy
file's approval rules as the live steps stand; empty when nothing asks, and once it ended.
The dashboard shows its approve screen only where they are not empty. On both stores, and
over gRPC and HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from agenttx.cli import main
from agenttx.client import AgentTxClient
from agenttx.core.safety import SafetyPolicy
from http_harness import http_base, request, start_http_server

POLICY = SafetyPolicy(approval_tools=frozenset({"kv.delete"}), source="test policy")


async def test_a_read_says_why_a_commit_would_need_approval(open_engine: Any) -> None:
    engine = await open_engine(safety_policy=POLICY, background=False)
    asked = (await engine.begin(principal="alice", mode="approval_required")).transaction_id
    assert (await engine.get_transaction(asked)).approval_reasons == ["mode approval_required"]
    plain = (await engine.begin()).transaction_id
    await engine.execute_step(plain, 1, "kv.put", {"key": "k", "value": 1})
    assert (await engine.get_transaction(plain)).approval_reasons == []
    # A step the policy names: from now on a commit needs approval, as a preview says.
    await engine.execute_step(plain, 2, "kv.delete", {"key": "k"})
    reasons = (await engine.get_transaction(plain)).approval_reasons
    assert reasons == ["policy: tool 'kv.delete' needs approval"]
    assert (await engine.preview_commit(plain)).approval_reasons == reasons
    # Undone, the step no longer counts.
    await engine.undo_step(plain)
    assert (await engine.get_transaction(plain)).approval_reasons == []
    # autonomous_trusted is exempt from the approval rules; an ended transaction commits no more.
    trusted = (await engine.begin(mode="autonomous_trusted")).transaction_id
    await engine.execute_step(trusted, 1, "kv.delete", {"key": "k"})
    assert (await engine.get_transaction(trusted)).approval_reasons == []
    await engine.rollback(asked)
    assert (await engine.get_transaction(asked)).approval_reasons == []


def test_grpc_and_http_reads_carry_the_reasons(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[approval]\ntools = ["kv.delete"]\n')
    server = start_http_server(tmp_path / "data", "--policy", str(policy))
    with server.killed_on_error(), AgentTxClient(server.address) as client:
        tx = client.begin().transaction_id
        assert client.get_transaction(tx).approval_reasons == []
        client.execute_step(tx, 1, "kv.delete", {"key": "k"})
        assert client.get_transaction(tx).approval_reasons == [
            "policy: tool 'kv.delete' needs approval"
        ]
        got = request(http_base(server), "GET", f"/v1/transactions/{tx}").json
        assert got["approval_reasons"] == ["policy: tool 'kv.delete' needs approval"]
        shown = CliRunner().invoke(
            main, ["tx", "show", tx, "--server", server.address], env={"COLUMNS": "240"}
        )
        assert shown.exit_code == 0, shown.output
        assert "needs approval     policy: tool 'kv.delete' needs approval" in shown.output
    assert server.terminate() == 0
