"""A PostgreSQL store's long read (``load_steps(large=True)``) on its own thread and connection.

``store/postgres_bulk.py``: the read runs on a synchronous connection of the store's own,
kept between reads. What a user of the store sees of that:

- after PostgreSQL ended every connection of the store (a restart, an administrator's
  ``pg_terminate_backend``), the next long read still answers, with the same rows;
- a read PostgreSQL refuses is an ``InternalError`` that says what PostgreSQL said, and the
  reads after it work once the cause is gone;
- a closed store refuses a long read, as the SQLite store does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

import agenttx
from agenttx.store.postgres import PostgresStore
from pg import pg_url  # noqa: F401 - the fixture
from store_contract import cas, new_tx, step_row

pytestmark = pytest.mark.postgres

STEPS = 30  # more than core.offload.LARGE_HISTORY_ATTEMPTS: what the engine reads as large


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:  # noqa: F811 - the fixture
    """A store holding transaction ``tx_long`` with ``STEPS`` successful steps."""
    store = PostgresStore(pg_url, pool_size=2)
    await store.open()
    try:
        await new_tx(store, "tx_long")
        rev = 1
        for seq in range(1, STEPS + 1):
            rev = await store.finish_step(cas("tx_long", rev), step_row("tx_long", seq, seq))
        yield store
    finally:
        await store.close()


def _admin(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(statement)


async def test_a_long_read_answers_after_postgres_ended_the_stores_connections(
    store: PostgresStore,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    plain = await store.load_steps("tx_long", live_only=False)
    assert len(plain) == STEPS
    assert await store.load_steps("tx_long", live_only=False, large=True) == plain
    # Every other session on the store's database ends: the long read's kept connection too.
    _admin(
        pg_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    assert await store.load_steps("tx_long", live_only=False, large=True) == plain
    live = await store.load_steps("tx_long", live_only=True, after_seq=10, large=True)
    assert [r.seq for r in live] == list(range(11, STEPS + 1))


async def test_a_refused_long_read_says_why_and_the_next_one_works(
    store: PostgresStore,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    assert len(await store.load_steps("tx_long", live_only=False, large=True)) == STEPS
    _admin(pg_url, "ALTER TABLE steps RENAME TO steps_away")
    try:
        with pytest.raises(agenttx.InternalError, match=r"PostgreSQL error: .*steps"):
            await store.load_steps("tx_long", live_only=False, large=True)
    finally:
        _admin(pg_url, "ALTER TABLE steps_away RENAME TO steps")
    assert len(await store.load_steps("tx_long", live_only=False, large=True)) == STEPS


async def test_a_closed_postgres_store_refuses_a_long_read(store: PostgresStore) -> None:
    assert len(await store.load_steps("tx_long", live_only=False, large=True)) == STEPS
    await store.close()
    with pytest.raises(agenttx.InternalError, match="closed"):
        await store.load_steps("tx_long", live_only=False, large=True)
