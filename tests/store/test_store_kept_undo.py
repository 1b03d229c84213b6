"""The store's part of compensation, on both backends: a commit keeps the undo records
``CommitPlan.keep_undo`` names (and drops the rest, as before), they survive a reopen, and
``prune_kept_undo`` deletes them once their window ends — nothing else."""

from __future__ import annotations

from dataclasses import replace

from both_stores import open_store_on_both  # noqa: F401 - the fixture
from pg import pg_url  # noqa: F401 - the fixture
from store_contract import T0, OpenStore, new_tx, plan, undo_row


async def test_a_commit_keeps_only_the_named_undo_records_until_their_window(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    try:
        row = await new_tx(store, "tx_k")
        kept_a = await store.append_undo(undo_row("tx_k", 1))
        dropped = await store.append_undo(undo_row("tx_k", 2))
        kept_b = await store.append_undo(undo_row("tx_k", 3))
        other = await new_tx(store, "tx_other")
        await store.append_undo(undo_row("tx_other", 1))
        keep = ((kept_a, T0 + 100), (kept_b, T0 + 200))
        outcome = await store.commit(replace(plan(row), keep_undo=keep))
        assert outcome.committed
        assert [u.id for u in await store.load_undo("tx_k")] == [kept_a, kept_b]
        assert dropped not in [u.id for u in await store.load_undo("tx_k")]
        # A commit that keeps nothing drops its whole undo log, as before.
        assert (await store.commit(plan(other))).committed
        assert await store.load_undo("tx_other") == []
    finally:
        await store.close()
    store = await open_store()  # kept across a reopen
    try:
        assert [u.id for u in await store.load_undo("tx_k")] == [kept_a, kept_b]
        assert await store.prune_kept_undo(T0 + 99) == 0
        assert await store.prune_kept_undo(T0 + 100) == 1  # a window ends at its end
        assert [u.id for u in await store.load_undo("tx_k")] == [kept_b]
        assert await store.prune_kept_undo(T0 + 1000) == 1
        assert await store.load_undo("tx_k") == []
        assert await store.prune_kept_undo(T0 + 1000) == 0
    finally:
        await store.close()
