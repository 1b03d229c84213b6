"""The clients' transaction helper in approval_required mode, against a real gRPC server on
every store: ``transaction(principal=…, mode=…)`` begins with them, ``tx.preview()`` binds the
helper's commits to that preview's receipt and revision, ``tx.wait_for_approval()`` returns
once an approver approved it and raises ``ReceiptRefused`` (who, why) once one refused it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenttx.client import AgentTxClient, AsyncAgentTxClient, RetryPolicy
from agenttx.errors import (
    ApprovalRequired,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    ReceiptRefused,
    SnapshotMismatch,
)
from agenttx.types import TxStatus
from server_process import ServerThread

ONE_TRY = RetryPolicy(max_attempts=1)
APPROVER = ("approver",)


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path, url=store_url).start()
    yield s
    s.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[AgentTxClient]:
    with AgentTxClient(server.target, retry=ONE_TRY, timeout=10) as c:
        yield c


def commit_record(server: ServerThread, tx: str) -> str:
    records = server.run(server.engine.audit_records(tx))
    [commit] = [r for r in records if r.kind == "commit"]
    return commit.body


def test_the_helper_begins_with_mode_and_principal_and_commits_the_approved_preview(
    server: ServerThread, client: AgentTxClient
) -> None:
    with client.transaction(agent_id="pay", principal="bob", mode="approval_required") as tx:
        tx.step("kv.put", {"key": "pay/1", "value": 40})
        info = tx.info()
        assert (info.mode, info.principal) == ("approval_required", "bob")
        p = tx.preview()
        assert tx.last_preview == p
        assert p.approval_required
        # The approver decides from elsewhere while the agent waits.
        approve = threading.Timer(
            0.2,
            client.approve_commit,
            (tx.transaction_id, p.receipt_id),
            {"principal": "alice", "roles": APPROVER},
        )
        approve.start()
        decided = tx.wait_for_approval(max_wait=10, interval=0.05)
        approve.join()
        assert (decided.receipt_id, decided.status, decided.decided_by) == (
            p.receipt_id,
            "approved",
            "alice",
        )
    assert tx.status is TxStatus.COMMITTED  # the block's end committed with the receipt
    assert p.receipt_id in commit_record(server, tx.transaction_id)


def test_a_refusal_reaches_the_waiting_agent_which_changes_and_previews_again(
    client: AgentTxClient,
) -> None:
    with client.transaction(principal="bob", mode="approval_required") as tx:
        tx.step("kv.put", {"key": "pay/2", "value": 900})
        first = tx.preview()
        client.refuse_commit(
            tx.transaction_id, first.receipt_id, "at most 500", principal="al", roles=APPROVER
        )
        with pytest.raises(ReceiptRefused) as refused:
            tx.wait_for_approval(max_wait=10, interval=0.05)
        assert refused.value.why == "refused"
        assert "'al'" in refused.value.message
        assert "at most 500" in refused.value.message
        assert tx.status is TxStatus.ACTIVE
        with pytest.raises(ReceiptRefused):  # the refused receipt cannot commit either
            tx.commit()
        tx.step("kv.put", {"key": "pay/2", "value": 500})  # answer the refusal
        second = tx.preview()
        assert second.receipt_id != first.receipt_id
        client.approve_commit(tx.transaction_id, second.receipt_id, principal="al", roles=APPROVER)
        assert tx.wait_for_approval(max_wait=10, interval=0.05).status == "approved"
    assert tx.status is TxStatus.COMMITTED
    read = client.begin().transaction_id
    assert client.execute_step(read, 1, "kv.get", {"key": "pay/2"}).output["value"] == 500


def test_an_unapproved_block_end_is_refused_and_stays_open_for_the_approver(
    client: AgentTxClient,
) -> None:
    tx = client.transaction(principal="bob", mode="approval_required")

    def block() -> None:
        with tx:
            tx.step("kv.put", {"key": "pay/3", "value": 1})
            tx.preview()

    with pytest.raises(ApprovalRequired) as unapproved:
        block()
    p = tx.last_preview
    assert p is not None
    assert unapproved.value.receipt_id == p.receipt_id
    assert tx.status is TxStatus.ACTIVE  # left open: it can still be approved and committed
    client.approve_commit(tx.transaction_id, p.receipt_id, principal="al", roles=APPROVER)
    assert tx.commit().committed


def test_a_change_after_the_preview_is_never_committed_unreviewed(
    client: AgentTxClient,
) -> None:
    tx = client.transaction(agent_id="plain")  # transactional: no approval needed

    def block() -> None:
        with tx:
            tx.step("kv.put", {"key": "pay/4", "value": 1})
            tx.preview()
            tx.step("kv.put", {"key": "pay/5", "value": 2})

    with pytest.raises(SnapshotMismatch):
        block()
    p = tx.last_preview
    assert p is not None
    assert tx.status is TxStatus.ACTIVE
    with pytest.raises(SnapshotMismatch):  # the wait says so too, at once
        tx.wait_for_approval(max_wait=10, interval=0.05)
    assert p.revision < tx.info().revision
    assert tx.commit(receipt_id="").committed  # committing the whole change is asked for


def test_waiting_is_bounded_and_needs_a_preview(client: AgentTxClient) -> None:
    with client.transaction(principal="bob", mode="approval_required") as tx:
        with pytest.raises(FailedPrecondition, match=r"call tx.preview\(\) first"):
            tx.wait_for_approval()
        tx.step("kv.put", {"key": "pay/6", "value": 1})
        tx.preview()
        with pytest.raises(InvalidArgument, match="positive seconds"):
            tx.wait_for_approval(max_wait=0)
        with pytest.raises(DeadlineExceeded, match=r"was not decided within 0\.2 s"):
            tx.wait_for_approval(max_wait=0.2, interval=0.05)
        tx.rollback()
    assert tx.status is TxStatus.ROLLED_BACK


async def test_the_async_helper_does_the_same(server: ServerThread) -> None:
    async with AsyncAgentTxClient(server.target, retry=ONE_TRY, timeout=10) as c:
        async with c.transaction(principal="bob", mode="approval_required") as tx:
            await tx.step("kv.put", {"key": "apay/1", "value": 9})
            assert (await tx.info()).mode == "approval_required"
            p = await tx.preview()

            async def refuse_later() -> None:
                await asyncio.sleep(0.2)
                await c.refuse_commit(
                    tx.transaction_id, p.receipt_id, "make it 5", principal="al", roles=APPROVER
                )

            refusing = asyncio.create_task(refuse_later())
            with pytest.raises(ReceiptRefused, match="make it 5"):
                await tx.wait_for_approval(max_wait=10, interval=0.05)
            await refusing
            await tx.step("kv.put", {"key": "apay/1", "value": 5})
            again = await tx.preview()

            async def approve_later() -> None:
                await asyncio.sleep(0.2)
                await c.approve_commit(
                    tx.transaction_id, again.receipt_id, principal="al", roles=APPROVER
                )

            approving = asyncio.create_task(approve_later())
            decided = await tx.wait_for_approval(max_wait=10, interval=0.05)
            await approving
            assert (decided.receipt_id, decided.status) == (again.receipt_id, "approved")
        assert tx.status is TxStatus.COMMITTED
        assert again.receipt_id in commit_record(server, tx.transaction_id)

        left_open = c.transaction(principal="bob", mode="approval_required")

        async def block() -> None:
            async with left_open:
                await left_open.step("kv.put", {"key": "apay/2", "value": 1})
                await left_open.preview()

        with pytest.raises(ApprovalRequired):
            await block()
        assert left_open.status is TxStatus.ACTIVE
        await left_open.rollback()
