"""What a step's durable write touches, and the schema that keeps it small (issue 24).

Each index on a table a step writes is a page (a WAL frame on SQLite) rewritten by every step,
and a random transaction id put every new transaction's step rows into the middle of a full
B-tree page, splitting it every few steps. So: a state step of an ACTIVE transaction writes
its own row and the transaction's row and nothing else (no index entry moves: the CAS leaves
``status`` alone when it cannot change, and ``last_activity_at`` is in no index), and
transaction ids begun one after another sort in that order. A store made with the older
indexes loses them on open (schema 7), on both stores.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agenttx
from agenttx.core.engine import transaction_id_at
from agenttx.store.contract import Store, TxRow, TxUpdate
from agenttx.store.postgres import PostgresStore
from agenttx.store.sql import DROPPED_INDEXES, SCHEMA_VERSION
from agenttx.store.sqlite import SqliteStore
from conftest import FakeClock

T0 = 1_700_000_000.0
# The indexes of schema 6 this one dropped, as they were made.
_OLD_INDEXES = (
    "CREATE INDEX transactions_status ON transactions (status, last_activity_at)",
    "CREATE INDEX steps_by_step ON steps (tx_id, step_id)",
)


def _wal_pages(wal: Path) -> list[int]:
    """The page number of every frame in a WAL file (its format: a 32-byte header, then per
    frame a 24-byte header, starting with the page number, and the page)."""
    data = wal.read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    return [
        struct.unpack(">I", data[off : off + 4])[0]
        for off in range(32, len(data) - page_size - 23, page_size + 24)
    ]


def _btrees(db: Path, pages: list[int]) -> set[str]:
    with sqlite3.connect(db) as c:
        owner = {int(p): str(n) for n, p in c.execute("SELECT name, pageno FROM dbstat")}
    c.close()
    return {owner.get(p, f"page {p}") for p in pages}


@pytest.mark.stores("sqlite")
async def test_a_state_step_writes_its_row_and_the_transaction_row_only(
    engine: agenttx.Engine, store_url: str
) -> None:
    db = Path(store_url.removeprefix("sqlite:///"))
    tx = (await engine.begin(agent_id="a")).transaction_id
    for s in range(1, 40):  # enough rows that the steps table has split a few times
        await engine.execute_step(tx, s, "kv.put", {"key": f"k{s}", "value": "v" * 100})
    seen: set[str] = set()
    for s in range(40, 60):
        with sqlite3.connect(db) as c:  # empty the WAL: what follows is this step's write
            assert c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        c.close()
        res = await engine.execute_step(tx, s, "kv.put", {"key": f"k{s}", "value": "v" * 100})
        assert res.status is agenttx.StepStatus.SUCCESS
        seen |= _btrees(db, _wal_pages(db.with_name(db.name + "-wal")))
    # Page 1 (sqlite_schema's root) holds the file's size: written when a split grows it.
    assert seen <= {"steps", "transactions", "sqlite_schema"}
    assert {"steps", "transactions"} <= seen


def test_transaction_ids_sort_in_the_order_they_began() -> None:
    ids = [transaction_id_at(T0 + i / 1000) for i in range(50)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 35 and i.startswith("tx_") and int(i[3:], 16) >= 0 for i in ids)
    # The same millisecond: the 80 random bits tell them apart.
    assert transaction_id_at(T0) != transaction_id_at(T0)


async def test_begin_hands_out_ids_in_begin_order(open_engine: Any, clock: FakeClock) -> None:
    engine = await open_engine(clock=clock)
    ids = []
    for _ in range(5):
        ids.append((await engine.begin(agent_id="a")).transaction_id)
        clock.advance(0.001)  # the id's time is the engine's clock, to the millisecond
    assert ids == sorted(ids)
    assert ids[0][3:15] == f"{round(T0 * 1000):012x}"  # the clock starts at T0


def _new_store(url: str) -> Store:
    if url.startswith("sqlite:///"):
        return SqliteStore(Path(url.removeprefix("sqlite:///")))
    return PostgresStore(url, pool_size=2)


def _indexes(url: str) -> tuple[set[str], int]:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
            version = int(c.execute("PRAGMA user_version").fetchone()[0])
        c.close()
        return names, version
    with psycopg.connect(url) as pc:
        names = {r[0] for r in pc.execute("SELECT indexname FROM pg_indexes")}
        got = pc.execute("SELECT version FROM agenttx_schema").fetchone()
    return names, int(got[0]) if got else 0


def _back_to_schema_6(url: str) -> None:
    """Put a store back to schema 6: its indexes as they were."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            c.execute("DROP INDEX transactions_by_status")
            for statement in _OLD_INDEXES:
                c.execute(statement)
            c.execute("PRAGMA user_version=6")
        c.close()
        return
    with psycopg.connect(url, autocommit=True) as pc:
        pc.execute("DROP INDEX transactions_by_status")
        for statement in _OLD_INDEXES:
            pc.execute(statement)
        pc.execute("UPDATE agenttx_schema SET version = 6")


async def test_a_store_at_schema_6_drops_the_step_path_indexes_on_open(store_url: str) -> None:
    store = _new_store(store_url)
    await store.open()
    await store.create_transaction(TxRow("tx_a", "default", "a", "ACTIVE", 1, 1, 0,
                                         "snapshot", {}, T0, T0, T0))  # fmt: skip
    await store.close()
    _back_to_schema_6(store_url)
    names, _ = _indexes(store_url)
    assert set(DROPPED_INDEXES) <= names

    store = _new_store(store_url)
    await store.open()
    try:
        # The data is kept, and a step-shaped CAS (status stays) still applies only once.
        update = TxUpdate("tx_a", 1, ("ACTIVE",), "ACTIVE", 2, None, T0 + 1)
        assert await store.update_transaction(update) == 2
        got = await store.get_transaction("tx_a")
        assert got is not None
        assert (got.status, got.revision, got.next_step_id) == ("ACTIVE", 2, 2)
        assert [r.id for r in await store.list_transactions(statuses=["ACTIVE"])] == ["tx_a"]
    finally:
        await store.close()
    names, version = _indexes(store_url)
    assert not set(DROPPED_INDEXES) & names
    assert "transactions_by_status" in names
    assert version == SCHEMA_VERSION == 7


async def test_a_cas_that_keeps_the_status_still_checks_it(store_url: str) -> None:
    store = _new_store(store_url)
    await store.open()
    try:
        await store.create_transaction(TxRow("tx_a", "default", "a", "EXECUTING", 1, 1, 0,
                                             "snapshot", {}, T0, T0, T0))  # fmt: skip
        keep = TxUpdate("tx_a", 1, ("ACTIVE",), "ACTIVE", 2, None, T0 + 1)
        with pytest.raises(agenttx.errors.RevisionConflict):
            await store.update_transaction(keep)
        move = TxUpdate("tx_a", 1, ("EXECUTING",), "ACTIVE", 2, None, T0 + 1)
        assert await store.update_transaction(move) == 2
        got = await store.get_transaction("tx_a")
        assert got is not None
        assert got.status == "ACTIVE"
        assert [r.id for r in await store.list_transactions(statuses=["ACTIVE"])] == ["tx_a"]
        assert await store.list_transactions(statuses=["EXECUTING"]) == []
    finally:
        await store.close()
