"""``open_store`` on both stores, for store tests outside the contract suite: an async
factory of opened stores on this test's database (a SQLite file in ``tmp_path``, or the
test's fresh PostgreSQL database), each call reaching the same one. A test module that uses
it imports the fixture and ``pg_url`` (``from pg import pg_url``), which the PostgreSQL case
asks for by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttx.store.contract import Store
from agenttx.store.postgres import PostgresStore
from agenttx.store.sqlite import SqliteStore
from store_contract import OpenStore


@pytest.fixture(
    name="open_store",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def open_store_on_both(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:
    async def factory() -> Store:
        store: Store
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / "store.db")
        else:
            store = PostgresStore(request.getfixturevalue("pg_url"), pool_size=4)
        await store.open()
        return store

    return factory
