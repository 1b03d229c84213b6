"""``Engine.find_transaction`` (issue 23.8): a transaction found by a preview receipt's id or
by the request id one of its calls was sent with, with how it ended and its receipts — on
both stores, under the read rule of ``get_transaction``."""

from __future__ import annotations

from typing import Any

import pytest

import agenttx
from agenttx.types import Caller, Role
from audit_helpers import run_sql
from conftest import FakeClock

FAIL_AT_ONCE = {"max_local_depth": 0, "max_global_resets": 0, "max_step_retries": 0}


async def test_each_call_s_request_id_finds_its_transaction_and_says_which_call(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock)
    tx = (await engine.begin(agent_id="finder", labels=["l1"], request_id="r-begin")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r-step")
    await engine.undo_step(tx, request_id="r-undo")
    await engine.redo_step(tx, request_id="r-redo")
    clock.advance(5)
    await engine.commit(tx, request_id="r-commit")
    calls = {
        "r-begin": "begin",
        "r-step": "execute_step",
        "r-undo": "undo_step",
        "r-redo": "redo_step",
        "r-commit": "commit",
    }
    for request_id, method in calls.items():
        found = await engine.find_transaction(request_id=request_id)
        assert (found.transaction_id, found.request_id, found.request_method) == (
            tx,
            request_id,
            method,
        )
        assert found.receipt_id == ""
        assert found.status is agenttx.TxStatus.COMMITTED
        assert (found.agent_id, found.labels, found.next_step_id) == ("finder", ["l1"], 0)
        # The result is the transaction's, whichever call the id names.
        assert found.result == agenttx.TerminalResult(agenttx.Ending.COMMITTED, clock.now)
        assert found.snapshot == (await engine.get_transaction(tx)).snapshot


async def test_a_receipt_finds_the_transaction_its_commit_used(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock)
    tx = (await engine.begin(principal="agent-1", mode="approval_required")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    receipt = (await engine.preview_commit(tx)).receipt_id
    await engine.approve_commit(tx, receipt, principal="boss", roles=["approver"])
    open_now = await engine.find_transaction(receipt_id=receipt)
    assert open_now.result == agenttx.TerminalResult(agenttx.Ending.OPEN)
    assert [(r.receipt_id, r.status, r.decided_by) for r in open_now.receipts] == [
        (receipt, "approved", "boss")
    ]
    clock.advance(2)
    await engine.commit(tx, receipt_id=receipt)
    found = await engine.find_transaction(receipt_id=receipt)
    assert (found.transaction_id, found.receipt_id, found.request_id) == (tx, receipt, "")
    assert found.principal == "agent-1"
    assert found.result == agenttx.TerminalResult(
        agenttx.Ending.COMMITTED, clock.now, commit_receipt_id=receipt
    )


async def test_a_rolled_back_and_an_aborted_transaction_say_why_and_when(
    open_engine: Any, clock: FakeClock
) -> None:
    engine = await open_engine(clock=clock)
    rolled = (await engine.begin()).transaction_id
    await engine.execute_step(rolled, 1, "kv.put", {"key": "a", "value": 1})
    receipt = (await engine.preview_commit(rolled)).receipt_id
    clock.advance(3)
    await engine.rollback(rolled, reason="changed my mind", request_id="r-rollback")
    found = await engine.find_transaction(request_id="r-rollback")
    assert (found.transaction_id, found.request_method) == (rolled, "rollback")
    assert found.result.ending is agenttx.Ending.ROLLED_BACK
    assert found.result.ended_at == clock.now
    assert "changed my mind" in found.result.reason
    # The receipt it never used shows voided, as get_transaction shows it.
    by_receipt = await engine.find_transaction(receipt_id=receipt)
    assert [r.status for r in by_receipt.receipts] == ["voided"]

    failed = (await engine.begin(policy=FAIL_AT_ONCE)).transaction_id
    step = await engine.execute_step(failed, 1, "fs.read", {"path": "no.txt"}, request_id="r-f")
    assert step.transaction_status is agenttx.TxStatus.FAILED
    aborted = await engine.find_transaction(request_id="r-f")
    assert (aborted.transaction_id, aborted.status) == (failed, agenttx.TxStatus.FAILED)
    assert aborted.result.ending is agenttx.Ending.ABORTED
    assert aborted.result.reason == step.abort_reason


async def test_a_refused_call_names_its_transaction_and_a_refused_begin_none(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(agenttx.WrongStep):
        await engine.execute_step(tx, 7, "kv.put", {"key": "a", "value": 1}, request_id="r-7")
    found = await engine.find_transaction(request_id="r-7")
    assert (found.transaction_id, found.request_method) == (tx, "execute_step")
    assert found.result.ending is agenttx.Ending.OPEN
    with pytest.raises(agenttx.InvalidArgument):
        await engine.begin(isolation="bogus", request_id="r-bad-begin")
    with pytest.raises(agenttx.NotFound, match="begin that was refused: it made no transaction"):
        await engine.find_transaction(request_id="r-bad-begin")


async def test_the_key_is_exactly_one_id_within_its_limit(engine: agenttx.Engine) -> None:
    with pytest.raises(agenttx.InvalidArgument, match=r"exactly one .* neither was given"):
        await engine.find_transaction()
    with pytest.raises(agenttx.InvalidArgument, match=r"exactly one .* both were given"):
        await engine.find_transaction(receipt_id="rcpt_1", request_id="r-1")
    with pytest.raises(agenttx.InvalidArgument, match="receipt_id exceeds 64 bytes"):
        await engine.find_transaction(receipt_id="r" * 65)
    with pytest.raises(agenttx.InvalidArgument, match="request_id exceeds 256 bytes"):
        await engine.find_transaction(request_id="é" * 129)
    with pytest.raises(agenttx.InvalidArgument, match="request_id must be a string, got int"):
        await engine.find_transaction(request_id=7)  # type: ignore[arg-type]
    with pytest.raises(agenttx.NotFound, match="receipt `rcpt_none` not found"):
        await engine.find_transaction(receipt_id="rcpt_none")
    with pytest.raises(agenttx.NotFound, match="request_id `r-none` not found: no call of"):
        await engine.find_transaction(request_id="r-none")


async def test_a_receipt_older_than_the_newest_twenty_is_still_listed(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    receipts = [(await engine.preview_commit(tx)).receipt_id for _ in range(21)]
    found = await engine.find_transaction(receipt_id=receipts[0])
    assert len(found.receipts) == 21
    assert found.receipts[-1].receipt_id == receipts[0]
    newest = await engine.find_transaction(receipt_id=receipts[-1])
    assert [r.receipt_id for r in newest.receipts] == receipts[:0:-1]  # the newest 20


async def test_a_caller_finds_what_it_may_read_and_nothing_of_another_tenant(
    engine: agenttx.Engine,
) -> None:
    alice = Caller("alice", "acme", frozenset({Role.AGENT}))
    bob = Caller("bob", "acme", frozenset({Role.AGENT}))
    approver = Caller("carol", "acme", frozenset({Role.APPROVER}))
    stranger = Caller("alice", "other", frozenset({Role.ADMIN}))
    tx = (await engine.begin(request_id="a-1", caller=alice)).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, caller=alice)
    receipt = (await engine.preview_commit(tx, caller=alice)).receipt_id
    for who in (alice, approver):
        assert (await engine.find_transaction(request_id="a-1", caller=who)).transaction_id == tx
        assert (await engine.find_transaction(receipt_id=receipt, caller=who)).tenant == "acme"
    with pytest.raises(agenttx.PermissionDenied, match="'bob' needs the admin or approver role"):
        await engine.find_transaction(receipt_id=receipt, caller=bob)
    # Another tenant's ids are unknown there, in the words of an id nobody has.
    with pytest.raises(agenttx.NotFound, match=f"receipt `{receipt}` not found: no transaction"):
        await engine.find_transaction(receipt_id=receipt, caller=stranger)
    with pytest.raises(agenttx.NotFound, match="no call of tenant `other` was sent with it"):
        await engine.find_transaction(request_id="a-1", caller=stranger)
    # Request ids are per tenant: embedded use (no caller) looks in the engine's own.
    with pytest.raises(agenttx.NotFound, match="no call of tenant `default`"):
        await engine.find_transaction(request_id="a-1")


async def test_a_store_from_before_schema_6_gains_the_column_and_finds_its_old_replies(
    open_engine: Any, store_url: str
) -> None:
    first = await open_engine()
    tx = (await first.begin(request_id="old-begin")).transaction_id
    with pytest.raises(agenttx.WrongStep):
        await first.execute_step(tx, 9, "kv.put", {"key": "a", "value": 1}, request_id="old-bad")
    await first.close()
    # The store as schema 5 left it: no requests.tx_id (its replies never recorded one).
    run_sql(store_url, "ALTER TABLE requests DROP COLUMN tx_id")
    if store_url.startswith("sqlite"):
        run_sql(store_url, "PRAGMA user_version=5")
    else:
        run_sql(store_url, "UPDATE agenttx_schema SET version = 5")
    second = await open_engine()
    # A successful reply names its transaction; a refusal stored then names none.
    assert (await second.find_transaction(request_id="old-begin")).transaction_id == tx
    refused_then = r"with execute_step and refused before .* \(store schema 6\)"
    with pytest.raises(agenttx.NotFound, match=refused_then):
        await second.find_transaction(request_id="old-bad")
    await second.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="new-step")
    assert (await second.find_transaction(request_id="new-step")).transaction_id == tx


async def test_a_request_whose_transaction_is_gone_says_so(
    engine: agenttx.Engine, store_url: str
) -> None:
    tx = (await engine.begin(request_id="r-gone")).transaction_id
    await engine.rollback(tx)
    engine.images.cache.clear()
    run_sql(store_url, "DELETE FROM transactions WHERE id = ?", (tx,))
    with pytest.raises(agenttx.NotFound, match=f"names transaction `{tx}`, which no longer"):
        await engine.find_transaction(request_id="r-gone")


async def test_the_reply_carries_all_of_it_and_the_client_reads_it_back_whole(
    engine: agenttx.Engine,
) -> None:
    from agenttx.api import lookup_wire
    from agenttx.api.operations import replies
    from agenttx.client import _lookup
    from agenttx.wire import agenttx_pb2 as pb

    tx = (await engine.begin(agent_id="wire", labels=["x"], request_id="w-1")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    receipt = (await engine.preview_commit(tx)).receipt_id
    await engine.rollback(tx, reason="no")
    found = await engine.find_transaction(receipt_id=receipt)
    reply = pb.FindTransactionResponse.FromString(lookup_wire.find_reply(found).SerializeToString())
    assert _lookup.found(reply) == found
    assert (reply.result.ending, reply.transaction.abort_reason) == ("rolled_back", "no")
    # One TransactionSummary for a found transaction and a listed one: ListTransactions'.
    page = await engine.list_transactions_page()
    listed = lookup_wire.summary(page.transactions[0])
    assert listed == replies.transactions_reply(page).transactions[0]
    assert reply.transaction == listed
