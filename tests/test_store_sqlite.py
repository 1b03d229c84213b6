"""The Store contract suite (``store_contract.py``) bound to ``SqliteStore``: one SQLite file
per test, with the default durability and with ``sync_writes`` (threaded writer, FULL sync)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttx.store.contract import Store
from agenttx.store.sqlite import SqliteStore
from store_contract import OpenStore, StoreContract


class TestSqliteStore(StoreContract):
    sync_writes = False

    @pytest.fixture
    def open_store(self, tmp_path: Path) -> OpenStore:
        async def factory() -> Store:
            store = SqliteStore(tmp_path / "store.db", sync_writes=self.sync_writes)
            await store.open()
            return store

        return factory


class TestSqliteStoreSyncWrites(TestSqliteStore):
    sync_writes = True


async def test_a_version_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    """A file written before the one-statement step write (schema 1) opens, gains the view
    and its trigger, and keeps its rows."""
    import sqlite3

    from agenttx.store import sqlite as sqlite_store
    from store_contract import T0, cas, new_tx, step_row

    path = tmp_path / "old.db"
    first = SqliteStore(path)
    await first.open()
    row = await new_tx(first, "tx_old")
    await first.close()
    with sqlite3.connect(path) as c:  # make it look like schema 1
        c.execute("DROP TRIGGER step_write_insert")
        c.execute("DROP VIEW step_write")
        c.execute("PRAGMA user_version=1")
    store = SqliteStore(path)
    await store.open()
    try:
        assert (
            await store.finish_step(
                cas("tx_old", row.revision, now=T0 + 1), step_row("tx_old", 1, 1)
            )
            == 2
        )
        with sqlite3.connect(path) as c:
            assert c.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.SCHEMA_VERSION
    finally:
        await store.close()
