"""Channels deliver one effect each; the ``Channel`` contract and the JSON-lines file channel.

A channel is called at least once per effect, always with the effect's idempotency key; it
should make a repeated delivery of the same key harmless (the JSON-lines channel skips keys it
has already written, so its file holds each effect once even across crashes).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Defined in the one error tree; re-exported here, where channels have always found it.
from agenttx.errors import PermanentDeliveryError as PermanentDeliveryError


@dataclass(frozen=True, slots=True)
class Effect:
    id: int  # outbox row id
    tx_id: str
    step_id: int
    channel: str
    payload: Any
    idempotency_key: str
    attempt: int  # 1 on the first delivery
    committed_at: float  # unix seconds
    tenant: str = "default"  # the transaction's tenant (an SMTP Message-ID derives from it)


class Channel(Protocol):
    """A channel may also have a ``jitter`` attribute (a fraction in [0, 1]: its retries wait
    that much less than the backoff, at random) and an ``async def aclose()``, called when
    the engine closes."""

    async def deliver(self, effect: Effect) -> None:
        """Deliver or raise. ``PermanentDeliveryError`` skips the remaining retries."""


class JsonlChannel:
    """Appends one compact JSON object per effect to a file, in the reference's format:
    ``tx_id, committed_at_ms, step_id, channel, payload, idempotency_key``.

    Each effect is one line, written by one ``write`` call on a descriptor opened for
    appending, and every append starts on a fresh line: a file that ends in a torn line (a
    crash or a full disk mid-append) gets the missing newline first, so the new effect is never
    glued onto the fragment (where no consumer could read it). A failed append is cut back off
    the file. Several processes may share one file (engines on one data directory): an
    exclusive ``flock`` covers read-check-append, and each process reads the lines the others
    appended before deciding a key is new, so each effect is in the file once. The file work
    runs on a worker thread, off the event loop."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._written: set[str] = set()  # keys in the file's first ``_scanned`` bytes
        self._scanned = 0  # bytes of the file read into ``_written`` (whole lines only)
        self._lock = threading.Lock()  # one writer thread at a time in this process

    def _catch_up(self, fd: int, size: int) -> None:
        """Read the keys of the complete lines appended since the last look (by anyone)."""
        if size < self._scanned:  # truncated or replaced by an operator: read it again
            self._written.clear()
            self._scanned = 0
        if size == self._scanned:
            return
        chunk = os.pread(fd, size - self._scanned, self._scanned)
        end = chunk.rfind(b"\n") + 1  # a torn last line is read once it is complete
        for line in chunk[:end].splitlines():
            try:
                self._written.add(json.loads(line)["idempotency_key"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a crash mid-append
        self._scanned += end

    def write(self, effect: Effect) -> None:
        line = json.dumps(
            {
                "tx_id": effect.tx_id,
                "committed_at_ms": int(effect.committed_at * 1000),
                "step_id": effect.step_id,
                "channel": effect.channel,
                "payload": effect.payload,
                "idempotency_key": effect.idempotency_key,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise _outbox_error(exc, self.path) from exc
            try:
                # Other processes append to the same file: hold it for read-check-append.
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                self._catch_up(fd, size)
                if effect.idempotency_key in self._written:
                    return
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                data = (b"\n" if torn else b"") + line + b"\n"
                try:
                    _write_all(fd, data)
                    if self.fsync:
                        os.fsync(fd)
                except OSError as exc:
                    # Leave the file as it was, not with half a line for consumers to skip.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    raise _outbox_error(exc, self.path) from exc
                self._written.add(effect.idempotency_key)
                self._scanned = size + len(data)
            finally:
                os.close(fd)  # also releases the flock

    async def deliver(self, effect: Effect) -> None:
        await asyncio.to_thread(self.write, effect)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _outbox_error(exc: OSError, path: Path) -> OSError:
    # The errno is kept: the dispatcher tells a full disk (wait for room) from other failures.
    return type(exc)(exc.errno, f"outbox {path}: {exc.strerror or exc}")
