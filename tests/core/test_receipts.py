"""Preview and receipts, snapshot echo and approvals on every store (issue 13, points 1–2).

A preview lists exactly what the commit would do and hands out a receipt bound to the change
hash and the revision; the commit takes the echoed snapshot and the receipt; an
``approval_required`` transaction commits only a receipt approved, once, by another principal
holding ``approver``."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx.errors import (
    ApprovalRefused,
    ApprovalRequired,
    InvalidArgument,
    NotActive,
    ReceiptRefused,
    SnapshotMismatch,
)
from conftest import FakeClock


@agenttx.tool(name="rcpt.charge", effect="compensatable", idempotent=True)
async def charge(ctx: agenttx.ToolContext, amount: int) -> dict[str, int]:
    await ctx.register_undo({"amount": amount})
    return {"charged": amount}


@charge.undo
async def refund(ctx: Any, amount: int) -> None:
    return None


@agenttx.tool(name="rcpt.launch", effect="irreversible")
async def launch(ctx: agenttx.ToolContext, target: str) -> dict[str, str]:
    return {"launched": target}


TOOLS = (charge, launch)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def approval_tx(engine: agenttx.Engine) -> str:
    b = await engine.begin(agent_id="a", principal="bob", mode="approval_required")
    tx = b.transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "acct/1", "value": 100})
    return tx


async def test_preview_lists_exactly_what_the_commit_would_do(
    open_engine: Any, tmp_path: Path
) -> None:
    engine = await open_engine(tools=TOOLS)
    # Committed state the transaction then overwrites and deletes.
    setup = (await engine.begin()).transaction_id
    await engine.execute_step(setup, 1, "kv.put", {"key": "k/over", "value": {"n": 1}})
    await engine.execute_step(setup, 2, "kv.put", {"key": "k/gone", "value": "bye"})
    await engine.execute_step(setup, 3, "fs.write", {"path": "notes.txt", "contents": "a\nb\n"})
    await engine.commit(setup)

    tx = (await engine.begin()).transaction_id
    steps: list[tuple[str, dict[str, Any]]] = [
        ("kv.put", {"key": "k/over", "value": {"n": 2}}),
        ("kv.put", {"key": "k/new", "value": [1, 2]}),
        ("kv.delete", {"key": "k/gone"}),
        ("fs.write", {"path": "notes.txt", "contents": "a\nc\n"}),
        ("fs.write", {"path": "fresh.bin", "contents": "x"}),
        ("effect.stage", {"channel": "email", "payload": {"to": "x@y"}, "idempotency_key": "m1"}),
        ("rcpt.charge", {"amount": 5}),
        ("rcpt.launch", {"target": "moon"}),
    ]
    for i, (tool, args) in enumerate(steps, start=1):
        r = await engine.execute_step(tx, i, tool, args)
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    before = await engine.get_transaction(tx)
    p = await engine.preview_commit(tx)

    assert p.revision == before.revision  # a preview changes no revision
    assert (await engine.get_transaction(tx)).revision == before.revision
    assert p.snapshot == agenttx.Snapshot(tx, before.revision)
    assert p.receipt_id.startswith("rcpt_")
    assert len(p.change_hash) == 64
    assert p.approval_required is False
    assert p.approval_reasons == []

    state = {c.key: (c.before, c.after) for c in p.changes.state}
    assert state == {
        "kv/k/gone": ("bye", None),
        "kv/k/new": (None, [1, 2]),
        "kv/k/over": ({"n": 1}, {"n": 2}),
    }
    assert [c.key for c in p.changes.state] == sorted(state)
    gone = next(c for c in p.changes.state if c.key == "kv/k/gone")
    assert gone.before_sha256 == sha(b'"bye"')
    assert gone.after_sha256 == ""

    files = {f.path: f for f in p.changes.files}
    assert set(files) == {"fresh.bin", "notes.txt"}
    notes = files["notes.txt"]
    assert (notes.before_sha256, notes.after_sha256) == (sha(b"a\nb\n"), sha(b"a\nc\n"))
    assert "-b\n" in notes.diff
    assert "+c\n" in notes.diff
    assert "--- a/notes.txt" in notes.diff
    assert files["fresh.bin"].before_sha256 == ""
    assert files["fresh.bin"].after_sha256 == sha(b"x")

    [effect] = p.changes.effects
    assert (effect.step_id, effect.channel, effect.idempotency_key) == (6, "email", "m1")
    assert effect.summary == '{"to":"x@y"}'
    assert effect.payload_sha256 == sha(b'{"to":"x@y"}')

    [irreversible] = p.changes.irreversible
    assert (irreversible.step_id, irreversible.tool) == (8, "rcpt.launch")
    undo = [(u.step_id, u.handler) for u in p.changes.discarded_undo]
    assert undo == [(4, "fs.restore_file"), (5, "fs.restore_file"), (7, "rcpt.charge#undo")]

    # The preview is an audit event, and the chain still verifies.
    records = await engine.audit_records(tx)
    assert records[-1].kind == "preview"
    data = records[-1].content()["data"]
    assert (data["receipt_id"], data["change_hash"]) == (p.receipt_id, p.change_hash)
    assert (await engine.verify_audit(tx)).ok

    c = await engine.commit(tx, expected_revision=p.revision, receipt_id=p.receipt_id)
    assert c.committed
    assert c.snapshot.transaction_id == tx


async def test_the_same_change_gives_the_same_hash_and_another_change_another(
    engine: agenttx.Engine,
) -> None:
    async def tx_with(value: Any) -> str:
        tx = (await engine.begin()).transaction_id
        await engine.execute_step(tx, 1, "kv.put", {"key": "same/k", "value": value})
        await engine.execute_step(tx, 2, "kv.put", {"key": "same/j", "value": "v"})
        return tx

    a, b, c = await tx_with(1), await tx_with(1), await tx_with(2)
    pa1, pa2 = await engine.preview_commit(a), await engine.preview_commit(a)
    pb, pc = await engine.preview_commit(b), await engine.preview_commit(c)
    assert pa1.receipt_id != pa2.receipt_id
    assert pa1.change_hash == pa2.change_hash == pb.change_hash
    assert pc.change_hash != pa1.change_hash
    # A step moves the transaction: a new revision, and here a new change.
    await engine.execute_step(a, 3, "kv.put", {"key": "same/z", "value": 0})
    pa3 = await engine.preview_commit(a)
    assert pa3.revision == pa1.revision + 1
    assert pa3.change_hash != pa1.change_hash


async def test_commit_with_a_stale_snapshot_is_refused_and_changes_nothing(
    engine: agenttx.Engine,
) -> None:
    b = await engine.begin()
    tx = b.transaction_id
    assert b.snapshot == agenttx.Snapshot(tx, b.revision)
    s1 = await engine.execute_step(tx, 1, "kv.put", {"key": "snap/k", "value": 1})
    assert s1.snapshot.revision == s1.revision
    s2 = await engine.execute_step(tx, 2, "kv.put", {"key": "snap/k", "value": 2})
    with pytest.raises(SnapshotMismatch) as err:
        await engine.commit(tx, expected_revision=s1.revision)
    assert (err.value.expected_revision, err.value.revision) == (s1.revision, s2.revision)
    assert err.value.code == "ABORTED"
    assert err.value.reason == "SNAPSHOT_MISMATCH"
    info = await engine.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ACTIVE
    assert info.revision == s2.revision
    assert info.snapshot.revision == s2.revision
    c = await engine.commit(tx, expected_revision=info.snapshot.revision)
    assert c.committed


async def test_approval_required_commits_only_an_approved_receipt(engine: agenttx.Engine) -> None:
    tx = await approval_tx(engine)
    info = await engine.get_transaction(tx)
    assert (info.mode, info.principal) == ("approval_required", "bob")
    with pytest.raises(ApprovalRequired) as need:
        await engine.commit(tx)
    assert "Preview it, have an approver approve" in need.value.message
    p = await engine.preview_commit(tx)
    assert p.approval_required
    assert p.approval_reasons == ["mode approval_required"]
    with pytest.raises(ApprovalRequired) as unapproved:
        await engine.commit(tx, receipt_id=p.receipt_id)
    assert unapproved.value.receipt_id == p.receipt_id

    with pytest.raises(ApprovalRefused) as same:
        await engine.approve_commit(tx, p.receipt_id, principal="bob", roles=("approver",))
    assert same.value.why == "same_principal"
    with pytest.raises(ApprovalRefused) as role:
        await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("agent",))
    assert role.value.why == "not_approver"
    with pytest.raises(ApprovalRefused) as nobody:
        await engine.approve_commit(tx, p.receipt_id, principal="", roles=("approver",))
    assert nobody.value.why == "no_principal"

    a = await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",))
    assert (a.receipt_id, a.change_hash, a.revision, a.approved_by) == (
        p.receipt_id,
        p.change_hash,
        p.revision,
        "alice",
    )
    with pytest.raises(ApprovalRefused) as again:
        await engine.approve_commit(tx, p.receipt_id, principal="carol", roles=("approver",))
    assert again.value.why == "already_approved"

    c = await engine.commit(tx, expected_revision=p.revision, receipt_id=p.receipt_id)
    assert c.committed
    # Used once: the transaction is over, so the receipt can never commit anything again.
    with pytest.raises(NotActive):
        await engine.commit(tx, receipt_id=p.receipt_id)
    kinds = [r.kind for r in await engine.audit_records(tx)]
    assert kinds == ["begin", "step.succeeded", "preview", "approval", "commit"]
    records = await engine.audit_records(tx)
    assert records[3].content()["data"]["principal"] == "alice"
    assert records[4].content()["data"]["approved_by"] == "alice"
    assert records[4].content()["data"]["receipt_id"] == p.receipt_id
    assert (await engine.verify_audit(tx)).ok


async def test_a_step_after_approval_voids_it(engine: agenttx.Engine) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",))
    await engine.execute_step(tx, 2, "kv.put", {"key": "acct/2", "value": 1})
    with pytest.raises(SnapshotMismatch) as moved:
        await engine.commit(tx, receipt_id=p.receipt_id)
    assert "voided" in moved.value.message
    # Rolling the step back returns to the same state, not the same revision: still void.
    await engine.rollback(tx, to_step=2)
    with pytest.raises(SnapshotMismatch):
        await engine.commit(tx, receipt_id=p.receipt_id)
    fresh = await engine.preview_commit(tx)
    assert fresh.change_hash == p.change_hash
    assert fresh.revision > p.revision
    with pytest.raises(ApprovalRequired):
        await engine.commit(tx, receipt_id=fresh.receipt_id)
    await engine.approve_commit(tx, fresh.receipt_id, principal="alice", roles=("approver",))
    assert (await engine.commit(tx, receipt_id=fresh.receipt_id)).committed


async def test_an_approval_of_a_receipt_made_before_a_step_is_refused(
    engine: agenttx.Engine,
) -> None:
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    await engine.execute_step(tx, 2, "kv.put", {"key": "acct/2", "value": 1})
    with pytest.raises(SnapshotMismatch):
        await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",))


async def test_a_foreign_unknown_or_expired_receipt_is_refused(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock, receipt_ttl_s=60)
    tx, other = await approval_tx(engine), await approval_tx(engine)
    p_other = await engine.preview_commit(other)
    await engine.approve_commit(other, p_other.receipt_id, principal="al", roles=["approver"])
    with pytest.raises(ReceiptRefused) as foreign:
        await engine.commit(tx, receipt_id=p_other.receipt_id)
    assert foreign.value.why == "foreign"
    with pytest.raises(ReceiptRefused) as foreign_approval:
        await engine.approve_commit(tx, p_other.receipt_id, principal="al", roles=["approver"])
    assert foreign_approval.value.why == "foreign"
    with pytest.raises(ReceiptRefused) as unknown:
        await engine.commit(tx, receipt_id="rcpt_nope")
    assert unknown.value.why == "unknown"
    p = await engine.preview_commit(tx)
    assert p.expires_at == clock.now + 60
    clock.advance(61)
    with pytest.raises(ReceiptRefused) as expired:
        await engine.approve_commit(tx, p.receipt_id, principal="al", roles=["approver"])
    assert expired.value.why == "expired"
    with pytest.raises(InvalidArgument):
        await engine.commit(tx, receipt_id="r" * 65)
    # Nothing of it changed the transaction.
    assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.ACTIVE


async def test_an_outside_commit_of_a_key_changes_the_hash_and_voids_the_receipt(
    open_engine: Any,
) -> None:
    engine = await open_engine()
    tx = (
        await engine.begin(principal="bob", mode="approval_required", isolation="read_committed")
    ).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "shared/k", "value": "mine"})
    p = await engine.preview_commit(tx)
    await engine.approve_commit(tx, p.receipt_id, principal="alice", roles=["approver"])
    other = (await engine.begin()).transaction_id
    await engine.execute_step(other, 1, "kv.put", {"key": "shared/k", "value": "theirs"})
    await engine.commit(other)
    # The approver saw "absent → mine"; the commit would now overwrite "theirs".
    with pytest.raises(SnapshotMismatch) as changed:
        await engine.commit(tx, receipt_id=p.receipt_id)
    assert "differs" in changed.value.message
    again = await engine.preview_commit(tx)
    assert again.changes.state[0].before == "theirs"


async def test_preview_and_approval_survive_a_restart(open_engine: Any) -> None:
    first = await open_engine()
    tx = await approval_tx(first)
    p = await first.preview_commit(tx)
    await first.close()

    second = await open_engine()
    again = await second.preview_commit(tx)
    assert again.change_hash == p.change_hash  # the same change, the same hash, after restart
    await second.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",))
    await second.close()

    third = await open_engine()
    with pytest.raises(ApprovalRefused):  # the approval is durable: a replay is refused
        await third.approve_commit(tx, p.receipt_id, principal="carol", roles=("approver",))
    c = await third.commit(tx, expected_revision=p.revision, receipt_id=p.receipt_id)
    assert c.committed
    assert (await third.verify_audit(tx)).ok


async def test_of_two_concurrent_approvals_exactly_one_wins(open_engine: Any) -> None:
    engine = await open_engine()
    tx = await approval_tx(engine)
    p = await engine.preview_commit(tx)
    outcomes = await asyncio.gather(
        engine.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",)),
        engine.approve_commit(tx, p.receipt_id, principal="carol", roles=("approver",)),
        return_exceptions=True,
    )
    won = [o for o in outcomes if isinstance(o, agenttx.Approval)]
    lost = [o for o in outcomes if isinstance(o, ApprovalRefused)]
    assert (len(won), len(lost)) == (1, 1), outcomes
    assert lost[0].why == "already_approved"
    kinds = [r.kind for r in await engine.audit_records(tx)]
    assert kinds.count("approval") == 1


async def test_of_two_approvals_on_two_engines_sharing_a_store_exactly_one_wins(
    open_engine: Any,
) -> None:
    one, two = await open_engine(), await open_engine()
    tx = await approval_tx(one)
    p = await one.preview_commit(tx)
    for _ in range(3):  # several rounds, fresh receipts, so the race is really run
        p = await one.preview_commit(tx)
        outcomes = await asyncio.gather(
            one.approve_commit(tx, p.receipt_id, principal="alice", roles=("approver",)),
            two.approve_commit(tx, p.receipt_id, principal="carol", roles=("approver",)),
            return_exceptions=True,
        )
        won = [o for o in outcomes if isinstance(o, agenttx.Approval)]
        lost = [o for o in outcomes if isinstance(o, ApprovalRefused)]
        assert (len(won), len(lost)) == (1, 1), outcomes
    assert (await two.commit(tx, receipt_id=p.receipt_id)).committed
    assert (await one.verify_audit(tx)).ok


async def test_begin_checks_mode_and_principal(engine: agenttx.Engine) -> None:
    with pytest.raises(InvalidArgument, match="unknown mode"):
        await engine.begin(mode="yolo")
    with pytest.raises(InvalidArgument, match="principal"):
        await engine.begin(mode="approval_required")
    with pytest.raises(InvalidArgument, match="principal exceeds"):
        await engine.begin(principal="p" * 257)
    with pytest.raises(InvalidArgument, match="roles"):
        await engine.approve_commit("tx_x", "rcpt_x", principal="a", roles="approver")
    b = await engine.begin(mode="autonomous_trusted", principal="ci")
    info = await engine.get_transaction(b.transaction_id)
    assert (info.mode, info.principal) == ("autonomous_trusted", "ci")
    assert (await engine.commit(b.transaction_id)).committed


async def test_a_large_value_is_shown_by_size_and_hash(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "big/0", "value": "x" * 5000})
    p = await engine.preview_commit(tx)
    [big] = p.changes.state
    assert big.after == {"elided": True, "bytes": 5002, "sha256": big.after_sha256}


@agenttx.tool(name="rcpt.fill", effect="state")
async def fill(ctx: agenttx.ToolContext, n: int, start: int = 0) -> dict[str, int]:
    for i in range(start, start + n):
        await ctx.state.put(f"many/{i:05d}", i)
    return {"written": n}


async def test_a_preview_of_many_keys_reads_them_in_batches_off_the_loop(
    open_engine: Any,
) -> None:
    # 1,500 keys: two batch reads of committed values, and the change set built on a thread.
    engine = await open_engine(tools=[fill])
    setup = (await engine.begin()).transaction_id
    await engine.execute_step(setup, 1, "rcpt.fill", {"n": 700})
    await engine.commit(setup)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "rcpt.fill", {"n": 1500, "start": 0})
    p = await engine.preview_commit(tx)
    assert len(p.changes.state) == 1500
    befores = {c.key: c.before for c in p.changes.state}
    assert befores["many/00000"] == 0
    assert befores["many/00699"] == 699
    assert befores["many/00700"] is None
    assert befores["many/01499"] is None
    assert all(c.after == int(c.key[-5:]) for c in p.changes.state)
    again = await engine.preview_commit(tx)
    assert again.change_hash == p.change_hash
