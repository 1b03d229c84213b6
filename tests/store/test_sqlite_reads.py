"""SQLite reads: on the writer's connection while it is free (its page cache is current after
its own commits), on the reader connection while the writer's flush thread holds it. Either
way a read sees exactly what is committed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenttx.store.contract import StepRow, StoredReply, TxRow, TxUpdate
from agenttx.store.sqlite import SqliteStore

T0 = 1_700_000_000.0


@pytest.fixture(params=[False, True], ids=["default", "sync_writes"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "reads.db", sync_writes=request.param)
    await s.open()
    await s.create_transaction(
        TxRow("tx_1", "default", "a", "ACTIVE", 1, 1, 0, "snapshot", {}, T0, T0, T0)
    )
    yield s
    await s.close()


def _step(k: int) -> StepRow:
    return StepRow(
        "tx_1", k, k, 1, 0, "kv.put", "state", "SUCCESS", True, "{}", "{}", "", {}, T0, T0
    )


async def _write_step(store: SqliteStore, k: int, revision: int) -> int:
    update = TxUpdate("tx_1", revision, ("ACTIVE",), "ACTIVE", k + 1, None, T0)
    reply = StoredReply(f"rid-{k}", "execute_step", "digest", f'{{"ok":{k}}}', T0)
    return await store.finish_step(update, _step(k), reply)


async def test_a_read_after_a_write_sees_it_on_the_free_writer(store: SqliteStore) -> None:
    revision = 1
    for k in range(1, 6):
        revision = await _write_step(store, k, revision)
        stored = await store.get_request("default", f"rid-{k}")
        assert stored is not None
        assert stored.reply_json == f'{{"ok":{k}}}'
        row = await store.get_transaction("tx_1")
        assert row is not None
        assert (row.revision, row.next_step_id) == (revision, k + 1)
    assert [s.step_id for s in await store.load_steps("tx_1", live_only=True)] == [1, 2, 3, 4, 5]


async def test_a_read_while_the_writer_is_held_uses_the_reader_and_sees_the_same(
    store: SqliteStore,
) -> None:
    await _write_step(store, 1, 1)
    writer = store._writer
    assert writer is not None
    free = await store.get_request("default", "rid-1")
    # What the flush thread does while it commits: hold the writer's connection.
    with writer._lock:
        assert writer.read_if_idle("SELECT 1", ()) is None
        held = await store.get_request("default", "rid-1")
        assert await store.get_request("default", "rid-2") is None
    assert held == free
    assert held is not None


async def test_reads_beside_concurrent_writes_see_only_committed_rows(
    store: SqliteStore,
) -> None:
    # Many writers at once: the group-commit writer batches them (on its thread with
    # sync_writes) while reads go on; a reply a read sees is always a whole committed one.
    tx_ids = [f"tx_c{i}" for i in range(8)]
    for tx_id in tx_ids:
        await store.create_transaction(
            TxRow(tx_id, "default", "a", "ACTIVE", 1, 1, 0, "snapshot", {}, T0, T0, T0)
        )
    store.set_concurrency_hint(lambda: len(tx_ids))

    async def writer(tx_id: str) -> None:
        revision = 1
        for k in range(1, 11):
            update = TxUpdate(tx_id, revision, ("ACTIVE",), "ACTIVE", k + 1, None, T0)
            step = StepRow(
                tx_id, k, k, 1, 0, "kv.put", "state", "SUCCESS", True, "{}", "{}", "", {}, T0, T0
            )
            reply = StoredReply(f"{tx_id}-{k}", "execute_step", "d", f'"{tx_id}-{k}"', T0)
            revision = await store.finish_step(update, step, reply)

    seen: list[str] = []
    writers_done = asyncio.Event()

    async def reader() -> None:
        # Read until the writers are done (at least 60 passes): with sync_writes the
        # commits land on the flush thread, so a fixed number of passes can finish before
        # the first of them does on a busy machine.
        passes = 0
        last_pass = False
        while not last_pass:
            passes += 1
            # A pass that starts after the writers finished is the last one.
            last_pass = passes >= 60 and writers_done.is_set()
            for tx_id in tx_ids:
                row = await store.get_transaction(tx_id)
                assert row is not None
                done = row.next_step_id - 1
                if done:
                    # The step row and its reply went in with the same commit as the row.
                    got = await store.get_request("default", f"{tx_id}-{done}")
                    assert got is not None
                    assert got.reply_json == f'"{tx_id}-{done}"'
                    seen.append(got.request_id)
            await asyncio.sleep(0)

    async def writers() -> None:
        await asyncio.gather(*(writer(t) for t in tx_ids))
        writers_done.set()

    await asyncio.gather(reader(), writers())
    assert seen
    for tx_id in tx_ids:
        row = await store.get_transaction(tx_id)
        assert row is not None
        assert row.next_step_id == 11
