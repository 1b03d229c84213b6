"""Dry runs (``execute_step(..., dry_run=True)``): each fidelity level is reached as the tool
declares, what would change is reported, and nothing durable is left behind, on both stores."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import Fidelity, StepStatus
from agenttx.core.tool_policy import PolicyDecision, PolicyVerdict
from agenttx.store.contract import TxRow
from agenttx.tools.contract import Tool
from undo_tools import CALLS, TOOLS, trace


@pytest.fixture
async def dry_engine(open_engine: Any) -> agenttx.Engine:
    CALLS.clear()
    return await open_engine(tools=TOOLS)  # type: ignore[no-any-return]


async def _begun_with_a_step(engine: agenttx.Engine) -> str:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    return tx


@pytest.mark.parametrize(
    ("tool", "arguments", "reached"),
    [
        ("t.schema", {"amount": 5}, Fidelity.SCHEMA_ONLY),
        ("t.policy", {"amount": 5}, Fidelity.POLICY_AND_SCHEMA),
        ("t.validated", {"amount": 5}, Fidelity.DOWNSTREAM_VALIDATION),
        ("t.simulated", {"amount": 5}, Fidelity.FULL_SIMULATION),
        ("kv.put", {"key": "a", "value": 2}, Fidelity.FULL_SIMULATION),
        ("effect.stage", {"channel": "email", "payload": {"to": "x"}}, Fidelity.FULL_SIMULATION),
    ],
)
async def test_a_dry_run_at_each_fidelity_leaves_no_trace(
    dry_engine: agenttx.Engine, tool: str, arguments: dict[str, Any], reached: Fidelity
) -> None:
    tx = await _begun_with_a_step(dry_engine)
    before = await trace(dry_engine, tx)

    r = await dry_engine.execute_step(tx, 2, tool, arguments, dry_run=True)

    assert r.status is StepStatus.SUCCESS, r.clean_hint
    assert r.dry_run is not None
    assert r.dry_run.fidelity is reached
    assert r.dry_run.would_succeed
    assert r.next_step_id == 2  # unchanged: the dry run was not a step
    assert await trace(dry_engine, tx) == before  # history, state, undo, audit, outbox
    assert CALLS == []  # no tool ran for real
    info = await dry_engine.get_transaction(tx)
    assert info.next_step_id == 2
    assert [s.step_id for s in info.steps] == [1]
    # The real step runs afterwards as if the dry run never happened.
    real = await dry_engine.execute_step(tx, 2, tool, arguments)
    assert real.status is StepStatus.SUCCESS
    assert real.next_step_id == 3


async def test_the_reply_says_what_would_change(dry_engine: agenttx.Engine) -> None:
    tx = await _begun_with_a_step(dry_engine)
    r = await dry_engine.execute_step(tx, 2, "kv.put", {"key": "a", "value": 7}, dry_run=True)
    assert r.dry_run is not None
    assert r.dry_run.changes["writes"] == [{"key": "kv/a", "before": 1, "after": 7}]
    assert r.output == {"key": "a", "value": 7}

    s = await dry_engine.execute_step(tx, 2, "t.simulated", {"amount": 9}, dry_run=True)
    assert s.dry_run is not None
    assert s.dry_run.declared is Fidelity.FULL_SIMULATION
    assert s.output == {"charged": 9, "simulated": True}
    assert s.dry_run.changes["writes"] == [{"key": "charges/last", "before": None, "after": 9}]
    assert s.dry_run.changes["effects"] == [
        {
            "channel": "email",
            "idempotency_key": "receipt-1",
            "payload": {"to": "a@example.com", "amount": 9},
        }
    ]
    assert s.dry_run.changes["undo"] == ["t.simulated#undo"]
    v = await dry_engine.execute_step(tx, 2, "t.validated", {"amount": 3}, dry_run=True)
    assert v.dry_run is not None
    assert v.dry_run.changes["validation"] == {"provider": "accepts", "amount": 3}
    assert v.output is None  # validation says whether, not what


async def test_references_resolve_against_earlier_steps(dry_engine: agenttx.Engine) -> None:
    tx = await _begun_with_a_step(dry_engine)
    r = await dry_engine.execute_step(
        tx, 2, "kv.put", {"key": "b", "value": "${steps.1.value}"}, dry_run=True
    )
    assert r.status is StepStatus.SUCCESS
    assert r.dry_run is not None
    assert r.dry_run.changes["writes"] == [{"key": "kv/b", "before": None, "after": 1}]
    # A reference to a step not run yet fails the dry run with the hint a step would get.
    bad = await dry_engine.execute_step(
        tx, 2, "kv.put", {"key": "b", "value": "${steps.2.value}"}, dry_run=True
    )
    assert bad.status is StepStatus.FAILED
    assert bad.dry_run is not None
    assert not bad.dry_run.would_succeed
    assert bad.clean_hint.startswith("Hint: ")
    assert bad.next_step_id == 2


async def test_a_failed_check_stops_at_its_level_and_keeps_nothing(
    dry_engine: agenttx.Engine,
) -> None:
    tx = await _begun_with_a_step(dry_engine)
    before = await trace(dry_engine, tx)
    schema = await dry_engine.execute_step(tx, 2, "t.validated", {"amount": "x"}, dry_run=True)
    assert schema.status is StepStatus.FAILED
    assert schema.dry_run is not None
    assert schema.dry_run.fidelity is Fidelity.SCHEMA_ONLY
    assert "amount" in schema.clean_hint

    refused = await dry_engine.execute_step(tx, 2, "t.validated", {"amount": -1}, dry_run=True)
    assert refused.status is StepStatus.FAILED
    assert refused.dry_run is not None
    assert refused.dry_run.fidelity is Fidelity.DOWNSTREAM_VALIDATION
    assert not refused.dry_run.would_succeed
    assert refused.clean_hint.startswith("Hint: ")

    limit = await dry_engine.execute_step(tx, 2, "t.simulated", {"amount": 5000}, dry_run=True)
    assert limit.dry_run is not None
    assert limit.dry_run.fidelity is Fidelity.DOWNSTREAM_VALIDATION  # the sync validator
    assert not limit.dry_run.would_succeed

    unknown = await dry_engine.execute_step(tx, 2, "kv.putt", {}, dry_run=True)
    assert unknown.status is StepStatus.FAILED
    assert "kv.put" in unknown.clean_hint

    assert await trace(dry_engine, tx) == before
    assert (await dry_engine.get_transaction(tx)).constraints == []  # no hint was kept


async def test_a_missing_handler_is_a_level_not_reached(dry_engine: agenttx.Engine) -> None:
    tx = await _begun_with_a_step(dry_engine)
    r = await dry_engine.execute_step(tx, 2, "t.unvalidated", {"amount": 1}, dry_run=True)
    assert r.status is StepStatus.SUCCESS
    assert r.dry_run is not None
    assert r.dry_run.declared is Fidelity.DOWNSTREAM_VALIDATION
    assert r.dry_run.fidelity is Fidelity.POLICY_AND_SCHEMA
    assert "validate handler" in r.dry_run.notes[0]


async def test_the_old_labels_map_to_the_four_levels() -> None:
    import undo_tools

    assert undo_tools.legacy_tool.dry_run == "full_simulation"

    @agenttx.tool(name="t.old", dry_run="validated")
    async def old(ctx: agenttx.ToolContext) -> None: ...

    assert old.dry_run == "downstream_validation"
    with pytest.raises(agenttx.InvalidArgument, match="schema_only"):
        agenttx.tool(name="t.bad", dry_run="guess")(old.fn)  # type: ignore[arg-type]


class _Policy:
    """A policy that forbids one tool and wants approval for another."""

    def decide(self, transaction: TxRow, tool: Tool, arguments: Any) -> PolicyVerdict:
        if tool.name == "t.policy" and arguments.get("amount", 0) > 100:
            return PolicyVerdict(PolicyDecision.FORBIDDEN, "amounts over 100 are forbidden")
        if tool.name == "t.simulated":
            return PolicyVerdict(PolicyDecision.NEEDS_APPROVAL, "charges need an approver")
        return PolicyVerdict(PolicyDecision.ALLOWED)


async def test_the_policy_decision_is_reported(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS, tool_policy=_Policy())
    tx = (await engine.begin()).transaction_id
    ok = await engine.execute_step(tx, 1, "t.policy", {"amount": 5}, dry_run=True)
    assert ok.dry_run is not None
    assert ok.dry_run.policy == "allowed"
    no = await engine.execute_step(tx, 1, "t.policy", {"amount": 500}, dry_run=True)
    assert no.status is StepStatus.FAILED
    assert no.dry_run is not None
    assert no.dry_run.policy == "forbidden"
    assert "forbid" in no.clean_hint
    ask = await engine.execute_step(tx, 1, "t.simulated", {"amount": 5}, dry_run=True)
    assert ask.dry_run is not None
    assert ask.dry_run.policy == "needs_approval"
    assert ask.status is StepStatus.SUCCESS
    assert "approved receipt" in ask.dry_run.notes[0]
    schema = await engine.execute_step(tx, 1, "t.schema", {"amount": 5}, dry_run=True)
    assert schema.dry_run is not None
    assert schema.dry_run.policy == ""


async def test_fs_write_dry_run_changes_no_file(dry_engine: agenttx.Engine, tmp_path: Path) -> None:
    tx = (await dry_engine.begin()).transaction_id
    await dry_engine.execute_step(tx, 1, "fs.write", {"path": "a.txt", "contents": "old"})
    r = await dry_engine.execute_step(
        tx, 2, "fs.write", {"path": "a.txt", "contents": "new"}, dry_run=True
    )
    assert r.status is StepStatus.SUCCESS, r.clean_hint
    assert r.output == {
        "path": "a.txt",
        "bytes": 3,
        "before_sha256": hashlib.sha256(b"old").hexdigest(),
        "after_sha256": hashlib.sha256(b"new").hexdigest(),
    }
    assert (tmp_path / "files" / "a.txt").read_text() == "old"
    fresh = await dry_engine.execute_step(
        tx, 2, "fs.write", {"path": "b/c.txt", "contents": "x"}, dry_run=True
    )
    assert fresh.output is not None
    assert fresh.output["before_sha256"] == ""
    assert not (tmp_path / "files" / "b").exists()
    escape = await dry_engine.execute_step(
        tx, 2, "fs.write", {"path": "../out.txt", "contents": "x"}, dry_run=True
    )
    assert escape.status is StepStatus.FAILED


async def test_a_dry_run_keeps_the_step_rules(dry_engine: agenttx.Engine) -> None:
    tx = await _begun_with_a_step(dry_engine)
    with pytest.raises(agenttx.WrongStep):
        await dry_engine.execute_step(tx, 5, "kv.get", {"key": "a"}, dry_run=True)
    with pytest.raises(agenttx.InvalidArgument):
        await dry_engine.execute_step(tx, 2, "kv.get", {"key": "a"}, dry_run="yes")  # type: ignore[arg-type]
    await dry_engine.commit(tx)
    with pytest.raises(agenttx.NotActive):
        await dry_engine.execute_step(tx, 2, "kv.get", {"key": "a"}, dry_run=True)
