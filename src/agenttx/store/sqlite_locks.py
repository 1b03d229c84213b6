"""Locks that the processes sharing one SQLite file take on each other: one per transaction,
and the presence lock that says whether a store is alone on the file.

All are byte-range locks on a side file (``<db>-locks``, no bytes ever written). They are
open file description locks (Linux ``F_OFD_SETLK``): two stores conflict even inside one
process (two engines on one file), the kernel drops them when the process dies (no stale lock
after a crash), and unlike POSIX locks closing another descriptor never releases them. Where
OFD locks do not exist, POSIX record locks (``lockf``) stand in: processes still exclude each
other, engines within one process do not (docs/operations.md).

**Alone** (the common case, one process per data directory): a store that finds nobody on the
file holds the presence byte *exclusively* and takes no transaction locks at all — its cache
is authoritative, as it always was. A second store that opens *knocks* (holds the knock byte
shared) and waits for presence; the first one's watcher (every ``WATCH_S``) sees the knock,
stops taking calls without locks, takes the transaction locks of the calls it already began
that way (nobody else can hold them yet), so they finish protected, and turns its presence
into a shared lock. From then on both are **shared**: every call holds its
transaction's byte, exclusively, so calls on one transaction in two processes run one after
the other. A store that has shared the file stays shared until it is closed.

A transaction's byte is at an offset hashed from its id; two transactions on one byte only
wait for each other's calls, and within one store such a byte is counted and released when its
last holder is done. Waiting for a byte another process holds polls with a growing sleep
(1 ms → 50 ms): the kernel has no wake-up an event loop can await, and a thread blocked in
``F_SETLKW`` could not be given a timeout. Contention needs two processes in calls on the same
transaction at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import time
import zlib
from pathlib import Path

from agenttx.errors import DeadlineExceeded, InternalError

# Transaction locks live on bytes [0, _TX_BYTES); presence and knock on the two after them.
_TX_BYTES = 1 << 24
_PRESENCE = _TX_BYTES
_KNOCK = _TX_BYTES + 1
_OFD = hasattr(fcntl, "F_OFD_SETLK")
_FIRST_WAIT_S = 0.001
_LONGEST_WAIT_S = 0.05
WATCH_S = 0.05  # how often a store alone on the file looks for a knock
JOIN_TIMEOUT_S = 30.0  # how long an opening store waits for the one alone to make room


def _offset(tx_id: str) -> int:
    return zlib.crc32(tx_id.encode()) % _TX_BYTES


class LockFile:
    """The side file's locks, for one open store. Not thread-safe: the event loop's thread
    takes and releases every lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._held: dict[int, int] = {}  # byte -> holders in this store (calls in flight)
        # True iff this store holds presence exclusively: no other store has the file open,
        # and calls take no transaction locks.
        self.alone = False
        # True iff no other store had the file open when this one opened it.
        self.alone_at_open = False
        # Transaction id -> calls in flight on it that began while alone (they hold nothing).
        self._unlocked: dict[str, int] = {}
        # Transaction id -> such calls whose lock was taken for them when the store turned
        # shared: their end releases it.
        self._adopted: dict[str, int] = {}
        self._watcher: asyncio.TimerHandle | None = None

    async def join(self) -> None:
        """Take presence: exclusively if nobody else has the file, else shared once the store
        that is alone has made room (``InternalError`` if it does not within
        ``JOIN_TIMEOUT_S``)."""
        if self._try(_PRESENCE, fcntl.F_WRLCK):
            self.alone = self.alone_at_open = True
            self._watch_soon()
            return
        self._lock(_KNOCK, fcntl.F_RDLCK, wait=False)  # shared knocks never conflict
        try:
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            while not self._try(_PRESENCE, fcntl.F_RDLCK):
                if time.monotonic() > deadline:
                    raise InternalError(
                        f"another process holds {self.path} and did not make room for this "
                        f"one within {JOIN_TIMEOUT_S:g} s (is its event loop stuck?)"
                    )
                await asyncio.sleep(0.005)
        finally:
            self._lock(_KNOCK, fcntl.F_UNLCK, wait=False)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if self._fd >= 0:
            os.close(self._fd)  # releases every lock of this descriptor
            self._fd = -1
            self._held.clear()
        self.alone = False

    # ------------------------------------------------------------------ alone → shared

    def _watch_soon(self) -> None:
        self._watcher = asyncio.get_running_loop().call_later(WATCH_S, self._watch)

    def begin_unlocked_call(self, tx_id: str) -> None:
        """A call on ``tx_id`` begins while alone: it holds nothing (see ``end_unlocked_call``)."""
        self._unlocked[tx_id] = self._unlocked.get(tx_id, 0) + 1

    def end_unlocked_call(self, tx_id: str) -> None:
        """A call that began while alone has ended; if the store turned shared meanwhile, the
        lock taken for it is released."""
        adopted = self._adopted.get(tx_id, 0)
        if adopted:
            if adopted == 1:
                del self._adopted[tx_id]
            else:
                self._adopted[tx_id] = adopted - 1
            self.release(tx_id)
            return
        left = self._unlocked.get(tx_id, 0) - 1
        if left > 0:
            self._unlocked[tx_id] = left
        else:
            self._unlocked.pop(tx_id, None)

    def _watch(self) -> None:
        self._watcher = None
        if self._fd < 0 or not self.alone:
            return
        if not self._knocked():
            self._watch_soon()
            return
        self.alone = False  # new calls lock from now on
        # The calls in flight take their transactions' locks now: nobody else can hold them
        # (the knocking store has not joined), and from here on no other process enters a
        # call on those transactions until they end.
        for tx_id, calls in self._unlocked.items():
            for _ in range(calls):
                if not self.try_acquire(tx_id):  # cannot happen: nobody else has joined
                    raise InternalError(f"transaction lock of {tx_id} taken while alone")
            self._adopted[tx_id] = self._adopted.get(tx_id, 0) + calls
        self._unlocked.clear()
        self._lock(_PRESENCE, fcntl.F_RDLCK, wait=False)  # an atomic downgrade: room made

    def _knocked(self) -> bool:
        """True iff another store holds the knock byte (it waits to open the file)."""
        if not _OFD:
            return not self._try_knock_alone()
        probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _KNOCK, 1, 0)
        answer = fcntl.fcntl(self._fd, fcntl.F_OFD_GETLK, probe)
        return bool(struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK)

    def _try_knock_alone(self) -> bool:
        # POSIX locks have no per-descriptor GETLK; take and drop the byte instead.
        if self._try(_KNOCK, fcntl.F_WRLCK):
            self._lock(_KNOCK, fcntl.F_UNLCK, wait=False)
            return True
        return False

    # ------------------------------------------------------------------ transactions

    def try_acquire(self, tx_id: str) -> bool:
        """Take ``tx_id``'s lock if nobody else holds it; never waits."""
        byte = _offset(tx_id)
        holders = self._held.get(byte, 0)
        if holders == 0 and not self._try(byte, fcntl.F_WRLCK):
            return False
        self._held[byte] = holders + 1
        return True

    async def acquire(self, tx_id: str, timeout_s: float) -> None:
        """Take ``tx_id``'s lock, waiting at most ``timeout_s`` for another process to leave
        it; ``DeadlineExceeded`` after that (nothing held)."""
        if self.try_acquire(tx_id):
            return
        deadline = time.monotonic() + timeout_s
        wait = _FIRST_WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(
                    f"transaction {tx_id[:64]} is busy with a call in another process for more "
                    f"than {timeout_s:g} s; retry later"
                )
            await asyncio.sleep(min(wait, left))
            if self.try_acquire(tx_id):
                return
            wait = min(wait * 2, _LONGEST_WAIT_S)

    def release(self, tx_id: str) -> None:
        byte = _offset(tx_id)
        holders = self._held.get(byte, 0) - 1
        if holders > 0:
            self._held[byte] = holders
            return
        self._held.pop(byte, None)
        if self._fd >= 0:
            self._lock(byte, fcntl.F_UNLCK, wait=False)

    # ------------------------------------------------------------------ the system calls

    def _try(self, byte: int, kind: int) -> bool:
        try:
            self._lock(byte, kind, wait=False)
        except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: someone else holds it
            return False
        return True

    def _lock(self, byte: int, kind: int, *, wait: bool) -> None:
        if _OFD:
            # struct flock: l_type, l_whence (shorts), l_start, l_len (off_t), l_pid (0 for
            # OFD locks), padded to the C struct's size.
            request = struct.pack("hhqqi4x", kind, os.SEEK_SET, byte, 1, 0)
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, request)
            return
        how = {fcntl.F_WRLCK: fcntl.LOCK_EX, fcntl.F_RDLCK: fcntl.LOCK_SH}.get(kind, fcntl.LOCK_UN)
        if not wait and how != fcntl.LOCK_UN:
            how |= fcntl.LOCK_NB
        fcntl.lockf(self._fd, how, 1, byte, os.SEEK_SET)


__all__ = ["LockFile"]
