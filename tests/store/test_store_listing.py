"""Listings go oldest first, on both stores and through the engine.

Transaction ids were random (since schema 7 they follow their begin's millisecond only), so
ordering by id (as listings once did) shuffled ``agenttx tx list``, which promises oldest
first. These tests create transactions whose ids sort in the opposite order of their
creation, and check that listings and their continuation follow creation time (ties by id),
also when rows change status between pages. Each runs on both stores (conftest's
``store_url``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agenttx.errors import InvalidArgument
from agenttx.store.contract import Store, TxRow, TxUpdate
from agenttx.store.postgres import PostgresStore
from agenttx.store.sql import SCHEMA_VERSION
from agenttx.store.sqlite import SqliteStore
from conftest import FakeClock

T0 = 1_700_000_000.0


def row(tx_id: str, created: float, *, agent_id: str = "agent", status: str = "ACTIVE") -> TxRow:
    return TxRow(
        tx_id, "default", agent_id, status, 1, 1, 0, "snapshot", {}, created, created, created
    )


def new_store(url: str) -> Store:
    if url.startswith("sqlite:///"):
        return SqliteStore(Path(url.removeprefix("sqlite:///")))
    return PostgresStore(url, pool_size=2)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    s = new_store(store_url)
    await s.open()
    yield s
    await s.close()


async def ids(store: Store, **kwargs: Any) -> list[str]:
    return [r.id for r in await store.list_transactions(**kwargs)]


async def test_listing_is_oldest_first_not_by_id(store: Store) -> None:
    # z… created first, a… last: id order is the reverse of creation order.
    for n, tx_id in enumerate(["tx_z", "tx_m", "tx_q", "tx_a"]):
        await store.create_transaction(row(tx_id, T0 + n))
    assert await ids(store) == ["tx_z", "tx_m", "tx_q", "tx_a"]
    assert await ids(store, limit=2) == ["tx_z", "tx_m"]


async def test_equal_creation_times_are_ordered_by_id(store: Store) -> None:
    for tx_id in ["tx_c", "tx_a", "tx_b"]:
        await store.create_transaction(row(tx_id, T0))
    await store.create_transaction(row("tx_0", T0 - 1))
    assert await ids(store) == ["tx_0", "tx_a", "tx_b", "tx_c"]
    assert await ids(store, after_id="tx_a") == ["tx_b", "tx_c"]


async def test_paging_continues_after_the_last_row_of_a_page(store: Store) -> None:
    created = [f"tx_{c}" for c in "hgfedcba"]  # ids descend while creation times rise
    for n, tx_id in enumerate(created):
        await store.create_transaction(row(tx_id, T0 + n, agent_id="x" if n % 2 else "y"))
    pages: list[list[str]] = []
    after = ""
    while page := await ids(store, limit=3, after_id=after):
        pages.append(page)
        after = page[-1]
    assert pages == [created[0:3], created[3:6], created[6:8]]
    # Filters and the cursor together: the cursor need not match the filter itself.
    assert await ids(store, agent_id="x", after_id=created[0]) == created[1::2]
    assert await ids(store, agent_id="y", after_id=created[1], limit=2) == created[2:6:2]


async def test_a_listing_neither_repeats_nor_skips_rows_that_change_between_pages(
    store: Store,
) -> None:
    # Recovery pages through ROLLING_BACK/EXECUTING rows while it moves them to ACTIVE; a
    # row moved out of the filter must not shift the rest of the listing.
    created = [f"tx_{c}" for c in "fedcba"]
    for n, tx_id in enumerate(created):
        await store.create_transaction(row(tx_id, T0 + n, status="ROLLING_BACK"))
    seen: list[str] = []
    after = ""
    while page := await ids(store, statuses=["ROLLING_BACK"], limit=2, after_id=after):
        seen += page
        after = page[-1]
        for tx_id in page:  # settle the rows just listed
            u = TxUpdate(tx_id, 1, ("ROLLING_BACK",), "ACTIVE", 1, None, T0 + 100)
            await store.update_transaction(u)
    assert seen == created
    assert await ids(store, statuses=["ROLLING_BACK"]) == []


async def test_a_cursor_naming_no_transaction_is_refused(store: Store) -> None:
    await store.create_transaction(row("tx_a", T0))
    with pytest.raises(InvalidArgument, match="tx_nope"):
        await store.list_transactions(after_id="tx_nope")
    # The end of a real listing is an empty page, not an error.
    assert await ids(store, after_id="tx_a") == []


async def test_a_store_made_before_the_creation_order_index_gains_it(store_url: str) -> None:
    store = new_store(store_url)
    await store.open()
    await store.close()
    # Put the store back to schema 1: no index for the creation order.
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as c:
            c.execute("DROP INDEX transactions_by_age")
            c.execute("PRAGMA user_version=1")
        c.close()
        query = "SELECT name FROM sqlite_master WHERE type = 'index'"
    else:
        with psycopg.connect(store_url, autocommit=True) as pc:
            pc.execute("DROP INDEX transactions_by_age")
            pc.execute("UPDATE agenttx_schema SET version = 1")
        query = "SELECT indexname FROM pg_indexes WHERE tablename = 'transactions'"
    store = new_store(store_url)
    await store.open()
    await store.create_transaction(row("tx_b", T0 + 1))
    await store.create_transaction(row("tx_a", T0 + 2))
    assert await ids(store) == ["tx_b", "tx_a"]
    await store.close()
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as c:
            names = {r[0] for r in c.execute(query)}
            version = c.execute("PRAGMA user_version").fetchone()[0]
        c.close()
    else:
        with psycopg.connect(store_url) as pc:
            names = {r[0] for r in pc.execute(query)}
            got = pc.execute("SELECT version FROM agenttx_schema").fetchone()
            version = got[0] if got else None
    assert "transactions_by_age" in names
    # Recorded as the current schema (2 when this test was written; 3 since the audit table).
    assert version == SCHEMA_VERSION


async def test_engine_pages_list_transactions_in_the_order_they_began(
    open_engine: Any, clock: FakeClock
) -> None:
    # Seven random ids come out in begin order by chance once in 5040 runs: id order and
    # creation order differ here, so the listing below tells them apart.
    engine = await open_engine(clock=clock, background=False)
    began: list[str] = []
    for _ in range(7):
        began.append((await engine.begin(agent_id="pager")).transaction_id)
        clock.advance(1)
    walked: list[str] = []
    token = ""
    while True:
        page = await engine.list_transactions_page(agent_id="pager", page_size=3, page_token=token)
        walked += [t.transaction_id for t in page.transactions]
        token = page.next_page_token
        if not token:
            break
    assert walked == began
    listed = await engine.list_transactions(agent_id="pager", limit=4, after_id=began[1])
    assert [t.transaction_id for t in listed] == began[2:6]
    # A page token that names no transaction is refused, not taken for the end.
    with pytest.raises(InvalidArgument, match="no such transaction"):
        await engine.list_transactions_page(page_token="tx_not_a_real_one")
