"""Waiting for a condition in a test, with a deadline instead of a count of tries.

A loop of ``for _ in range(100): ...; sleep(0.05)`` is a bound in disguise (5 s on a fast
machine, longer on a slow one, and it gives up silently, leaving the failure to a later
assertion). ``eventually`` polls until the condition holds and fails naming what it waited
for. The deadline is generous (60 s): a passing test never waits for it, and a busy CI
machine (2 cores, a server or a downstream process starting) is slow, not broken.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

DEADLINE_S = 60.0


async def eventually(
    condition: Callable[[], Any | Awaitable[Any]],
    what: str,
    *,
    within: float = DEADLINE_S,
    interval: float = 0.05,
) -> Any:
    """Poll ``condition`` (plain or async) until it returns something true; return that.
    Fails with ``what`` once ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for: {what}")
        await asyncio.sleep(interval)
