"""run_detached: an engine call the caller's cancellation cannot stop half-way."""

from __future__ import annotations

import asyncio

import pytest

from agenttx.api.detached import run_detached


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
