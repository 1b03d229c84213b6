"""In-process events: one per durable change of a transaction, for ``WatchTransaction``.

Subscribers get a bounded queue each; a subscriber that falls behind by more than the bound
loses the oldest events but never the latest state (events carry the full status and
revision, so the newest one says where the transaction is).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from agenttx.types import TxStatus

_KIND = {
    TxStatus.ACTIVE: "state",
    TxStatus.EXECUTING: "step",
    TxStatus.ROLLING_BACK: "rewind",
    TxStatus.COMMITTING: "commit",
    TxStatus.COMMITTED: "commit",
    TxStatus.ROLLED_BACK: "abort",
    TxStatus.FAILED: "abort",
    # A committed transaction's compensation: its undo actions running, then all run.
    TxStatus.COMPENSATING: "compensate",
    TxStatus.COMPENSATED: "compensate",
}


@dataclass(frozen=True, slots=True)
class TxEvent:
    transaction_id: str
    revision: int
    status: TxStatus
    next_step_id: int
    kind: str  # begin, state, step, rewind, commit, abort, compensate
    at: float


def event_for(
    transaction_id: str, revision: int, status: TxStatus, next_step: int, at: float
) -> TxEvent:
    return TxEvent(transaction_id, revision, status, next_step, _KIND[status], at)


class EventBus:
    def __init__(self, queue_size: int = 256) -> None:
        self._subs: dict[str, set[asyncio.Queue[TxEvent]]] = defaultdict(set)
        self._queue_size = queue_size
        self._listeners: list[Callable[[TxEvent], None]] = []

    def add_listener(self, listener: Callable[[TxEvent], None]) -> None:
        """Called synchronously with every event of every transaction (metrics, logs); it
        must be quick and must not raise."""
        self._listeners.append(listener)

    def listened(self, transaction_id: str) -> bool:
        """True iff an event of the transaction would reach anyone: a caller that has nobody
        to tell builds no event (every step publishes one)."""
        return bool(self._listeners) or transaction_id in self._subs

    def publish(self, event: TxEvent) -> None:
        for listener in self._listeners:
            listener(event)
        for q in self._subs.get(event.transaction_id, ()):
            if q.full():
                q.get_nowait()  # drop the oldest: the newest carries the current state
            q.put_nowait(event)

    def open_queue(self, transaction_id: str) -> asyncio.Queue[TxEvent]:
        """A queue that receives every event of the transaction from now on; ``close_queue``
        it."""
        q: asyncio.Queue[TxEvent] = asyncio.Queue(self._queue_size)
        self._subs[transaction_id].add(q)
        return q

    def close_queue(self, transaction_id: str, q: asyncio.Queue[TxEvent]) -> None:
        subs = self._subs.get(transaction_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                del self._subs[transaction_id]

    async def subscribe(self, transaction_id: str) -> AsyncGenerator[TxEvent, None]:
        q = self.open_queue(transaction_id)
        try:
            while True:
                yield await q.get()
        finally:
            self.close_queue(transaction_id, q)

    def subscribers(self, transaction_id: str) -> int:
        return len(self._subs.get(transaction_id, ()))
