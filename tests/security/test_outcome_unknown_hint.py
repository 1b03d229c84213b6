"""The hint of an OUTCOME_UNKNOWN step says what the agent can do next — reconcile the step
(happened / not happened) or roll back — never "retry the same step", which is refused
until the outcome is settled. Both ways of getting there: a timed-out or uncertain outside
call, and a step a dead process left running."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import agenttx
from agenttx import StepStatus, TxStatus
from agenttx.core.recovery import outcome_unknown_hint


def assert_says_what_to_do(hint: str) -> None:
    assert hint.startswith("Hint: ")
    assert len(hint) <= 240
    assert "\n" not in hint
    assert "retry" not in hint.lower()
    assert "reconcile" in hint
    assert "happened / not happened" in hint
    assert "roll back" in hint


@agenttx.tool(name="pay.slow", effect="irreversible", timeout=0.05)
async def pay_slow(ctx: agenttx.ToolContext, amount: int) -> dict[str, int]:
    """A payment gateway that does not answer in time."""
    await asyncio.sleep(5)
    return {"paid": amount}


@agenttx.tool(name="pay.unsure", effect="irreversible")
async def pay_unsure(ctx: agenttx.ToolContext, amount: int) -> dict[str, int]:
    raise agenttx.UncertainOutcome("gateway closed the connection after the request was sent")


@pytest.mark.parametrize("tool", ["pay.slow", "pay.unsure"])
async def test_the_hint_of_an_unknown_outcome_says_reconcile_or_roll_back(
    open_engine: Any, tool: str
) -> None:
    engine = await open_engine(tools=[pay_slow, pay_unsure])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, tool, {"amount": 10})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    assert_says_what_to_do(r.clean_hint)
    assert "step 1" in r.clean_hint
    # The history shows the same hint.
    info = await engine.get_transaction(tx)
    assert_says_what_to_do(info.steps[-1].clean_hint)
    # What the hint says works: rolling back ends the transaction cleanly.
    assert (await engine.rollback(tx)).rolled_back
    assert (await engine.get_transaction(tx)).status is TxStatus.ROLLED_BACK


async def test_reconciling_as_the_hint_says_lets_the_step_be_sent_again(open_engine: Any) -> None:
    engine = await open_engine(tools=[pay_slow])
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "pay.slow", {"amount": 10})
    assert r.status is StepStatus.OUTCOME_UNKNOWN
    with pytest.raises(agenttx.OutcomeUnknownPending):
        await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    info = await engine.resolve_outcome(tx, 1, happened=False)
    assert info.next_step_id == 1
    again = await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
    assert again.status is StepStatus.SUCCESS


def test_a_long_cause_is_shortened_so_the_hint_keeps_its_advice() -> None:
    hint = outcome_unknown_hint(7, "connection reset\n" + "x" * 500)
    assert_says_what_to_do(hint)
    assert "step 7" in hint


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import agenttx

    @agenttx.tool(name="ledger.post", effect="compensatable")
    async def post(ctx, entry: str) -> dict:
        await ctx.register_undo({"entry": entry})
        Path(sys.argv[2]).write_text("running")
        await asyncio.sleep(60)
        return {"posted": entry}

    @post.undo
    async def unpost(ctx, entry: str) -> None:
        pass

    async def main() -> None:
        engine = await agenttx.Engine.open(sys.argv[1], tools=[post], background=False)
        tx = (await engine.begin()).transaction_id
        Path(sys.argv[3]).write_text(tx)
        await engine.execute_step(tx, 1, "ledger.post", {"entry": "e-1"})

    asyncio.run(main())
    """
)


async def test_a_step_a_killed_process_left_running_gets_the_same_advice(
    open_engine: Any, store_url: str, tmp_path: Path
) -> None:
    url = store_url
    running, tx_file = tmp_path / "running", tmp_path / "tx"
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WORKER,
        url,
        str(running),
        str(tx_file),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not running.exists():
            assert worker.returncode is None, "the worker exited before its step ran"
            assert time.monotonic() < deadline, "the worker never started its step"
            await asyncio.sleep(0.02)
    finally:
        worker.kill()  # SIGKILL: the process dies mid-step, as in a crash
        await worker.communicate()
    tx = tx_file.read_text()
    engine = await open_engine(background=False)  # recovery runs on open
    info = await engine.get_transaction(tx)
    assert info.outcome_unknown_step == 1
    assert info.steps[-1].status == StepStatus.OUTCOME_UNKNOWN.value
    assert_says_what_to_do(info.steps[-1].clean_hint)
