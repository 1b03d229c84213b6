"""``tx.wait_for_approval()`` stops at once, with an error naming the receipt and what to do,
when the receipt can no longer be approved: it expired (unapproved, or approved but not used
in time), a change by another client voided it, or the transaction ended elsewhere (committed,
rolled back). Against a real gRPC server on every store; the receipts' lifetime is the
server's ``receipt_ttl_s``, set to its minimum (1 s) where expiry is the point."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agenttx.client import AgentTxClient, AsyncAgentTxClient, RetryPolicy
from agenttx.client._approval_wait import ApprovalWait
from agenttx.errors import NotActive, ReceiptRefused, SnapshotMismatch
from agenttx.types import TxStatus
from conftest import FakeClock
from server_process import ServerThread

ONE_TRY = RetryPolicy(max_attempts=1)
APPROVER = ("approver",)
LONG_WAIT = 60.0  # what the agent is willing to wait; every case here ends long before
PROMPTLY = 15.0  # "at once" on a busy 2-core machine: far below LONG_WAIT
SHORT_TTL = 1.0  # receipt_ttl_s's minimum


@pytest.fixture
def serve(tmp_path: Path, store_url: str) -> Iterator[Callable[..., ServerThread]]:
    """Start the test's server (engine keyword arguments as given); stopped at the end."""
    started: list[ServerThread] = []

    def start(**engine_kwargs: float) -> ServerThread:
        started.append(ServerThread(tmp_path, url=store_url, **engine_kwargs).start())
        return started[-1]

    yield start
    for s in started:
        s.stop()


def connect(server: ServerThread) -> AgentTxClient:
    return AgentTxClient(server.target, retry=ONE_TRY, timeout=10)


def later(seconds: float, call: Callable[[], object]) -> threading.Timer:
    timer = threading.Timer(seconds, call)
    timer.start()
    return timer


def test_a_receipt_that_expires_unapproved_ends_the_wait_as_the_server_would_refuse_it(
    serve: Callable[..., ServerThread],
) -> None:
    with connect(serve(receipt_ttl_s=SHORT_TTL)) as client:
        tx = client.transaction(principal="bob", mode="approval_required")
        with tx:
            tx.step("kv.put", {"key": "exp/1", "value": 1})
            p = tx.preview()
            started = time.monotonic()
            with pytest.raises(ReceiptRefused) as expired:
                tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
            waited = time.monotonic() - started
            ended_at = time.time()
            assert expired.value.why == "expired"
            assert expired.value.receipt_id == p.receipt_id
            assert p.receipt_id in expired.value.message
            assert "receipts last 1 s" in expired.value.message
            assert "preview the transaction again" in expired.value.message  # a new receipt
            # Not before the server's own clock said so (this host's clock, which the server
            # reads: the receipt was made before `started`, so `waited` alone may fall short
            # of the lifetime by the preview's round trip), and not after max_wait either.
            assert ended_at >= p.expires_at
            assert waited < PROMPTLY
            # The server agrees: the receipt can be neither approved nor committed with.
            with pytest.raises(ReceiptRefused) as approving:
                client.approve_commit(
                    tx.transaction_id, p.receipt_id, principal="al", roles=APPROVER
                )
            assert approving.value.why == "expired"
            with pytest.raises(ReceiptRefused) as committing:
                tx.commit()
            assert committing.value.why == "expired"
            assert tx.status is TxStatus.ACTIVE  # open: preview again, or roll back
            again = tx.preview()
            assert again.receipt_id != p.receipt_id
            tx.rollback()
    assert tx.status is TxStatus.ROLLED_BACK


def test_an_approval_the_receipt_outlived_is_not_handed_back(
    serve: Callable[..., ServerThread],
) -> None:
    with (
        connect(serve(receipt_ttl_s=SHORT_TTL)) as client,
        client.transaction(principal="bob", mode="approval_required") as tx,
    ):
        tx.step("kv.put", {"key": "exp/2", "value": 2})
        p = tx.preview()
        client.approve_commit(tx.transaction_id, p.receipt_id, principal="al", roles=APPROVER)
        time.sleep(SHORT_TTL + 0.2)  # the agent looks only after the receipt expired
        with pytest.raises(ReceiptRefused) as expired:
            tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
        assert expired.value.why == "expired"
        assert "approved by 'al' but expired before a commit used it" in expired.value.message
        with pytest.raises(ReceiptRefused, match="expired"):  # as the commit would be
            tx.commit()
        tx.rollback()


def test_a_change_made_by_another_client_while_waiting_ends_the_wait(
    serve: Callable[..., ServerThread],
) -> None:
    server = serve()
    with (
        connect(server) as client,
        connect(server) as other,
        client.transaction(principal="bob", mode="approval_required") as tx,
    ):
        tx.step("kv.put", {"key": "moved/1", "value": 1})
        p = tx.preview()
        step = tx.next_step_id
        move = later(
            0.3,
            lambda: other.execute_step(
                tx.transaction_id, step, "kv.put", {"key": "moved/2", "value": 2}
            ),
        )
        started = time.monotonic()
        with pytest.raises(SnapshotMismatch) as voided:
            tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
        move.join()
        assert time.monotonic() - started < PROMPTLY
        assert (voided.value.expected_revision, voided.value.revision) == (
            p.revision,
            tx.info().revision,
        )
        assert f"receipt {p.receipt_id} was made at revision {p.revision}" in voided.value.message
        assert "call tx.preview() again" in voided.value.message
        assert tx.status is TxStatus.ACTIVE
        tx.rollback()


def test_a_transaction_rolled_back_elsewhere_ends_the_wait_and_the_block(
    serve: Callable[..., ServerThread],
) -> None:
    server = serve()
    with connect(server) as client, connect(server) as other:
        tx = client.transaction(principal="bob", mode="approval_required")

        def block() -> None:
            with tx:
                tx.step("kv.put", {"key": "gone/1", "value": 1})
                tx.preview()
                abort = later(0.3, lambda: other.rollback(tx.transaction_id, reason="operator"))
                try:
                    tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
                finally:
                    abort.join()

        with pytest.raises(NotActive) as ended:  # raised from the block, which does nothing
            block()
        assert tx.last_preview is not None
        assert ended.value.status == "ROLLED_BACK"
        assert tx.last_preview.receipt_id in ended.value.message
        assert "begin a new transaction" in ended.value.message
        assert not getattr(ended.value, "__notes__", [])  # the block's end tried no rollback
        assert tx.ended
        assert tx.status is TxStatus.ROLLED_BACK
        assert tx.next_step_id == 0


def test_a_transaction_committed_elsewhere_ends_the_wait(
    serve: Callable[..., ServerThread],
) -> None:
    server = serve()
    with connect(server) as client, connect(server) as other:
        tx = client.transaction(agent_id="plain")  # transactional: another client may commit

        def block() -> None:
            with tx:
                tx.step("kv.put", {"key": "done/1", "value": 1})
                tx.preview()
                commit = later(0.3, lambda: other.commit(tx.transaction_id))
                try:
                    tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
                finally:
                    commit.join()

        with pytest.raises(NotActive) as ended:
            block()
        assert tx.last_preview is not None
        assert ended.value.status == "COMMITTED"
        assert f"receipt {tx.last_preview.receipt_id}" in ended.value.message
        assert "nothing is left to approve" in ended.value.message
        assert tx.status is TxStatus.COMMITTED


async def test_the_async_helper_ends_its_wait_the_same_way(
    serve: Callable[..., ServerThread],
) -> None:
    server = serve(receipt_ttl_s=SHORT_TTL)
    async with (
        AsyncAgentTxClient(server.target, retry=ONE_TRY, timeout=10) as c,
        AsyncAgentTxClient(server.target, retry=ONE_TRY, timeout=10) as other,
    ):
        async with c.transaction(principal="bob", mode="approval_required") as tx:
            await tx.step("kv.put", {"key": "aexp/1", "value": 1})
            p = await tx.preview()
            started = time.monotonic()
            with pytest.raises(ReceiptRefused) as expired:
                await tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
            assert time.time() >= p.expires_at  # not before the server's clock said so
            assert time.monotonic() - started < PROMPTLY
            assert (expired.value.why, expired.value.receipt_id) == ("expired", p.receipt_id)

            await tx.preview()

            async def move_later() -> None:
                await asyncio.sleep(0.2)
                await other.execute_step(
                    tx.transaction_id, tx.next_step_id, "kv.put", {"key": "aexp/2", "value": 2}
                )

            moving = asyncio.create_task(move_later())
            with pytest.raises(SnapshotMismatch, match=r"call tx\.preview\(\) again"):
                await tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
            await moving
            await tx.rollback()

        ended_tx = c.transaction(principal="bob", mode="approval_required")

        async def abort_later() -> None:
            await asyncio.sleep(0.2)
            await other.rollback(ended_tx.transaction_id, reason="operator")

        async def block() -> None:
            async with ended_tx:
                await ended_tx.step("kv.put", {"key": "aexp/3", "value": 3})
                await ended_tx.preview()
                aborting = asyncio.create_task(abort_later())
                try:
                    await ended_tx.wait_for_approval(max_wait=LONG_WAIT, interval=0.05)
                finally:
                    await aborting

        with pytest.raises(NotActive) as ended:
            await block()
        assert ended.value.status == "ROLLED_BACK"
        assert ended_tx.status is TxStatus.ROLLED_BACK


def test_each_read_sleeps_no_later_than_the_expiry_and_a_passing_state_is_read_again(
    serve: Callable[..., ServerThread],
) -> None:
    # The decision each read makes, on a real transaction's view, with a fake client clock.
    with connect(serve()) as client:
        tx = client.transaction(principal="bob", mode="approval_required")
        with tx:
            tx.step("kv.put", {"key": "clock/1", "value": 1})
            p = tx.preview()
            info = tx.info()
            [view] = [r for r in info.receipts if r.receipt_id == p.receipt_id]
            lifetime = view.expires_at - view.created_at
            assert lifetime == 900  # the server's default
            clock = FakeClock(start=50.0)
            wait = ApprovalWait(tx.transaction_id, p, 50.0, 10 * lifetime, 60.0, clock)
            assert wait.poll(info) == 60.0  # the interval
            # A step running elsewhere: not an end; the next read decides.
            assert wait.poll(dataclasses.replace(info, status=TxStatus.EXECUTING)) == 60.0
            clock.advance(lifetime - 0.5)
            assert wait.poll(info) == pytest.approx(0.5)  # wakes at the expiry, not after
            clock.advance(0.5)
            with pytest.raises(ReceiptRefused, match="receipts last 900 s"):
                wait.poll(info)
            with pytest.raises(NotActive, match="FAILED"):
                wait.poll(dataclasses.replace(info, status=TxStatus.FAILED))
            tx.rollback()
