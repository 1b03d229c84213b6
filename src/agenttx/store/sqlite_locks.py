"""Locks that the processes sharing one SQLite file take on each other: one per transaction,
and one that says who else has the file open.

Both are byte-range locks on a side file (``<db>-locks``, no bytes ever written): a
transaction's lock is one byte at an offset hashed from its id, exclusive; the presence lock
is a byte past that range, held shared by every open store for its lifetime. They are open
file description locks (Linux ``F_OFD_SETLK``): two stores conflict even inside one process
(two engines on one file), the kernel drops them when the process dies (no stale lock after a
crash), and unlike POSIX locks closing another descriptor of the file never releases them.
Where OFD locks do not exist, POSIX record locks (``lockf``) stand in: processes still
exclude each other, engines within one process do not (documented in docs/operations.md).

Two transactions whose ids hash to one byte share its lock: they only wait for each other's
calls. In one store such a byte is counted, and released when its last holder is done.
Waiting for a lock another process holds polls with a growing sleep (1 ms → 50 ms): the kernel
has no wake-up that an event loop can await, and a thread blocked in ``F_SETLKW`` could not be
given a timeout. Contention needs two processes in calls on the same transaction at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import time
import zlib
from pathlib import Path

from agenttx.errors import DeadlineExceeded

# Transaction locks live on bytes [0, _TX_BYTES); the presence lock on the byte after them.
_TX_BYTES = 1 << 24
_PRESENCE = _TX_BYTES
_OFD = hasattr(fcntl, "F_OFD_SETLK")
_FIRST_WAIT_S = 0.001
_LONGEST_WAIT_S = 0.05


def _offset(tx_id: str) -> int:
    return zlib.crc32(tx_id.encode()) % _TX_BYTES


class LockFile:
    """The side file's locks, for one open store. Not thread-safe: the event loop's thread
    takes and releases every lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._held: dict[int, int] = {}  # byte -> holders in this store (calls in flight)
        # True iff no other store had the file open when this one opened it.
        self.alone_at_open = self._try(_PRESENCE, fcntl.F_WRLCK)
        # From now on every store holds presence shared (an atomic conversion of our own).
        self._lock(_PRESENCE, fcntl.F_RDLCK, wait=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases every lock of this descriptor
            self._fd = -1
            self._held.clear()

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
