"""The Store contract suite (``store_contract.py``) bound to ``PostgresStore``: a fresh
database per test on the local PostgreSQL server."""

from __future__ import annotations

import pytest

from agenttx.store.contract import Store
from agenttx.store.postgres import PostgresStore
from pg import pg_url  # noqa: F401 - the fixture
from store_contract import OpenStore, StoreContract

pytestmark = pytest.mark.postgres


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def open_store(self, pg_url: str) -> OpenStore:  # noqa: F811
        async def factory() -> Store:
            store = PostgresStore(pg_url, pool_size=4)
            await store.open()
            return store

        return factory
