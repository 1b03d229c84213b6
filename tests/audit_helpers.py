"""Helpers the audit chain's tests share: a committed transaction, SQL run on the store
behind the engine's back, and ``agenttx audit`` run in-process."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from click.testing import CliRunner, Result

import agenttx
from agenttx.cli import main


def run_sql(url: str, query: str, params: tuple[Any, ...] = ()) -> None:
    """Tamper with the store behind the engine's back (what an attacker or a bad restore
    does), in the store's own SQL."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            c.execute(query, params)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(query.replace("?", "%s"), params)


async def committed(engine: agenttx.Engine, steps: int = 3) -> str:
    tx = (await engine.begin()).transaction_id
    for n in range(1, steps + 1):
        await engine.execute_step(tx, n, "kv.put", {"key": f"k{n}", "value": n})
    await engine.commit(tx)
    return tx


async def cli(*args: str) -> Result:
    """Run the command line on a worker thread: an in-process server or engine needs the
    loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))
