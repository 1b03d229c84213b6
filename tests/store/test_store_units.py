"""Units of work of the SQL base: several statements commit together or not at all.

A unit is written once, as a coroutine over a ``Connection``; PostgreSQL runs it in an
explicit transaction, SQLite's writer drives it to its end without an event loop. These tests
run the same units on both stores (conftest's ``store_url``) through ``SqlStore._atomic``,
the seam the rewind and the commit are built on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenttx.errors import InternalError
from agenttx.store.contract import TxRow
from agenttx.store.postgres import PostgresStore
from agenttx.store.sql_store import Connection, SqlStore
from agenttx.store.sqlite import SqliteStore

T0 = 1_700_000_000.0
INSERT_META = "INSERT INTO meta (name, value) VALUES (?, ?)"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlStore]:
    s: SqlStore
    if store_url.startswith("sqlite:///"):
        s = SqliteStore(Path(store_url.removeprefix("sqlite:///")))
    else:
        s = PostgresStore(store_url, pool_size=2)
    await s.open()
    yield s
    await s.close()


async def meta(store: SqlStore, name: str) -> list[int]:
    return [int(r[0]) for r in await store._rows("SELECT value FROM meta WHERE name = ?", (name,))]


async def test_a_unit_commits_all_its_statements_and_returns_its_value(store: SqlStore) -> None:
    async def unit(conn: Connection) -> int:
        await conn.execute(INSERT_META, ("a", 1))
        await conn.execute_many(INSERT_META, [("b", 2), ("c", 3)])
        got = await conn.execute(
            "UPDATE meta SET value = value + 10 WHERE name = ? RETURNING value", ("a",)
        )
        return int(got.rows[0][0])

    assert await store._atomic(unit) == 11
    assert [await meta(store, n) for n in "abc"] == [[11], [2], [3]]


async def test_a_unit_that_raises_leaves_nothing_behind(store: SqlStore) -> None:
    await store.create_transaction(
        TxRow("tx_1", "default", "a", "ACTIVE", 1, 1, 0, "snapshot", {}, T0, T0, T0)
    )

    async def unit(conn: Connection) -> None:
        await conn.execute(INSERT_META, ("half", 1))
        await conn.execute("UPDATE transactions SET revision = 9 WHERE id = ?", ("tx_1",))
        raise ValueError("changed my mind")

    with pytest.raises(ValueError, match="changed my mind"):
        await store._atomic(unit)
    assert await meta(store, "half") == []
    got = await store.get_transaction("tx_1")
    assert got is not None
    assert got.revision == 1


async def test_a_driver_error_in_a_unit_is_an_internal_error_and_rolls_back(
    store: SqlStore,
) -> None:
    async def unit(conn: Connection) -> None:
        await conn.execute(INSERT_META, ("dup", 1))
        await conn.execute(INSERT_META, ("dup", 2))  # primary key taken

    with pytest.raises(InternalError) as caught:
        await store._atomic(unit)
    assert caught.value.__cause__ is not None  # the driver's error, kept as the cause
    assert await meta(store, "dup") == []


async def test_a_sqlite_unit_may_not_wait_on_anything_but_its_connection(tmp_path: Path) -> None:
    # The writer drives units without an event loop (possibly on its flush thread): a unit
    # that suspends is refused, and what it wrote is rolled back.
    store = SqliteStore(tmp_path / "store.db")
    await store.open()
    try:

        async def unit(conn: Connection) -> None:
            await conn.execute(INSERT_META, ("early", 1))
            await asyncio.sleep(0)

        with pytest.raises(InternalError, match="awaited something other than its connection"):
            await store._atomic(unit)
        assert await meta(store, "early") == []
    finally:
        await store.close()
