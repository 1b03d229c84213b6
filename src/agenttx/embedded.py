"""``agenttx.Engine``: the engine opened on a store URL, with its background work.

``await Engine.open(url)`` opens (and migrates) the store, registers the built-in and user
tools, finishes what a crash interrupted (``recover``), and starts two background tasks: the
outbox dispatcher and the idle reaper. ``await engine.close()`` stops them and the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agenttx.core.base import LIVE_OWNERS
from agenttx.core.controller import RollbackController
from agenttx.core.eager import leave_eager
from agenttx.core.engine import Clock, CoreEngine, EngineConfig, new_owner
from agenttx.core.hints import HintCleaner
from agenttx.effects.channels import Channel, JsonlChannel
from agenttx.effects.dispatcher import OutboxDispatcher
from agenttx.store.contract import OutboxRow, Store
from agenttx.store.factory import open_store
from agenttx.tools.builtin import BUILTIN_TOOLS
from agenttx.tools.builtin.fs import RESTORE_HANDLER, restore_file
from agenttx.tools.contract import Tool
from agenttx.tools.registry import ToolRegistry, load_tools
from agenttx.types import RollbackPolicy

log = logging.getLogger("agenttx")

DEFAULT_URL = "sqlite:///agenttx-data/agenttx.db"
RECOVER_EVERY_S = 5.0  # how often a running engine looks for work a dead process left behind
REQUEST_TTL_S = 86_400.0  # how long a stored reply answers a retried request_id


class Engine(CoreEngine):
    dispatcher: OutboxDispatcher

    @classmethod
    async def open(
        cls,
        url: str = DEFAULT_URL,
        *,
        fs_root: str | Path | None = None,
        outbox_path: str | Path | None = None,
        tools: Iterable[Tool] = (),
        tool_modules: Iterable[str] = (),
        channels: Mapping[str, Channel] | None = None,
        policy: RollbackPolicy | None = None,
        sync_writes: bool = False,
        step_timeout_s: float = 30.0,
        tx_idle_timeout_secs: float = 900.0,
        compensation_retries: int = 3,
        max_constraints: int = 32,
        hint_rule_files: Sequence[str | Path] = (),
        tenant: str = "default",
        clock: Clock = time.time,
        background: bool = True,
        dispatch_lease_secs: float = 30.0,
        dispatch_max_attempts: int = 8,
        dispatch_backoff_s: float = 0.5,
        store: Store | None = None,
    ) -> Engine:
        """Open an engine. Relative paths default next to the SQLite file: ``files/`` for the
        fs sandbox and ``outbox.jsonl`` for effects on channels without a dispatcher."""
        store = store or open_store(url, sync_writes=sync_writes)
        await store.open()
        base = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite") else Path()
        registry = ToolRegistry(BUILTIN_TOOLS)
        registry.register_undo(RESTORE_HANDLER, restore_file)
        for t in tools:
            registry.register(t)
        for spec in tool_modules:
            for t in load_tools(spec):
                registry.register(t)
        config = EngineConfig(
            fs_root=Path(fs_root) if fs_root is not None else base / "files",
            step_timeout_s=step_timeout_s,
            tx_idle_timeout_secs=tx_idle_timeout_secs,
            compensation_retries=compensation_retries,
            max_constraints=max_constraints,
            default_policy=policy or RollbackPolicy(),
            tenant=tenant,
            owner=new_owner(),
        )
        engine = cls(
            store,
            registry,
            config,
            cleaner=HintCleaner(hint_rule_files),
            controller=RollbackController(),
            clock=clock,
        )
        outbox = Path(outbox_path) if outbox_path is not None else base / "outbox.jsonl"
        engine.dispatcher = OutboxDispatcher(
            store,
            channels or {},
            default=JsonlChannel(outbox),
            clock=clock,
            lease_secs=dispatch_lease_secs,
            max_attempts=dispatch_max_attempts,
            backoff_base_s=dispatch_backoff_s,
        )
        engine._stop = asyncio.Event()
        engine._tasks = []
        LIVE_OWNERS.add(config.owner)
        if not store.shared:
            # This process alone serves the store: effects a dead predecessor had claimed
            # (mid-delivery, or committed and not yet sent) go out now, not after the lease.
            await store.release_claims(now=clock())
        await engine.recover()
        if background:
            engine.start_background()
        return engine

    _stop: asyncio.Event
    _tasks: list[asyncio.Task[Any]]

    def start_background(self) -> None:
        self._tasks.append(asyncio.create_task(self.dispatcher.run(self._stop)))
        self._tasks.append(asyncio.create_task(self._maintenance()))

    async def _maintenance(self) -> None:
        # The reaper ticks every timeout/4, clamped to 50 ms – 60 s (the reference's cadence);
        # old state versions are pruned at most once a minute.
        idle = self.config.tx_idle_timeout_secs
        tick = min(max(idle / 4, 0.05), RECOVER_EVERY_S) if idle > 0 else RECOVER_EVERY_S
        last_prune = 0.0
        last_recover = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), tick)
            if self._stop.is_set():
                return
            try:
                if idle > 0:
                    await self.reap_idle()
                if time.monotonic() - last_recover >= RECOVER_EVERY_S:
                    # Another process or replica may have died mid-step or mid-rewind.
                    last_recover = time.monotonic()
                    await self.recover()
                if time.monotonic() - last_prune >= 60.0:
                    last_prune = time.monotonic()
                    await self.prune_versions()
                    # Replies kept for request_id retries expire after a day.
                    await self.store.prune_requests(self.clock() - REQUEST_TTL_S)
            except Exception:
                log.exception("maintenance pass failed")

    def _claim_until(self, now: float) -> float:
        return now + self.dispatcher.lease_secs

    async def _release(self, rows: list[OutboxRow]) -> tuple[int, list[str]]:
        # Try the transaction's effects once right away (the commit claimed them, so no
        # background pass takes them first), so the commit reply says how many went out;
        # failures go back to the queue for the background dispatcher's retries.
        if not rows:
            return 0, []
        await leave_eager()  # channels are user code, under a delivery timeout
        result = await self.dispatcher.deliver_now(rows)
        self.dispatcher.wake()
        return result

    async def close(self) -> None:
        LIVE_OWNERS.discard(self.config.owner)
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.store.close()

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
