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
