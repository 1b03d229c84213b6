"""A PostgreSQL store's long reads (``load_steps(large=True)``), beside the event loop.

A 300-step history is ~10 MB of rows. Through the async pool, psycopg receives them on the
loop and turns the whole result into Python objects in one call there (``fetchall``); only
the JSON decoding went to a worker thread. Here the whole read runs on one thread of the
store's own with a synchronous connection of its own (psycopg waits for the socket with the
interpreter released), and the result is turned into rows ``CHUNK_ROWS`` at a time, so no
single call holds the interpreter long while the loop waits for it.

The read is one statement in autocommit, as on the pool: it sees the one snapshot its
statement takes (READ COMMITTED), the consistent state ``load_steps`` promises.

The connection opens on first use (most stores never read a long history) and is dropped
on a driver error; a read that finds the kept connection dead (a restarted server, an ended
backend) runs once more on a new one, as a read may.
One thread: long reads queue behind each other and never take more than one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg

from agenttx.errors import InternalError
from agenttx.store.postgres_target import Target

T = TypeVar("T")

# Rows made into Python objects per call: 64 steps of a 3 MB history are ~2 MB of text, a
# few milliseconds of one call holding the interpreter.
CHUNK_ROWS = 64


class BulkReader:
    """Long reads on a thread and a connection of their own; ``close`` ends both."""

    def __init__(self, target: Target) -> None:
        self._target = target
        # Both made on first use; the thread is the only user of the connection.
        self._thread: ThreadPoolExecutor | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()  # guards making and ending the thread
        self._closed = False  # true iff close() ran: no more reads

    async def rows(
        self,
        query: str,
        params: Sequence[Any],
        convert: Callable[[Sequence[Any]], T],
        failure: Callable[[psycopg.Error], Exception],
    ) -> list[T]:
        """``query``'s rows, each ``convert``ed, read on the thread; a driver error leaves as
        ``failure(exc)``."""
        with self._lock:
            if self._closed:
                raise InternalError("store is closed")
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="agenttx-pg-read")
            thread = self._thread
        return await asyncio.get_running_loop().run_in_executor(
            thread, self._read, query, params, convert, failure
        )

    def _read(
        self,
        query: str,
        params: Sequence[Any],
        convert: Callable[[Sequence[Any]], T],
        failure: Callable[[psycopg.Error], Exception],
    ) -> list[T]:
        """On the thread. A read is safe to repeat: if the connection kept from an earlier
        read turns out dead (the server restarted, the backend was ended while idle), it is
        read once more on a new one."""
        reused = self._conn is not None and not self._conn.closed
        try:
            return self._read_on(self._connected(), query, params, convert)
        except psycopg.Error as exc:
            dead = self._conn is not None and self._conn.broken
            self._drop()
            if not (reused and dead):
                raise failure(exc) from exc
        try:
            return self._read_on(self._connected(), query, params, convert)
        except psycopg.Error as exc:
            self._drop()
            raise failure(exc) from exc

    def _connected(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._target.dsn, autocommit=True, **self._target.connect_kwargs
            )
        return self._conn

    @staticmethod
    def _read_on(
        conn: psycopg.Connection[Any],
        query: str,
        params: Sequence[Any],
        convert: Callable[[Sequence[Any]], T],
    ) -> list[T]:
        found: list[T] = []
        with conn.cursor() as cur:
            cur.execute(query, params)
            while chunk := cur.fetchmany(CHUNK_ROWS):
                found.extend(convert(r) for r in chunk)
        return found

    def _drop(self) -> None:
        """On the thread: end the connection (after a failure: the next read makes another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def close(self) -> None:
        """End the connection, after a read in progress (the thread runs one thing at a
        time, in order), then the thread."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(thread, self._drop)
            thread.shutdown(wait=False)
