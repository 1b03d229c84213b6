"""CPU-heavy step work off the event loop, chosen by the size of its input.

Parsing a large arguments text, resolving references into large outputs and cleaning a long
error text each cost milliseconds; on the event loop that time is every other client's wait.
Small inputs (nearly every call) run inline, where a thread hop would cost more than the
work; past a threshold the work runs on the default executor's threads. Python hands the
interpreter back and forth between threads every few milliseconds, so the loop keeps serving
while one of these runs — provided no single C call inside it runs long, which is why the
hint rules are linear and bounded per line (``hints.cleaner``) and why the work is split into
many short calls rather than one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

__all__ = ["INLINE_HINT_CHARS", "INLINE_JSON_CHARS", "by_size"]

T = TypeVar("T")

# Up to these sizes the work takes well under a millisecond (measured: the cleaner at 8 Ki
# characters ~0.3 ms, parsing 64 KiB of JSON ~0.3 ms); past them it goes to a thread.
INLINE_HINT_CHARS = 8 << 10
INLINE_JSON_CHARS = 64 << 10


async def by_size(size: int, limit: int, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``: inline when ``size`` <= ``limit``, else on a worker thread."""
    if size <= limit:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
