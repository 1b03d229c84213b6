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
import contextlib
import gc
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

__all__ = [
    "INLINE_HINT_CHARS",
    "INLINE_JSON_CHARS",
    "LARGE_HISTORY_ATTEMPTS",
    "bulk_allocation",
    "by_size",
    "long_history",
    "share_interpreter_promptly",
]

T = TypeVar("T")

# Up to these sizes the work takes well under a millisecond (measured: the cleaner at 8 Ki
# characters ~0.3 ms, parsing 64 KiB of JSON ~0.3 ms); past them it goes to a thread.
INLINE_HINT_CHARS = 8 << 10
INLINE_JSON_CHARS = 64 << 10
# A history of more attempts than this is read with ``Store.load_steps(large=True)``: its rows
# are fetched and decoded off the loop. The store cannot tell a read's size before running it,
# and the row's attempt counter is what the caller already holds; 16 rows of ordinary steps
# take well under a millisecond to read.
LARGE_HISTORY_ATTEMPTS = 16


def long_history(next_step_id: int, body: Mapping[str, Any]) -> bool:
    """True iff the transaction whose stored row has this ``next_step_id`` and body may have
    more than ``LARGE_HISTORY_ATTEMPTS`` attempts: the live steps are ``next_step_id - 1``, and
    the body's ``step_seq`` counts every attempt, failed and rewound ones too, as of the last
    write that changed the body (a plain successful step leaves the body as it was)."""
    attempts = max(next_step_id - 1, int(body.get("step_seq", 0)))
    return attempts > LARGE_HISTORY_ATTEMPTS


class _CollectorPause:
    """Pauses the cyclic garbage collector while any thread builds a large acyclic value.

    Parsing a long history allocates about a million objects; each allocation burst runs the
    collector, and its full collections walk the whole heap while holding the interpreter:
    80-140 ms at a time in which the event loop cannot run (measured on a 3 MB history). The
    values built here (parsed JSON, views) hold no reference cycles, so reference counting
    frees what dies and the collector has nothing to find; it resumes as soon as the last
    builder is done, and stays off if something else had turned it off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._resume = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._resume:
                    gc.enable()


bulk_allocation = _CollectorPause()

# How long a thread may keep the interpreter while another thread waits for it. The event loop
# lets go of it at every socket and SQLite call and must then wait for it back; at CPython's
# default of 5 ms, while a worker thread built a long history's reply, a small call of another
# client (~20 such hand-backs) waited 100-140 ms; at 1 ms, 65-80 ms, most of it single C
# calls. It costs the common case nothing measurable: ``ExecuteStep`` over gRPC through
# ``agenttx serve``'s stack, p50 1,881 → 1,861 µs, within noise (``benchmarks.ab
# grpc_loopback``, ``benchmarks/results/ab_grpc_loopback.md``).
SWITCH_INTERVAL_S = 0.001


def share_interpreter_promptly() -> None:
    """Set the interpreter's switch interval to ``SWITCH_INTERVAL_S`` for this process: for
    the commands that serve (``agenttx serve``, ``agenttx mcp``), whose process is theirs;
    an embedding application keeps its own setting."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


async def by_size(size: int, limit: int, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``: inline when ``size`` <= ``limit``, else on a worker thread."""
    if size <= limit:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
