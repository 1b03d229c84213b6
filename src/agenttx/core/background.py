"""The engine's background work: the outbox dispatcher's delivery loop and one maintenance
loop (idle reaper, recovery of what a dead process left, pruning).

Cadences (``docs/recovery.md``): the reaper ticks every timeout/4, clamped to 50 ms – 5 s
(``reaper_tick``); recovery runs every ``RECOVER_EVERY_S``; old state versions and expired
stored replies are pruned once a minute, and so is what retention lets go (``retention``). A
failing pass is logged and the loop goes on.

Invariants: ``start`` runs at most once until ``stop``; ``stop`` ends both tasks and returns
only when they have ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agenttx.core.config import Clock, EngineConfig
from agenttx.core.recovery import Recovery
from agenttx.core.retention import REQUEST_TTL_S, Retention
from agenttx.store.contract import Store

log = logging.getLogger("agenttx")

RECOVER_EVERY_S = 5.0  # how often a running engine looks for work a dead process left behind
REAPER_MIN_TICK_S = 0.05
REAPER_MAX_TICK_S = RECOVER_EVERY_S  # see docs/recovery.md: a timeout is never late by more
PRUNE_EVERY_S = 60.0


def reaper_tick(idle_timeout_s: float) -> float:
    """Seconds between maintenance passes: timeout/4 clamped to 50 ms – 5 s, so a transaction
    idle for T is aborted by T + min(T/4, 5 s); with the reaper off, the recovery cadence."""
    if idle_timeout_s <= 0:
        return RECOVER_EVERY_S
    return min(max(idle_timeout_s / 4, REAPER_MIN_TICK_S), REAPER_MAX_TICK_S)


class DeliveryLoop(Protocol):
    """What the background needs of a dispatcher (``agenttx.effects.OutboxDispatcher``)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver queued effects until ``stop`` is set."""
        ...


class Background:
    def __init__(
        self,
        recovery: Recovery,
        dispatcher: DeliveryLoop,
        store: Store,
        config: EngineConfig,
        clock: Clock,
        retention: Retention | None = None,
        *,
        compensations: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.recovery = recovery  # reaps, recovers and prunes on each pass
        self.retention = retention  # ended transactions, delivered effects, old audit chains
        # Finishes compensating transactions a dead process left (``Compensator.recover``).
        self.compensations = compensations
        self.dispatcher = dispatcher
        self.store = store
        self.config = config
        self.clock = clock
        self._stop = asyncio.Event()  # set by ``stop``: both loops end at their next wake-up
        self._tasks: list[asyncio.Task[Any]] = []  # empty iff not started (or stopped)

    def start(self) -> None:
        if self._tasks:
            return
        self._stop.clear()
        self._tasks.append(asyncio.create_task(self.dispatcher.run(self._stop)))
        self._tasks.append(asyncio.create_task(self._maintain()))

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def _maintain(self) -> None:
        idle = self.config.tx_idle_timeout_s
        tick = reaper_tick(idle)
        last_prune = 0.0
        last_recover = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), tick)
            if self._stop.is_set():
                return
            try:
                if idle > 0:
                    await self.recovery.reap_idle()
                if time.monotonic() - last_recover >= RECOVER_EVERY_S:
                    # Another process or replica may have died mid-step or mid-rewind.
                    last_recover = time.monotonic()
                    await self.recovery.recover()
                    if self.compensations is not None:
                        await self.compensations()
                if time.monotonic() - last_prune >= PRUNE_EVERY_S:
                    last_prune = time.monotonic()
                    await self.recovery.prune_versions()
                    # Undo records kept for compensations whose window ended.
                    await self.store.prune_kept_undo(self.clock())
                    if self.retention is not None:
                        await self.retention.prune()  # stored replies included
                    else:
                        await self.store.prune_requests(self.clock() - REQUEST_TTL_S)
            except Exception:
                log.exception("maintenance pass failed")
