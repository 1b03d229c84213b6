"""Group commit for one SQLite connection.

Every write unit is a function run against the connection inside ``BEGIN IMMEDIATE … COMMIT``.
Units submitted while a flush is pending or running share the next database transaction (each
under its own SAVEPOINT, so one unit's failure rolls back only that unit). A unit's future is
resolved only after COMMIT returned, so no caller sees success for a write that is not yet
durable at the configured ``synchronous`` level.

Two modes:
- A unit alone (the engine has one call in flight, no flush pending) commits at once, on the
  event loop thread, at either durability: nobody waits for the loop meanwhile, and a thread
  hop would cost more (~35 µs) than a WAL commit without fsync (~10 µs).
- Under concurrency, at the default durability (``synchronous=NORMAL``, inline mode), units
  wait for the end of the loop turn and share one transaction.
- Under concurrency with ``sync_writes`` (``synchronous=FULL``, threaded mode), the flush, with
  its fsync, runs on one dedicated thread; while it runs, new units queue up and share the
  next fsync, and the loop stays free.
- A large unit (the caller says so: a step row holding a megabyte of arguments and output)
  alone runs on a worker thread in either mode: binding and writing its text takes tens of
  milliseconds, every other client's wait on the loop thread. Units submitted meanwhile queue
  up and are flushed together once it is done, as behind any flush.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

Unit = Callable[[sqlite3.Connection], Any]


class GroupCommitWriter:
    def __init__(self, conn: sqlite3.Connection, *, threaded: bool) -> None:
        self._conn = conn
        self._threaded = threaded
        self._pending: list[tuple[Unit, asyncio.Future[Any]]] = []
        self._scheduled = False  # true iff a flush is scheduled or running
        # Serialises use of the connection: the flush thread versus run_sync at shutdown.
        self._lock = threading.Lock()
        # Guards _pending in threaded mode: the loop thread appends while the flush thread swaps.
        self._pending_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, "agenttx-sqlite") if threaded else None
        # How many calls the engine has in flight: with more than one, inline writes wait for
        # the end of the loop turn and commit together (group commit); alone, they commit now.
        self.concurrency: Callable[[], int] = lambda: 1
        # Database transactions committed on this connection (each one fsync with
        # sync_writes): what tests count to prove how many durable writes a call costs.
        self.commits = 0
        # Inline fast path: a marker callback is pending until the loop's next turn; while it
        # is, the loop has been held since _held_since.
        self._turn_pending = False
        self._held_since = 0.0

    def _loop_turned(self) -> None:
        self._turn_pending = False

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def run(self, unit: Callable[[sqlite3.Connection], T], *, large: bool = False) -> T:
        """Run ``unit`` in a database transaction; its value once committed. ``large``: the
        unit writes enough text that it should not run on the loop thread (module doc)."""
        loop = asyncio.get_running_loop()
        if large and not self._scheduled:
            return await self._run_off_loop(loop, unit)
        if not self._scheduled and self.concurrency() <= 1:
            # Alone: commit now, on the loop thread. Waiting a loop turn for company would
            # cost more than the ~10 µs commit it could share; with sync_writes, the thread
            # hop (and the GIL hand-offs around it) would add to the fsync while nobody else
            # is waiting for the loop.
            with self._lock:
                value, exc = self._execute_units([unit])[0]
            # A caller that never waits on anything else would otherwise hold the loop for
            # as long as it keeps writing; let other tasks (dispatcher, other clients) run at
            # least once a millisecond. A server's calls give the loop a turn between them
            # anyway, so only a loop that has not turned for that long is made to.
            if not self._turn_pending:
                self._turn_pending = True
                self._held_since = loop.time()
                loop.call_soon(self._loop_turned)
            elif loop.time() - self._held_since > 0.001:
                await asyncio.sleep(0)
            if exc is not None:
                raise exc
            return value  # type: ignore[no-any-return]
        fut: asyncio.Future[T] = loop.create_future()
        with self._pending_lock:
            self._pending.append((unit, fut))
        if not self._scheduled:
            self._scheduled = True
            if self._threaded:
                loop.run_in_executor(self._executor, self._flush_threaded, loop)
            else:
                # Busy: flush at the end of this loop turn, so the writes other tasks submit
                # in the same turn share one transaction (one write of the shared pages).
                loop.call_soon(self._flush_inline)
        return await fut

    async def _run_off_loop(
        self, loop: asyncio.AbstractEventLoop, unit: Callable[[sqlite3.Connection], T]
    ) -> T:
        # Marked as a running flush: units submitted meanwhile queue up (and never block the
        # loop on the connection's lock), and go out together once this one is done.
        self._scheduled = True
        done = loop.run_in_executor(self._executor, self._execute_one, unit)
        # Reset by the thread's completion, not by this caller: a caller cancelled meanwhile
        # leaves the unit to finish (or not) atomically, as a cancelled caller of a flush does.
        done.add_done_callback(lambda _: self._after_off_loop(loop))
        value, exc = await asyncio.shield(done)
        if exc is not None:
            raise exc
        return value  # type: ignore[no-any-return]

    def _after_off_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        if not self._pending:
            return
        self._scheduled = True
        if self._threaded:
            loop.run_in_executor(self._executor, self._flush_threaded, loop)
        else:
            loop.call_soon(self._flush_inline)

    def _flush_inline(self) -> None:
        batch, self._pending = self._pending, []
        self._scheduled = False
        for (_, fut), (value, exc) in zip(batch, self._execute(batch), strict=True):
            _settle(fut, value, exc)

    def read_if_idle(self, query: str, params: Sequence[Any]) -> list[Any] | None:
        """The rows of a read run on this writer's connection, or None if the connection is in
        use (the flush thread holds it): then the caller reads on its own connection.

        Why read here at all: every commit of this connection makes every *other* connection
        drop its page cache on its next read (WAL), so a read on a second connection right
        after a write re-reads the B-tree pages it walks from the file (~20 µs for a request
        lookup after a step), while this connection's cache is current. Between units the
        connection is outside any transaction, so the read sees exactly the last commit, as
        the reader connection would."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._conn.in_transaction:
                return None  # not reachable between units; a read must not see a unit's work
            return self._conn.execute(query, params).fetchall()
        finally:
            self._lock.release()

    def run_sync(self, unit: Callable[[sqlite3.Connection], T]) -> T:
        """Run one unit now, outside the batcher (start-up and shutdown only); its error, if
        it failed (the unit rolled back), is raised here."""
        with self._lock:
            [(value, error)] = self._execute_units([unit])
        if error is not None:
            raise error
        return value  # type: ignore[no-any-return]

    def _flush_threaded(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            # A new flush is not scheduled while _scheduled holds, so this thread is the only
            # consumer; the lock keeps an append from landing in a batch already taken.
            with self._pending_lock:
                batch, self._pending = self._pending, []
            if not batch:
                loop.call_soon_threadsafe(self._maybe_reschedule, loop)
                return
            results = self._execute(batch)
            loop.call_soon_threadsafe(_settle_all, batch, results)

    def _maybe_reschedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        if self._pending:
            self._scheduled = True
            loop.run_in_executor(self._executor, self._flush_threaded, loop)

    def _execute(
        self, batch: list[tuple[Unit, asyncio.Future[Any]]]
    ) -> list[tuple[Any, BaseException | None]]:
        with self._lock:
            return self._execute_units([u for u, _ in batch])

    def _execute_one(self, unit: Unit) -> tuple[Any, BaseException | None]:
        with self._lock:
            return self._execute_units([unit])[0]

    def _execute_units(self, units: list[Unit]) -> list[tuple[Any, BaseException | None]]:
        """``_execute_batch`` on this writer's connection, counting its commits. The caller
        holds ``_lock``."""
        results, committed = _execute_batch(self._conn, units)
        self.commits += committed
        return results


def _execute_batch(
    conn: sqlite3.Connection, units: list[Unit]
) -> tuple[list[tuple[Any, BaseException | None]], bool]:
    """Run the units in one database transaction; every unit gets a result or an error.

    A unit's own exception rolls back only that unit (savepoint). A failure of the database
    transaction itself (BEGIN, a savepoint, COMMIT: busy, disk full, I/O) fails every unit of
    the batch, so no caller waits forever and none is told a rolled-back write succeeded.
    Also says whether the transaction committed."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        if len(units) == 1:
            # A lone unit needs no savepoint: its failure rolls back the whole transaction.
            try:
                value = units[0](conn)
            except Exception as exc:
                if conn.in_transaction:  # SQLite may have rolled back itself (below)
                    conn.execute("ROLLBACK")
                return [(None, exc)], False
            conn.execute("COMMIT")
            return [(value, None)], True
        results: list[tuple[Any, BaseException | None]] = []
        for unit in units:
            conn.execute("SAVEPOINT unit")
            try:
                value = unit(conn)
            except Exception as exc:
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back itself, as it may on a full
                    # disk or an I/O error: the units before this one are undone too, and a
                    # ROLLBACK would fail and hide this error behind its own.
                    return [(None, exc)] * len(units), False
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
                results.append((None, exc))
            else:
                conn.execute("RELEASE unit")
                results.append((value, None))
        conn.execute("COMMIT")
        return results, True
    except sqlite3.Error as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection reports the original error below
        return [(None, exc)] * len(units), False


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled; the write still happened (or not) atomically
        return
    if exc is None:
        fut.set_result(value)
    else:
        fut.set_exception(exc)


def _settle_all(
    batch: list[tuple[Unit, asyncio.Future[Any]]],
    results: list[tuple[Any, BaseException | None]],
) -> None:
    for (_, fut), (value, exc) in zip(batch, results, strict=True):
        _settle(fut, value, exc)
