"""run_detached: an engine call the caller's cancellation cannot stop half-way; leave_eager:
code bound to the running task sees the call's own task."""

from __future__ import annotations

import asyncio

import pytest

from agenttx.core.eager import leave_eager, run_detached


async def test_a_call_that_never_suspends_runs_in_the_callers_task() -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def call() -> int:
        seen.append(asyncio.current_task())
        return 42

    assert await run_detached(call()) == 42
    assert seen == [caller]  # no task was made for it


async def test_errors_arrive_as_from_await() -> None:
    async def sync_error() -> None:
        raise KeyError("now")

    async def later_error() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    with pytest.raises(KeyError):
        await run_detached(sync_error())
    with pytest.raises(ValueError, match="later"):
        await run_detached(later_error())


async def test_results_and_exceptions_of_awaited_futures_are_passed_back_in() -> None:
    loop = asyncio.get_running_loop()
    ok: asyncio.Future[str] = loop.create_future()
    bad: asyncio.Future[str] = loop.create_future()

    async def call() -> list[str]:
        got = [await ok]
        try:
            await bad
        except RuntimeError as exc:
            got.append(f"caught {exc}")
        await asyncio.sleep(0.01)
        return got

    loop.call_later(0.01, ok.set_result, "value")
    loop.call_later(0.02, bad.set_exception, RuntimeError("boom"))
    assert await run_detached(call()) == ["value", "caught boom"]


async def test_cancelling_the_caller_does_not_stop_the_call() -> None:
    gate = asyncio.Event()
    finished = asyncio.Event()
    steps: list[str] = []

    async def call() -> str:
        steps.append("started")
        await gate.wait()
        steps.append("finished")
        finished.set()
        return "done"

    caller = asyncio.create_task(run_detached(call()))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert steps == ["started"]
    gate.set()
    await asyncio.wait_for(finished.wait(), 1)
    assert steps == ["started", "finished"]


async def test_leave_eager_moves_the_call_into_its_own_task_first() -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def call() -> str:
        seen.append(asyncio.current_task())  # eager: the caller's task
        await leave_eager()
        seen.append(asyncio.current_task())  # its own task from here on
        try:
            async with asyncio.timeout(0.01):  # binds to the call's task: works
                await asyncio.sleep(1)
        except TimeoutError:
            return "timed out"
        return "not timed out"

    assert await run_detached(call()) == "timed out"
    assert seen[0] is caller
    assert seen[1] is not caller
    assert seen[1] is not None
    # Outside run_detached it is a no-op: no suspension, same task.
    before = asyncio.current_task()
    await leave_eager()
    assert asyncio.current_task() is before
