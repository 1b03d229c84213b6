"""Cancelling a running tool on its caller's word, so the step fails instead of hanging on.

An engine call is detached from its caller (``eager.py``): a caller that goes away does not stop
a step half-way. A caller that *asks* to stop one (an MCP ``notifications/cancelled`` for its
``run_step``) is different: the tool it started is cancelled, and the step ends as a failure
like any other — hint, controller decision, rewind, its undo records run.

``RunningTools`` knows the task each running tool is awaited in, by (transaction, step). Only
tools that can wait on something are tracked: a bounded tool (managed state only) never
suspends, so there is nothing to cancel while it runs.

Invariant: ``StepCancelled`` is raised iff ``cancel`` reached the tool's task while it was
tracked; a cancellation from anywhere else (a shutdown) stays a ``CancelledError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class StepCancelled(Exception):
    """The step's tool was cancelled at its caller's request."""


@dataclass
class _Run:
    task: asyncio.Task[object]
    requested: bool = False  # true iff ``cancel`` cancelled this task


class RunningTools:
    def __init__(self) -> None:
        # (transaction id, step id) → the running tool's task; one entry per running step (calls
        # on one transaction run one at a time, so a key is never taken twice).
        self._running: dict[tuple[str, int], _Run] = {}

    @contextmanager
    def track(self, transaction_id: str, step_id: int) -> Iterator[None]:
        """Around the await of a tool, in the task it runs in; turns our cancellation into
        ``StepCancelled``."""
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing could cancel it anyway
            yield
            return
        key = (transaction_id, step_id)
        run = _Run(task)
        self._running[key] = run
        try:
            yield
        except asyncio.CancelledError:
            # uncancel() == 0: ours was the only cancellation; any other one must propagate.
            if run.requested and task.uncancel() == 0:
                raise StepCancelled from None
            raise
        else:
            if run.requested:
                # The tool swallowed the cancellation and returned: leave no pending count
                # behind for the timeouts the step still runs under.
                task.uncancel()
        finally:
            if self._running.get(key) is run:
                del self._running[key]

    def cancel(self, transaction_id: str, step_id: int) -> bool:
        """Cancel the tool step ``step_id`` of the transaction is running; False iff none is
        running (it finished, never started, or cannot suspend)."""
        run = self._running.get((transaction_id, step_id))
        if run is None or run.requested:
            return run is not None
        run.requested = True
        run.task.cancel("agenttx: step cancelled by its caller")
        return True
